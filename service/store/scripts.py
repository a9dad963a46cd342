"""The Lua scripts that make a step on the store atomic: one round trip, nothing seen half done.

Each takes its keys from the caller (`Keys` spells them) and says what KEYS and ARGV it expects.
"""

# A class's state in one atomic read: its version, the classroom, its active passage and the ids of its
# passages (a pupil may ask about one they were reading when the teacher published another).
# KEYS: version, classroom, active passage id, passages. ARGV: the passage key's prefix (the passage's key is
# known only inside the script; a single Redis, not a cluster, allows that).
CLASS_STATE = """
local passage_id = redis.call('GET', KEYS[3])
local passage = false
if passage_id then passage = redis.call('GET', ARGV[1] .. passage_id) end
return {redis.call('GET', KEYS[1]) or '0', redis.call('GET', KEYS[2]), passage, redis.call('LRANGE', KEYS[4], 0, -1)}
"""

# Fair turns on one replica (service.settings.TurnSettings): `running` holds the questions under way with the
# time their turn lapses (a process that died holding one frees it then), `classes` the classes waiting in
# the order of their turns, and `<prefix><classroom id>` each class's line. A class is in `classes` while
# its line is not empty.
TURNS = """
local function turn_place(classes, prefix, classroom, question)
  local mine = redis.call('LRANGE', prefix .. classroom, 0, -1)
  local k = nil
  for i, id in ipairs(mine) do if id == question then k = i break end end
  if not k then return 0 end
  local ahead, before = 0, true
  for _, other in ipairs(redis.call('LRANGE', classes, 0, -1)) do
    if other == classroom then before = false else
      local n = redis.call('LLEN', prefix .. other)
      ahead = ahead + math.min(n, k - 1)
      if before and n >= k then ahead = ahead + 1 end
    end
  end
  return ahead + k
end
local function turn_grant(running, classes, prefix, bound, now, lapses, channel)
  redis.call('ZREMRANGEBYSCORE', running, '-inf', now)
  while redis.call('ZCARD', running) < bound do
    local classroom = redis.call('LPOP', classes)
    if not classroom then return end
    local question = redis.call('LPOP', prefix .. classroom)
    if question then
      if redis.call('LLEN', prefix .. classroom) > 0 then redis.call('RPUSH', classes, classroom) end
      redis.call('ZADD', running, lapses, question)
      redis.call('PUBLISH', channel, question)
    end
  end
end
local function turn_waiting(classes, prefix)
  local n = 0
  for _, classroom in ipairs(redis.call('LRANGE', classes, 0, -1)) do
    n = n + redis.call('LLEN', prefix .. classroom)
  end
  return n
end
"""

# A question's record stored and indexed, and the teacher's page told.
# KEYS (from the first): question, class questions, by name, passage questions, pupil questions, recent
# questions, class events. ARGV (from the first): record JSON, question id, its score, oldest recent score kept.
STORE_RECORD = """
local function store_record(k, a)
  redis.call('SET', KEYS[k], ARGV[a])
  for i = k + 1, k + 5 do redis.call('ZADD', KEYS[i], ARGV[a + 2], ARGV[a + 1]) end
  redis.call('ZREMRANGEBYSCORE', KEYS[k + 5], 0, ARGV[a + 3])
  redis.call('PUBLISH', KEYS[k + 6], ARGV[a])
end
"""

