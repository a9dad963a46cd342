"""All state, in Redis. This module owns every key name; values are JSON of the models in `records`.

Keys:
    teacher:{id}                          Teacher
    teacher-email:{email}                 teacher id
    teacher:{id}:classrooms               sorted set of classroom ids, by time created
    session:teacher:{sha256(token)}       teacher id, expiring
    session:pupil:{sha256(token)}         PupilSession, expiring
    cls:{id}                              Classroom
    joincode:{code}                       classroom id
    cls:{id}:passages                     list of passage ids, oldest first
    cls:{id}:passages:former              list of the ids of passages edited or deleted: out of the class's
                                          list, still stored for the questions asked about them
    cls:{id}:active_passage               passage id that pupils ask about
    cls:{id}:version                      bumped by every write to the class, its passages or its active one
    classes:changed                       pub/sub channel: the id of a class whose version was just bumped
    passage:{id}                          Passage
    q:{id}                                QuestionRecord (while answering, with the text so far: answer.progress_s)
    q:{id}:stop                           set, for a while, when the pupil stops the answer (its writer checks)
    answers:stop                          pub/sub channel: the id of a question whose pupil stopped its answer
    cls:{id}:questions                    sorted set of question ids, by time asked (also below)
    cls:{id}:questions:pupil:{name}       the same, for one display name (lower case): its first pupil's
    cls:{id}:questions:pupil#{n}:{name}   the same, for the n-th pupil (n > 1) who joined with that name
    cls:{id}:pupil_numbers                hash: display name (lower case) -> how many pupils joined with it
    cls:{id}:pupils                       hash: "{n}:{name in lower case}" -> the name as that pupil typed it
    passage:{id}:questions                the same, for one passage
    pupil:{id}:questions                  the same, for one pupil session: their own history
    pupil:{id}:answering                  the question id whose answer streams (one at a time), expiring
    pupil:{id}:asked                      when the pupil's last questions were admitted (the rate limit)
    cls:{id}:events                       pub/sub channel: questions asked and answered, for the teacher
    classrooms                            set of every classroom id (for warming active passages)
    questions:recent                      sorted set of question ids of the last day, by time (operators' figures)
    backends:config                       BackendConfig: variants, replicas, active variant, canary
    passage:{id}:warmed                   replica URLs where the passage was last sent ahead of pupils
    warmup:fleet:{digest}                 set, briefly, by the process that re-warms for one state of the fleet
    turns:{replica}:running               sorted set of the question ids running on a replica, by when their turn lapses
    turns:{replica}:classes               list of the classroom ids with questions waiting: whose turn is next
    turns:{replica}:waiting:{classroom}   list of one class's question ids waiting, first come first
    turns:granted                         pub/sub channel: the id of a question whose turn has come
"""

import asyncio
import hashlib
import json
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.exceptions import WatchError

from service.backends.routing import BackendConfig
from service.errors import ClassroomNotFound, PassageInUse, PassageNotFound
from service.records import (
    Classroom,
    Passage,
    PupilSession,
    QuestionRecord,
    QuestionStatus,
    Teacher,
    pupil_label,
)

# Easy to read aloud: no 0/O, 1/I/L. 31^8 codes, so guessing one is hopeless.
JOIN_CODE_ALPHABET = "23456789ABCDEFGHJKMNPQRSTUVWXYZ"
JOIN_CODE_LENGTH = 8
# How far back operators' figures reach: the recent-questions index keeps a day.
RECENT_S = 24 * 3600
# How long a command waits for a free connection of the pool before it fails.
POOL_WAIT_S = 10.0
# A deleted class's version key outlives it this long, so that a process holding the class sees it changed.
DELETED_VERSION_S = 24 * 3600
# Records read at once when a class is deleted.
DELETE_BATCH = 500


@dataclass(frozen=True)
class RateLimit:
    """At most `most` questions admitted per pupil within any `window_s` seconds."""

    most: int
    window_s: int = 60