# A question's admission in one atomic step, so a question costs one round trip before the model is asked:
# the session still exists, the class is as the caller read it (else 'stale': read it again), the pupil has no
# other answer streaming, is within the rate limit (a moving window: the times of their last admitted
# questions), its turn on the replica (now: 'ok'; else its place in line, or 'full'), and the question is
# stored and announced. Run twice (a reply lost to a Redis restart and the command retried), it admits once.
# KEYS: 1 session, 2 class version, 3 pupil answering, 4 pupil asked, 5 question, 6 class questions,
#       7 by name, 8 passage questions, 9 pupil questions, 10 recent questions, 11 class events,
#       12 turns running, 13 turns classes, 14 answers being written.
# ARGV: 1 expected version, 2 now (s), 3 window (s), 4 most questions in it, 5 the writer's lease (s),
#       6 record JSON, 7 question id, 8 its score (asked at), 9 oldest recent score kept,
#       10 most running on the replica (0: no turns), 11 most waiting, 12 when a turn taken now lapses,
#       13 the class lines' key prefix, 14 classroom id, 15 the turns' channel.
ADMIT = (
    TURNS
    + STORE_RECORD
    + """
local bound = tonumber(ARGV[10])
if redis.call('EXISTS', KEYS[1]) == 0 then return {'no_session'} end
if redis.call('GET', KEYS[3]) == ARGV[7] then
  local place = bound > 0 and turn_place(KEYS[13], ARGV[13], ARGV[14], ARGV[7]) or 0
  if place > 0 then return {'queued', place} end
  return {'ok'}
end
if (redis.call('GET', KEYS[2]) or '0') ~= ARGV[1] then return {'stale'} end
if not redis.call('SET', KEYS[3], ARGV[7], 'NX', 'EX', ARGV[5]) then return {'busy'} end
local most = tonumber(ARGV[4])
local oldest = redis.call('LINDEX', KEYS[4], most - 1)
if oldest and tonumber(oldest) > tonumber(ARGV[2]) - tonumber(ARGV[3]) then
  redis.call('DEL', KEYS[3])
  return {'limited', oldest}
end
local place = 0
if bound > 0 then
  turn_grant(KEYS[12], KEYS[13], ARGV[13], bound, ARGV[2], ARGV[12], ARGV[15])
  if redis.call('ZCARD', KEYS[12]) < bound then
    redis.call('ZADD', KEYS[12], ARGV[12], ARGV[7])
  elseif turn_waiting(KEYS[13], ARGV[13]) >= tonumber(ARGV[11]) then
    redis.call('DEL', KEYS[3])
    return {'full'}
  else
    if redis.call('RPUSH', ARGV[13] .. ARGV[14], ARGV[7]) == 1 then redis.call('RPUSH', KEYS[13], ARGV[14]) end
    place = turn_place(KEYS[13], ARGV[13], ARGV[14], ARGV[7])
  end
end
redis.call('LPUSH', KEYS[4], ARGV[2])
redis.call('LTRIM', KEYS[4], 0, most - 1)
redis.call('EXPIRE', KEYS[4], ARGV[3])
store_record(5, 6)
redis.call('ZADD', KEYS[14], tonumber(ARGV[2]) + tonumber(ARGV[5]), ARGV[7])
if place > 0 then return {'queued', place} end
return {'ok'}
"""
)

# A question's final record added to the operators' figures (service/store/stats.py says how they are kept): its
# counts added to its scopes' fields of its hour's series (one scope), its hour's hash (two), its ten minutes'
# (two) and its minute's (two), all kept until a day after the hour. One HINCRBY a figure that is not 0: a
# question costs Redis ~0.19 ms of CPU here, where merging packed tallies cost ~1.2 ms (a class's histogram
# parsed and written back seven times: benchmarks/tallies_lua.py).
# KEYS (from the k-th): the hour's, ten minutes', minute's and series' hashes. ARGV (from the a-th): the
# question's five counts (questions, answered, errors, prompt tokens, cached tokens), its time-to-first-token
# bucket ('' if none), when the hashes expire (epoch s), the seven scopes (series, then two a hash).
STATS = """
local FIGURES = {'q', 'a', 'e', 'p', 'c'}
local function stats_add(k, a)
  local bucket = ARGV[a + 5]
  for i, hash in ipairs({3, 0, 0, 1, 1, 2, 2}) do
    local key, scope = KEYS[k + hash], ARGV[a + 6 + i] .. '|'
    for j = 1, 5 do
      local n = ARGV[a + j - 1]
      if n ~= '0' then redis.call('HINCRBY', key, scope .. FIGURES[j], n) end
    end
    if bucket ~= '' then redis.call('HINCRBY', key, scope .. bucket, 1) end
  end
  for hash = 0, 3 do redis.call('EXPIREAT', KEYS[k + hash], ARGV[a + 6]) end
end
"""

# A question refused at admission (the line was full), stored as such, and counted in the operators' figures
# unless it was stored already (run twice). KEYS and ARGV as STORE_RECORD's, then KEYS 8-11 and ARGV 5-18
# STATS's.
REFUSE = (
    STORE_RECORD
    + STATS
    + """
local new = redis.call('EXISTS', KEYS[1]) == 0
store_record(1, 1)
if new then stats_add(8, 5) end
return 1
"""
)