class Keys:
    @staticmethod
    def teacher(teacher_id: str) -> str:
        return f"teacher:{teacher_id}"

    @staticmethod
    def teacher_email(email: str) -> str:
        return f"teacher-email:{email.lower()}"

    @staticmethod
    def teacher_classrooms(teacher_id: str) -> str:
        return f"teacher:{teacher_id}:classrooms"

    @staticmethod
    def teacher_session(token: str) -> str:
        return f"session:teacher:{_digest(token)}"

    @staticmethod
    def pupil_session(token: str) -> str:
        return f"session:pupil:{_digest(token)}"

    @staticmethod
    def classroom(classroom_id: str) -> str:
        return f"cls:{classroom_id}"

    @staticmethod
    def join_code(code: str) -> str:
        return f"joincode:{code}"

    @staticmethod
    def failed_attempts(kind: str, client: str) -> str:
        return f"failed:{kind}:{client}"

    @staticmethod
    def passages(classroom_id: str) -> str:
        return f"cls:{classroom_id}:passages"

    @staticmethod
    def former_passages(classroom_id: str) -> str:
        return f"cls:{classroom_id}:passages:former"

    @staticmethod
    def active_passage(classroom_id: str) -> str:
        return f"cls:{classroom_id}:active_passage"

    @staticmethod
    def class_version(classroom_id: str) -> str:
        return f"cls:{classroom_id}:version"

    @staticmethod
    def classes_changed() -> str:
        return "classes:changed"

    @staticmethod
    def passage(passage_id: str) -> str:
        return f"passage:{passage_id}"

    @staticmethod
    def question(question_id: str) -> str:
        return f"q:{question_id}"

    @staticmethod
    def answer_stop(question_id: str) -> str:
        return f"q:{question_id}:stop"

    @staticmethod
    def answer_stops() -> str:
        return "answers:stop"

    @staticmethod
    def questions(classroom_id: str) -> str:
        return f"cls:{classroom_id}:questions"

    @staticmethod
    def questions_by_name(classroom_id: str, pupil_name: str, number: int = 1) -> str:
        """The first pupil of a name keeps the key that names had before pupils were numbered."""
        who = "pupil" if number <= 1 else f"pupil#{number}"
        return f"cls:{classroom_id}:questions:{who}:{pupil_name.strip().lower()}"

    @staticmethod
    def pupil_numbers(classroom_id: str) -> str:
        return f"cls:{classroom_id}:pupil_numbers"

    @staticmethod
    def pupils(classroom_id: str) -> str:
        return f"cls:{classroom_id}:pupils"

    @staticmethod
    def passage_questions(passage_id: str) -> str:
        return f"passage:{passage_id}:questions"

    @staticmethod
    def pupil_questions(pupil_id: str) -> str:
        return f"pupil:{pupil_id}:questions"

    @staticmethod
    def pupil_answering(pupil_id: str) -> str:
        return f"pupil:{pupil_id}:answering"

    @staticmethod
    def pupil_asked(pupil_id: str) -> str:
        return f"pupil:{pupil_id}:asked"

    @staticmethod
    def events(classroom_id: str) -> str:
        return f"cls:{classroom_id}:events"

    @staticmethod
    def classrooms() -> str:
        return "classrooms"

    @staticmethod
    def recent_questions() -> str:
        return "questions:recent"

    @staticmethod
    def answering() -> str:
        """Questions whose answer is being written, by when it must have ended (asked + answer.longest_s): one
        still there after that was abandoned by a process that died, or that could not store its end."""
        return "questions:answering"

    @staticmethod
    def warmed(passage_id: str) -> str:
        return f"passage:{passage_id}:warmed"

    @staticmethod
    def fleet_warmup(fleet_state: str) -> str:
        return f"warmup:fleet:{_digest(fleet_state)}"

    @staticmethod
    def replica_burst(claim: str) -> str:
        """A warm-up burst claimed for one run of a replica (its URL and start time)."""
        return f"warmup:burst:{_digest(claim)}"

    @staticmethod
    def backend_config() -> str:
        return "backends:config"

    @staticmethod
    def turns_running(replica: str) -> str:
        return f"turns:{replica}:running"

    @staticmethod
    def turns_classes(replica: str) -> str:
        return f"turns:{replica}:classes"

    @staticmethod
    def turns_waiting_prefix(replica: str) -> str:
        """The key of a class's line is this and the classroom id (known to the scripts as an argument)."""
        return f"turns:{replica}:waiting:"

    @staticmethod
    def turns_granted() -> str:
        return "turns:granted"


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
# ARGV: 1 expected version, 2 now (s), 3 window (s), 4 most questions in it, 5 longest answer (s),
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

# A question refused at admission (the line was full), stored as such. KEYS and ARGV as STORE_RECORD's.
REFUSE = STORE_RECORD + "store_record(1, 1) return 1"

# A question's final record stored and announced, the pupil free to ask again (if the claim is still theirs),
# and its turn (running or still in line) given to the next in line.
# KEYS: 1 question, 2 class events, 3 pupil answering, 4 turns running, 5 turns classes, 6 answers being
#       written.
# ARGV: 1 record JSON, 2 question id, 3 most running (0: it took no turn), 4 the class lines' key prefix,
#       5 classroom id, 6 now (s), 7 when a turn given now lapses, 8 the turns' channel.
FINISH = (
    TURNS
    + """
redis.call('SET', KEYS[1], ARGV[1])
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
# stored more of its text since: it is alive after all).
# KEYS: 1 question, 2 class events, 3 answers being written. ARGV: 1 the record as read, 2 as finished, 3 id.
ABANDON = """
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
return 1
"""

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


@dataclass(frozen=True)
class ClassState:
    """A class as one atomic read found it, with the version that every write to it bumps."""

    version: int
    classroom: Classroom
    passage: Passage | None
    passage_ids: frozenset[str]


@dataclass(frozen=True)
class Admission:
    """What the admission of a question decided."""

    outcome: Literal["ok", "queued", "full", "no_session", "stale", "busy", "limited"]
    retry_after_s: float = 0.0
    # Queued: how many questions will have their turn before this one, plus one.
    place: int = 0


@dataclass(frozen=True, slots=True)
class TurnLine:
    """Where a question takes its turn: the replica's line, kept at most `bound` running."""

    replica: str
    bound: int
    most_waiting: int
    lapses_s: float

    def keys(self) -> list[str]:
        return [Keys.turns_running(self.replica), Keys.turns_classes(self.replica)]

    def args(self, classroom_id: str, now: float) -> list[str | float]:
        prefix = Keys.turns_waiting_prefix(self.replica)
        return [self.bound, prefix, classroom_id, now, now + self.lapses_s, Keys.turns_granted()]


NO_TURN_KEYS = ["turns:none:running", "turns:none:classes"]


def _class_changed(tx: Pipeline, classroom_id: str) -> None:
    """Every write to a class goes with this, in its transaction: the version that admissions check moves on,
    and every service process hears which class changed (its open pupils' pages are told)."""
    tx.incr(Keys.class_version(classroom_id))
    tx.publish(Keys.classes_changed(), classroom_id)


def _digest(token: str) -> str:
    # Session keys hold a hash of the token, so a copy of Redis hands no one a working session.
    return hashlib.sha256(token.encode()).hexdigest()


def _text(value: Any) -> str:
    """Redis replies are bytes; ids and keys are ASCII text."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _texts(values: Iterable[Any]) -> list[str]:
    return [_text(v) for v in values]


def new_id() -> str:
    return uuid.uuid4().hex


def new_token() -> str:
    return secrets.token_urlsafe(32)


def new_join_code() -> str:
    code = "".join(secrets.choice(JOIN_CODE_ALPHABET) for _ in range(JOIN_CODE_LENGTH))
    return f"{code[:4]}-{code[4:]}"


def normalize_join_code(typed: str) -> str:
    """What a pupil types, read kindly: any case, with or without the dash or spaces."""
    compact = "".join(ch for ch in typed.upper() if ch.isalnum())
    return f"{compact[:4]}-{compact[4:]}" if len(compact) == JOIN_CODE_LENGTH else compact


def connect(url: str, max_connections: int = 50) -> Redis:
    """A client that rides out a Redis restart: a command that meets a dropped connection is retried on a
    new one for about 5 s, so a pupil's question waits through a restart instead of failing. When all
    `max_connections` are busy (a class's burst), a command waits for one instead of failing."""
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=POOL_WAIT_S,
        retry=Retry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), retries=10),
        retry_on_error=[RedisConnectionError, RedisTimeoutError],
    )
    return Redis.from_pool(pool)  # closing the client closes its pool


async def open_connections(redis: Redis, count: int) -> None:
    """Open `count` connections of the client's pool now (they stay in it), rather than during a burst."""
    await asyncio.gather(*(redis.ping() for _ in range(count)))


class Store:
    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self._class_state = redis.register_script(CLASS_STATE)
        self._admit = redis.register_script(ADMIT)
        self._finish = redis.register_script(FINISH)
        self._refuse = redis.register_script(REFUSE)
        self._turn_place = redis.register_script(TURN_PLACE)
        self._abandon = redis.register_script(ABANDON)
        self._progress = redis.register_script(PROGRESS)

    # Teachers and their sessions

    async def add_teacher(self, teacher: Teacher) -> bool:
        """False if a teacher with that email exists already."""
        if not await self.redis.set(Keys.teacher_email(teacher.email), teacher.id, nx=True):
            return False
        await self.redis.set(Keys.teacher(teacher.id), teacher.model_dump_json())
        return True

    async def teacher_by_email(self, email: str) -> Teacher | None:
        teacher_id = await self.redis.get(Keys.teacher_email(email))
        return None if teacher_id is None else await self.get_teacher(_text(teacher_id))

    async def get_teacher(self, teacher_id: str) -> Teacher | None:
        raw = await self.redis.get(Keys.teacher(teacher_id))
        return None if raw is None else Teacher.model_validate_json(raw)

    async def teachers(self, teacher_ids: Iterable[str]) -> dict[str, Teacher]:
        """The teachers of these ids that exist, in one round trip."""
        ids = sorted(set(teacher_ids))
        raws = await self.redis.mget([Keys.teacher(i) for i in ids]) if ids else []
        return {i: Teacher.model_validate_json(raw) for i, raw in zip(ids, raws, strict=True) if raw is not None}

    async def start_teacher_session(self, teacher_id: str, lifetime: timedelta) -> str:
        token = new_token()
        await self.redis.set(Keys.teacher_session(token), teacher_id, ex=lifetime)
        return token

    async def teacher_of_session(self, token: str) -> Teacher | None:
        teacher_id = await self.redis.get(Keys.teacher_session(token))
        return None if teacher_id is None else await self.get_teacher(_text(teacher_id))

    async def end_teacher_session(self, token: str) -> None:
        await self.redis.delete(Keys.teacher_session(token))

    # Pupils' sessions

    async def start_pupil_session(self, session: PupilSession, lifetime: timedelta) -> str:
        token = new_token()
        await self.redis.set(Keys.pupil_session(token), session.model_dump_json(), ex=lifetime)
        return token

    async def join_pupil(self, session: PupilSession, lifetime: timedelta) -> tuple[str, PupilSession]:
        """Start a pupil's session with their number among the class's pupils of the same name (any case):
        HINCRBY hands each number out once, however many join at the same moment."""
        name = session.name.strip().lower()
        number = int(await self.redis.hincrby(Keys.pupil_numbers(session.classroom_id), name, 1))
        session = session.model_copy(update={"pupil_number": number})
        token = new_token()
        async with self.redis.pipeline(transaction=True) as tx:
            tx.set(Keys.pupil_session(token), session.model_dump_json(), ex=lifetime)
            tx.hset(Keys.pupils(session.classroom_id), f"{number}:{name}", session.name)
            await tx.execute()
        return token, session

    async def roster(self, classroom_id: str) -> list[tuple[str, int]]:
        """The names the class's pupils joined with, each with its number: ("Ada", 1), ("ada", 2)."""
        entries = await self.redis.hgetall(Keys.pupils(classroom_id))
        return [(_text(typed), int(_text(field).split(":", 1)[0])) for field, typed in entries.items()]

    async def pupil_of_session(self, token: str) -> PupilSession | None:
        raw = await self.redis.get(Keys.pupil_session(token))
        return None if raw is None else PupilSession.model_validate_json(raw)

    async def end_pupil_session(self, token: str) -> None:
        await self.redis.delete(Keys.pupil_session(token))

    # Classrooms

    async def create_classroom(self, teacher_id: str, name: str) -> Classroom:
        classroom_id = new_id()
        while True:
            classroom = Classroom(id=classroom_id, teacher_id=teacher_id, name=name, join_code=new_join_code())
            async with self.redis.pipeline(transaction=True) as tx:
                # NX: a join code is never handed out twice; on a clash the next try rewrites the classroom.
                tx.set(Keys.join_code(classroom.join_code), classroom.id, nx=True)
                tx.set(Keys.classroom(classroom.id), classroom.model_dump_json())
                tx.zadd(Keys.teacher_classrooms(teacher_id), {classroom.id: classroom.created_at.timestamp()})
                tx.sadd(Keys.classrooms(), classroom.id)
                claimed, *_ = await tx.execute()
            if claimed:
                return classroom

    async def get_classroom(self, classroom_id: str) -> Classroom:
        raw = await self.redis.get(Keys.classroom(classroom_id))
        if raw is None:
            raise ClassroomNotFound(classroom_id)
        return Classroom.model_validate_json(raw)

    async def save_classroom(self, classroom: Classroom) -> None:
        async with self.redis.pipeline(transaction=True) as tx:
            tx.set(Keys.classroom(classroom.id), classroom.model_dump_json())
            _class_changed(tx, classroom.id)
            await tx.execute()

    async def class_state(self, classroom_id: str) -> ClassState:
        keys = [
            Keys.class_version(classroom_id),
            Keys.classroom(classroom_id),
            Keys.active_passage(classroom_id),
            Keys.passages(classroom_id),
        ]
        version, classroom, passage, passage_ids = await self._class_state(keys=keys, args=[Keys.passage("")])
        if classroom is None:
            raise ClassroomNotFound(classroom_id)
        return ClassState(
            version=int(version),
            classroom=Classroom.model_validate_json(classroom),
            passage=None if passage is None else Passage.model_validate_json(passage),
            passage_ids=frozenset(_texts(passage_ids)),
        )

    async def class_changes(self) -> AsyncIterator[str]:
        """Ids of classes as they change (`_class_changed`), for every class, until the consumer stops."""
        async with self.redis.pubsub() as pubsub:
            await pubsub.subscribe(Keys.classes_changed())
            async for message in pubsub.listen():
                if message["type"] == "message":
                    yield _text(message["data"])

    async def failed_attempts(self, kind: str, client: str) -> tuple[int, int]:
        """How many `kind` attempts (join, sign_in) of a client failed in its current window, and the
        seconds left of that window."""
        key = Keys.failed_attempts(kind, client)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.get(key)
            pipe.ttl(key)
            count, ttl = await pipe.execute()
        return int(count or 0), max(int(ttl), 1)

    async def add_failed_attempt(self, kind: str, client: str, window_s: int) -> None:
        """One more failure; the window starts with the first (a fixed window, kept in Redis so that every
        service process counts the same client alike)."""
        key = Keys.failed_attempts(kind, client)
        async with self.redis.pipeline(transaction=True) as tx:
            tx.incr(key)
            tx.expire(key, window_s, nx=True)
            await tx.execute()

    async def classroom_by_join_code(self, code: str) -> Classroom | None:
        classroom_id = await self.redis.get(Keys.join_code(normalize_join_code(code)))
        return None if classroom_id is None else await self.get_classroom(_text(classroom_id))

    async def teacher_classrooms(self, teacher_id: str) -> list[Classroom]:
        """Newest first."""
        ids = _texts(await self.redis.zrevrange(Keys.teacher_classrooms(teacher_id), 0, -1))
        raws = await self.redis.mget([Keys.classroom(i) for i in ids]) if ids else []
        return [Classroom.model_validate_json(raw) for raw in raws if raw is not None]

    async def question_counts(self, classroom_ids: list[str]) -> list[int]:
        """How many questions each class has, in one round trip (the indexes' sizes; no record is read)."""
        async with self.redis.pipeline(transaction=False) as batch:
            for classroom_id in classroom_ids:
                batch.zcard(Keys.questions(classroom_id))
            return [int(n) for n in await batch.execute()]

    async def delete_classroom(self, classroom: Classroom) -> None:
        """Remove the class and all it holds: its join code, passages, questions and their indexes, its
        pupils' names and histories, and its place in the lists of classes. Pupils' sessions expire on
        their own (their class no longer answers). Watched, so a question asked meanwhile goes too."""
        cid = classroom.id
        while True:
            async with self.redis.pipeline(transaction=True) as tx:
                try:
                    await tx.watch(Keys.questions(cid), Keys.passages(cid), Keys.former_passages(cid), Keys.pupils(cid))
                    question_ids = _texts(await tx.zrange(Keys.questions(cid), 0, -1))
                    passage_ids = _texts(await tx.lrange(Keys.passages(cid), 0, -1))
                    passage_ids += _texts(await tx.lrange(Keys.former_passages(cid), 0, -1))
                    names = _texts(await tx.hkeys(Keys.pupils(cid)))
                    doomed = {Keys.questions_by_name(cid, n.split(":", 1)[1], int(n.split(":", 1)[0])) for n in names}
                    for start in range(0, len(question_ids), DELETE_BATCH):
                        batch = question_ids[start : start + DELETE_BATCH]
                        for raw in await tx.mget([Keys.question(i) for i in batch]):
                            if raw is not None:
                                record = QuestionRecord.model_validate_json(raw)
                                doomed.add(Keys.questions_by_name(cid, record.pupil, record.pupil_number))
                                doomed.add(Keys.pupil_questions(record.pupil_id))
                        doomed.update(Keys.question(i) for i in batch)
                    for passage_id in passage_ids:
                        doomed.update((Keys.passage(passage_id), Keys.passage_questions(passage_id)))
                        doomed.add(Keys.warmed(passage_id))
                    doomed.update((Keys.classroom(cid), Keys.join_code(classroom.join_code), Keys.passages(cid)))
                    doomed.update((Keys.former_passages(cid), Keys.active_passage(cid), Keys.questions(cid)))
                    doomed.update((Keys.pupils(cid), Keys.pupil_numbers(cid)))
                    tx.multi()  # type: ignore[no-untyped-call]
                    tx.delete(*doomed)
                    if question_ids:
                        tx.zrem(Keys.recent_questions(), *question_ids)
                        tx.zrem(Keys.answering(), *question_ids)
                    tx.srem(Keys.classrooms(), cid)
                    tx.zrem(Keys.teacher_classrooms(classroom.teacher_id), cid)
                    _class_changed(tx, cid)
                    tx.expire(Keys.class_version(cid), DELETED_VERSION_S)
                    await tx.execute()
                    return
                except WatchError:
                    continue

    # Passages

    async def add_passage(self, passage: Passage, *, publish: bool) -> None:
        """Store the passage in its class's list; `publish`: make it the one pupils see, in the same step."""
        async with self.redis.pipeline(transaction=True) as tx:
            tx.set(Keys.passage(passage.id), passage.model_dump_json())
            tx.rpush(Keys.passages(passage.classroom_id), passage.id)
            if publish:
                tx.set(Keys.active_passage(passage.classroom_id), passage.id)
            _class_changed(tx, passage.classroom_id)
            await tx.execute()

    async def replace_passage(self, old: Passage, new: Passage) -> bool:
        """`new` takes `old`'s place in the class's list, and its place as the active one if `old` was it
        (then True); `old` stays stored, for the questions asked about it. PassageNotFound if `old` is no
        longer in the list (deleted or edited meanwhile)."""
        cid = old.classroom_id
        while True:
            async with self.redis.pipeline(transaction=True) as tx:
                try:
                    await tx.watch(Keys.passages(cid), Keys.active_passage(cid))
                    ids = _texts(await tx.lrange(Keys.passages(cid), 0, -1))
                    active = await tx.get(Keys.active_passage(cid))
                    if old.id not in ids:
                        raise PassageNotFound()
                    was_active = active is not None and _text(active) == old.id
                    tx.multi()  # type: ignore[no-untyped-call]
                    tx.set(Keys.passage(new.id), new.model_dump_json())
                    tx.lset(Keys.passages(cid), ids.index(old.id), new.id)
                    tx.rpush(Keys.former_passages(cid), old.id)
                    if was_active:
                        tx.set(Keys.active_passage(cid), new.id)
                    _class_changed(tx, cid)
                    await tx.execute()
                    return was_active
                except WatchError:
                    continue

    async def remove_passage(self, classroom_id: str, passage_id: str) -> None:
        """Take a passage out of the class's list (it stays stored for its questions). Not the active one:
        PassageInUse."""
        while True:
            async with self.redis.pipeline(transaction=True) as tx:
                try:
                    await tx.watch(Keys.passages(classroom_id), Keys.active_passage(classroom_id))
                    ids = _texts(await tx.lrange(Keys.passages(classroom_id), 0, -1))
                    active = await tx.get(Keys.active_passage(classroom_id))
                    if passage_id not in ids:
                        raise PassageNotFound()
                    if active is not None and _text(active) == passage_id:
                        raise PassageInUse()
                    tx.multi()  # type: ignore[no-untyped-call]
                    tx.lrem(Keys.passages(classroom_id), 0, passage_id)
                    tx.rpush(Keys.former_passages(classroom_id), passage_id)
                    _class_changed(tx, classroom_id)
                    await tx.execute()
                    return
                except WatchError:
                    continue

    async def get_passage(self, passage_id: str) -> Passage | None:
        raw = await self.redis.get(Keys.passage(passage_id))
        return None if raw is None else Passage.model_validate_json(raw)

    async def set_active_passage(self, classroom_id: str, passage_id: str) -> None:
        """Publish a passage of the class's list (PassageNotFound if it is not there: edited or deleted)."""
        while True:
            async with self.redis.pipeline(transaction=True) as tx:
                try:
                    await tx.watch(Keys.passages(classroom_id))
                    if await tx.lpos(Keys.passages(classroom_id), passage_id) is None:
                        raise PassageNotFound()
                    tx.multi()  # type: ignore[no-untyped-call]
                    tx.set(Keys.active_passage(classroom_id), passage_id)
                    _class_changed(tx, classroom_id)
                    await tx.execute()
                    return
                except WatchError:
                    continue

    async def active_passage_id(self, classroom_id: str) -> str | None:
        passage_id = await self.redis.get(Keys.active_passage(classroom_id))
        return None if passage_id is None else _text(passage_id)

    async def active_passage(self, classroom_id: str) -> Passage | None:
        passage_id = await self.active_passage_id(classroom_id)
        return None if passage_id is None else await self.get_passage(passage_id)

    async def list_passages(self, classroom_id: str) -> list[Passage]:
        """The class's passages, oldest first."""
        return await self._passages(Keys.passages(classroom_id))

    async def former_passages(self, classroom_id: str) -> list[Passage]:
        """Passages edited (an older version) or deleted, in the order they left the list: still there for
        the questions asked about them."""
        return await self._passages(Keys.former_passages(classroom_id))

    async def _passages(self, key: str) -> list[Passage]:
        ids = _texts(await self.redis.lrange(key, 0, -1))
        raws = await self.redis.mget([Keys.passage(i) for i in ids]) if ids else []
        return [Passage.model_validate_json(raw) for raw in raws if raw is not None]

    # Questions

    async def admit_question(
        self,
        session_token: str,
        record: QuestionRecord,
        class_version: int,
        rate: RateLimit,
        longest_answer_s: int,
        line: TurnLine | None = None,
    ) -> Admission:
        """Admit and store a pupil's question in one atomic step (ADMIT says what it checks)."""
        asked = record.asked_at.timestamp()
        keys = [
            Keys.pupil_session(session_token),
            Keys.class_version(record.classroom_id),
            Keys.pupil_answering(record.pupil_id),
            Keys.pupil_asked(record.pupil_id),
            *self._record_keys(record),
            *(line.keys() if line else NO_TURN_KEYS),
            Keys.answering(),
        ]
        args: list[str | float] = [class_version, asked, rate.window_s, rate.most, longest_answer_s]
        args += [record.model_dump_json(), record.id, asked, asked - RECENT_S]
        if line:
            args += [line.bound, line.most_waiting, asked + line.lapses_s, Keys.turns_waiting_prefix(line.replica)]
            args += [record.classroom_id, Keys.turns_granted()]
        else:
            args += [0, 0, 0, "", "", ""]
        outcome, *rest = await self._admit(keys=keys, args=args)
        decided = _text(outcome)
        if decided == "limited":
            return Admission("limited", retry_after_s=float(rest[0]) + rate.window_s - asked)
        if decided == "queued":
            return Admission("queued", place=int(rest[0]))
        return Admission(decided)  # type: ignore[arg-type]  # the script answers only the outcomes named

    async def refuse_question(self, record: QuestionRecord) -> None:
        """Store a question that was not taken, where the class's questions are."""
        asked = record.asked_at.timestamp()
        args: list[str | float] = [record.model_dump_json(), record.id, asked, asked - RECENT_S]
        await self._refuse(keys=self._record_keys(record), args=args)

    async def finish_question(self, record: QuestionRecord, line: TurnLine | None = None) -> None:
        """Store a question's final record, tell the teacher's page, let the pupil ask again, and give its turn
        on `line` (taken or waited for) to the next in line."""
        keys = [Keys.question(record.id), Keys.events(record.classroom_id), Keys.pupil_answering(record.pupil_id)]
        args: list[str | float] = [record.model_dump_json(), record.id]
        if line:
            await self._finish(
                keys=[*keys, *line.keys(), Keys.answering()], args=args + line.args(record.classroom_id, time.time())
            )
        else:
            await self._finish(keys=[*keys, *NO_TURN_KEYS, Keys.answering()], args=args + [0, "", "", 0, 0, ""])

    async def abandoned_answers(self, now: float, limit: int = 100) -> list[tuple[str, QuestionRecord]]:
        """Questions still being written after they must have ended: each record as stored (the exact JSON,
        for `abandon_answer`'s compare and set) and read, oldest first."""
        ids = _texts(await self.redis.zrangebyscore(Keys.answering(), "-inf", now, start=0, num=limit))
        raws = await self.redis.mget([Keys.question(i) for i in ids]) if ids else []
        found = [(_text(raw), QuestionRecord.model_validate_json(raw)) for raw in raws if raw is not None]
        writing = [(raw, record) for raw, record in found if record.status == QuestionStatus.ANSWERING]
        if done := set(ids) - {record.id for _, record in writing}:  # deleted, or finished after all
            await self.redis.zrem(Keys.answering(), *done)
        return writing

    async def abandon_answer(self, stored: str, finished: QuestionRecord) -> bool:
        """Store `finished` in place of the record stored as `stored`, if that is still what is stored (its
        own process may have finished it after all); False if it changed."""
        keys = [Keys.question(finished.id), Keys.events(finished.classroom_id), Keys.answering()]
        return bool(await self._abandon(keys=keys, args=[stored, finished.model_dump_json(), finished.id]))

    async def store_progress(self, record: QuestionRecord) -> bool:
        """Store an answer's text so far (`record`, still answering), unless it has ended meanwhile; True if
        its pupil asked to stop it."""
        keys = [Keys.question(record.id), Keys.answer_stop(record.id)]
        return bool(await self._progress(keys=keys, args=[record.model_dump_json()]))

    async def request_stop(self, question_id: str, keep_s: int) -> None:
        """Ask whichever process writes the answer to stop it: at once through the channel, and through a key
        its next progress write finds, should the message be missed."""
        async with self.redis.pipeline(transaction=True) as tx:
            tx.set(Keys.answer_stop(question_id), "1", ex=keep_s)
            tx.publish(Keys.answer_stops(), question_id)
            await tx.execute()

    async def answer_stops(self) -> AsyncIterator[str]:
        """Ids of questions whose pupil asked to stop the answer, as they ask, until the consumer stops."""
        async with self.redis.pubsub() as pubsub:
            await pubsub.subscribe(Keys.answer_stops())
            async for message in pubsub.listen():
                if message["type"] == "message":
                    yield _text(message["data"])

    async def turn_place(self, line: TurnLine, classroom_id: str, question_id: str) -> int:
        """0 once the question's turn has come (or it waits in no line), else its place in line."""
        now = time.time()
        prefix, channel = Keys.turns_waiting_prefix(line.replica), Keys.turns_granted()
        args: list[str | float] = [question_id, prefix, classroom_id, line.bound, now, now + line.lapses_s, channel]
        return int(await self._turn_place(keys=line.keys(), args=args))

    async def turns_granted(self) -> AsyncIterator[str]:
        """Ids of questions whose turn has come, as turns are given, until the consumer stops."""
        async with self.redis.pubsub() as pubsub:
            await pubsub.subscribe(Keys.turns_granted())
            async for message in pubsub.listen():
                if message["type"] == "message":
                    yield _text(message["data"])

    @staticmethod
    def _record_keys(record: QuestionRecord) -> list[str]:
        return [
            Keys.question(record.id),
            Keys.questions(record.classroom_id),
            Keys.questions_by_name(record.classroom_id, record.pupil, record.pupil_number),
            Keys.passage_questions(record.passage_id),
            Keys.pupil_questions(record.pupil_id),
            Keys.recent_questions(),
            Keys.events(record.classroom_id),
        ]

    async def get_question(self, question_id: str) -> QuestionRecord | None:
        raw = await self.redis.get(Keys.question(question_id))
        return None if raw is None else QuestionRecord.model_validate_json(raw)

    async def list_questions(
        self,
        classroom_id: str,
        *,
        limit: int,
        offset: int = 0,
        pupil_name: str | None = None,
        passage_id: str | None = None,
    ) -> list[QuestionRecord]:
        """Newest first; narrowed to the pupils `pupil_name` names (`matching_pupils`) and/or one passage."""
        indexes = [Keys.questions(classroom_id)]
        if passage_id:
            indexes.append(Keys.passage_questions(passage_id))
        names: list[str] = []
        if pupil_name and pupil_name.strip():  # spaces alone name no one in particular: no filter
            names = [Keys.questions_by_name(classroom_id, pupil_name)]  # also a name joined before numbering
            names += [
                Keys.questions_by_name(classroom_id, n, k)
                for n, k in await self.matching_pupils(classroom_id, pupil_name)
            ]
        if len(indexes) == 1 and not names:
            ids = await self.redis.zrevrange(indexes[0], offset, offset + limit - 1)
        else:
            ids = await self._combined(indexes, sorted(set(names)), offset, limit)
        return await self._questions(_texts(ids))

    async def matching_pupils(self, classroom_id: str, typed: str) -> list[tuple[str, int]]:
        """The class's pupils `typed` names: the one (or ones) whose name as teachers see it ("Ada (2)") it
        is, any case; else every pupil whose name holds it."""
        wanted = typed.strip().lower()
        labelled = [(pupil_label(name, n).lower(), name, n) for name, n in await self.roster(classroom_id)]
        exact = [(name, n) for label, name, n in labelled if label == wanted]
        return exact or [(name, n) for label, name, n in labelled if wanted in label]

    async def _combined(self, indexes: list[str], names: list[str], offset: int, limit: int) -> list[Any]:
        # The pupils' indexes united, then intersected with the others: sorted-set operations keep the time
        # order; the result lives for this one transaction.
        scratch = f"tmp:{new_id()}"
        async with self.redis.pipeline(transaction=True) as tx:
            if names:
                tx.zunionstore(scratch, names, aggregate="MAX")
                tx.zinterstore(scratch, [scratch, *indexes], aggregate="MAX")
            else:
                tx.zinterstore(scratch, indexes, aggregate="MAX")
            tx.zrevrange(scratch, offset, offset + limit - 1)
            tx.delete(scratch)
            *_, ids, _ = await tx.execute()
        return list(ids)

    async def pupil_questions(self, pupil_id: str, limit: int) -> list[QuestionRecord]:
        """One pupil's own questions, newest first."""
        return await self._questions(_texts(await self.redis.zrevrange(Keys.pupil_questions(pupil_id), 0, limit - 1)))

    async def _questions(self, ids: list[str]) -> list[QuestionRecord]:
        raws = await self.redis.mget([Keys.question(i) for i in ids]) if ids else []
        return [QuestionRecord.model_validate_json(raw) for raw in raws if raw is not None]

    async def classroom_events(self, classroom_id: str) -> AsyncIterator[QuestionRecord]:
        """Questions of the classroom as they are asked and answered, until the consumer stops."""
        async with self.redis.pubsub() as pubsub:
            await pubsub.subscribe(Keys.events(classroom_id))
            async for message in pubsub.listen():
                if message["type"] == "message":
                    yield QuestionRecord.model_validate_json(message["data"])

    async def questions_between(
        self, since: float, until: float, classroom_id: str | None = None
    ) -> list[QuestionRecord]:
        """Questions asked in [since, until] (epoch seconds), oldest first: of one classroom, or of all
        in the last day."""
        index = Keys.questions(classroom_id) if classroom_id else Keys.recent_questions()
        return await self._questions(_texts(await self.redis.zrangebyscore(index, since, until)))

    async def classrooms(self, classroom_ids: Iterable[str]) -> dict[str, Classroom]:
        """The classrooms of these ids that exist, in one round trip."""
        ids = sorted(set(classroom_ids))
        raws = await self.redis.mget([Keys.classroom(i) for i in ids]) if ids else []
        return {i: Classroom.model_validate_json(raw) for i, raw in zip(ids, raws, strict=True) if raw is not None}

    async def all_classrooms(self) -> list[Classroom]:
        ids = sorted(_texts(await self.redis.smembers(Keys.classrooms())))
        raws = await self.redis.mget([Keys.classroom(i) for i in ids]) if ids else []
        return [Classroom.model_validate_json(raw) for raw in raws if raw is not None]

    async def active_passages_by_recency(self, limit: int) -> list[Passage]:
        """The open classes' active passages, the class used last first (its newest question, or the
        passage's own creation if newer): a class that asked this morning is likelier to ask again than one
        idle since last term. Three round trips to Redis, however many classes."""
        open_ids = [c.id for c in await self.all_classrooms() if c.is_open and c.archived_at is None]
        async with self.redis.pipeline(transaction=False) as batch:
            for cid in open_ids:
                batch.get(Keys.active_passage(cid))
                batch.zrevrange(Keys.questions(cid), 0, 0, withscores=True)
            replies = await batch.execute()
        asked: dict[str, float] = {}  # active passage id -> when its class last asked
        for passage_id, newest in zip(replies[::2], replies[1::2], strict=True):
            if passage_id is not None:
                asked[_text(passage_id)] = float(newest[0][1]) if newest else 0.0
        raws = await self.redis.mget([Keys.passage(i) for i in asked]) if asked else []
        passages = [Passage.model_validate_json(raw) for raw in raws if raw is not None]
        passages.sort(key=lambda p: max(asked[p.id], p.created_at.timestamp()), reverse=True)
        return passages[:limit]

    async def set_warmed(self, passage_id: str, replicas: list[str]) -> None:
        await self.redis.set(Keys.warmed(passage_id), json.dumps(replicas))

    async def claim_fleet_warmup(self, fleet_state: str, seconds: float) -> bool:
        """True for the first process to ask for this state of the fleet within `seconds`: one re-warm for a
        change that every worker process of the service sees."""
        return bool(await self.redis.set(Keys.fleet_warmup(fleet_state), "1", nx=True, px=int(seconds * 1000)))

    async def warmed(self, passage_id: str) -> list[str]:
        raw = await self.redis.get(Keys.warmed(passage_id))
        return [] if raw is None else list(json.loads(raw))

    # The backends' configuration, shared by every service process

    async def backend_config(self) -> BackendConfig | None:
        raw = await self.redis.get(Keys.backend_config())
        return None if raw is None else BackendConfig.model_validate_json(raw)

    async def seed_backend_config(self, declared: BackendConfig) -> BackendConfig:
        """The shared configuration; the declared one if there is none yet (operators' changes persist)."""
        await self.redis.set(Keys.backend_config(), declared.model_dump_json(), nx=True)
        current = await self.backend_config()
        return current if current is not None else declared

    async def update_backend_config(self, change: Callable[[BackendConfig], BackendConfig]) -> BackendConfig:
        """Read, change and write the configuration atomically (another process may change it too). A change
        that changes nothing writes nothing and keeps the version, so no process re-warms for it."""
        key = Keys.backend_config()
        while True:
            async with self.redis.pipeline(transaction=True) as tx:
                try:
                    await tx.watch(key)
                    raw = await tx.get(key)
                    if raw is None:
                        raise ValueError("no backend configuration is stored yet")
                    current = BackendConfig.model_validate_json(raw)
                    changed = change(current)
                    if changed.model_dump(exclude={"version"}) == current.model_dump(exclude={"version"}):
                        return current  # the same configuration (e.g. the active variant chosen again): no new version
                    # Validate the result as a whole (names exist, canary differs), then bump the version.
                    new = BackendConfig.model_validate({**changed.model_dump(), "version": current.version + 1})
                    tx.multi()  # type: ignore[no-untyped-call]
                    tx.set(key, new.model_dump_json())
                    await tx.execute()
                    return new
                except WatchError:
                    continue

    async def claim_replica_bursts(self, claims: dict[str, float]) -> list[str]:
        """Warm-up bursts, one per run of a replica across every service process: of the claims named
        (a replica's URL and run) those not yet held, claimed now by this process alone (SET NX). Every
        one named is held for its seconds from now, so that a process that keeps seeing the replica up
        keeps its claim. One round trip."""
        names = list(claims)
        async with self.redis.pipeline(transaction=False) as batch:
            for name in names:
                key, ms = Keys.replica_burst(name), max(1, int(claims[name] * 1000))
                batch.set(key, "1", nx=True, px=ms)
                batch.pexpire(key, ms)
            replies = await batch.execute()
        return [name for name, claimed in zip(names, replies[::2], strict=True) if claimed]