# A question's final record stored and announced, the pupil free to ask again (if the claim is still theirs),
# and its turn (running or still in line) given to the next in line. It counts in the operators' figures if the
# record it replaces is still being answered: run twice, or after the sweeper finished it, it counts no more.
# KEYS: 1 question, 2 class events, 3 pupil answering, 4 turns running, 5 turns classes, 6 answers being
#       written, 7-10 STATS's.
# ARGV: 1 record JSON, 2 question id, 3 most running (0: it took no turn), 4 the class lines' key prefix,
#       5 classroom id, 6 now (s), 7 when a turn given now lapses, 8 the turns' channel, 9-22 STATS's.
FINISH = (
    TURNS
    + STATS
    + """
local stored = redis.call('GET', KEYS[1])
local ends = stored and cjson.decode(stored)['status'] == 'answering'
redis.call('SET', KEYS[1], ARGV[1])
if ends then stats_add(7, 9) end
redis.call('PUBLISH', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[6], ARGV[2])
if redis.call('GET', KEYS[3]) == ARGV[2] then redis.call('DEL', KEYS[3]) end
local bound = tonumber(ARGV[3])
if bound > 0 then
  if redis.call('ZREM', KEYS[4], ARGV[2]) == 0 then
    local line = ARGV[4] .. ARGV[5]
    if redis.call('LREM', line, 0, ARGV[2]) > 0 and redis.call('LLEN', line) == 0 then
      redis.call('LREM', KEYS[5], 0, ARGV[5])
    end
  end
  turn_grant(KEYS[4], KEYS[5], ARGV[4], bound, ARGV[6], ARGV[7], ARGV[8])
end
return 1
"""
)

# An abandoned answer's record finished as cut short, unless it changed since it was read: compare and set.
# It leaves the index of answers being written, unless it changed and is still being written (its process
# stored more of its text since: it is alive after all). Finished, it counts in the operators' figures.
# KEYS: 1 question, 2 class events, 3 answers being written, 4-7 STATS's. ARGV: 1 the record as read, 2 as
# finished, 3 id, 4-17 STATS's.
ABANDON = (
    STATS
    + """
local stored = redis.call('GET', KEYS[1])
if stored ~= ARGV[1] then
  -- still being written (its process stores the text so far): the next sweep looks again
  if stored and cjson.decode(stored)['status'] == 'answering' then return 0 end
  redis.call('ZREM', KEYS[3], ARGV[3])
  return 0
end
redis.call('ZREM', KEYS[3], ARGV[3])
redis.call('SET', KEYS[1], ARGV[2])
redis.call('PUBLISH', KEYS[2], ARGV[2])
stats_add(4, 4)
return 1
"""
)

# An answer's text so far stored in its record, only while the record says it is being written (a late write
# never undoes its end, nor a sweeper's); and whether its pupil asked to stop it.
# KEYS: 1 question, 2 its stop key. ARGV: 1 record JSON.
PROGRESS = """
local stored = redis.call('GET', KEYS[1])
if stored and cjson.decode(stored)['status'] == 'answering' then redis.call('SET', KEYS[1], ARGV[1]) end
return redis.call('EXISTS', KEYS[2])
"""

# Where a waiting question stands: 0 once its turn has come (or it is in no line: it goes ahead), else its
# place. Turns that lapsed are given on first, so a line behind a process that died moves on.
# KEYS: turns running, turns classes. ARGV: question id, the class lines' key prefix, classroom id, most
# running, now (s), when a turn given now lapses, the turns' channel.
TURN_PLACE = (
    TURNS
    + """
turn_grant(KEYS[1], KEYS[2], ARGV[2], tonumber(ARGV[4]), ARGV[5], ARGV[6], ARGV[7])
return turn_place(KEYS[2], ARGV[2], ARGV[3], ARGV[1])
"""
)

# The writers' heartbeat: each process renews, every third of a lease, the lease of every answer it writes, in
# one round trip. An answer's lease keeps it out of the sweeper's reach and holds its pupil's one-at-a-time
# claim; one whose process died lapses within a lease. An answer that ended meanwhile is left alone (not
# indexed again, nor a claim of the pupil's next question renewed).
# KEYS: 1 answers being written. ARGV: 1 when the leases renewed now lapse, 2 the lease (s), then for each
# answer its question id and its pupil's claim key.
RENEW = """
local renewed = 0
for i = 3, #ARGV, 2 do
  if redis.call('ZADD', KEYS[1], 'XX', 'CH', ARGV[1], ARGV[i]) == 1 then renewed = renewed + 1 end
  if redis.call('GET', ARGV[i + 1]) == ARGV[i] then redis.call('EXPIRE', ARGV[i + 1], ARGV[2]) end
end
return renewed
"""

# The prober's lease: held by `ARGV[1]` for `ARGV[2]` ms from now if it holds it or nobody does. Returns the
# holder. KEYS: the lease.
HOLD_LEASE = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
elseif not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  holder = ARGV[1]
end
return holder
"""

# The prober's lease given back by its holder (`ARGV[1]`) as its process stops, so another takes it at once.
# KEYS: the lease.
RELEASE_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
