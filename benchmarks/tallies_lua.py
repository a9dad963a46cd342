"""What adding one question to the operators' tallies costs Redis: the script piece that FINISH, REFUSE and ABANDON
run (service/store/scripts.py STATS), as it is (a HINCRBY a figure) against the packed tallies it replaced
(d83f791: seven tallies of `"q a e p c bucket count …"` parsed, merged, sorted and written back).

A scratch Redis run as the stack runs it (AOF, fsync always: the effects a script writes count), one class on one
replica and variant, whose hour already holds `--warm` questions with lognormal times to first token (median 40 ms:
dozens of buckets, as a busy class's hour has); then `--questions` more, each one EVALSHA. Redis's own CPU (INFO's
used_cpu_user + used_cpu_sys) a question, and the client's wall time a call, median [min-max] over `--rounds`
alternating rounds.

    .venv/bin/python -m benchmarks.tallies_lua [--questions 3000] [--warm 300] [--rounds 3]

Prints a table and writes benchmarks/results/tallies_lua.json.
"""

import argparse
import json
import math
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from redis import Redis

from benchmarks.gateway_parts import STATE
from benchmarks.parts import machine
from service.local.processes import free_port
from service.local.redis_server import start_redis
from service.settings import PROJECT_ROOT
from service.store.scripts import STATS
from service.store.stats import TTFT_RATIO

RESULTS = PROJECT_ROOT / "benchmarks" / "results"

# The piece as it was at d83f791, for the comparison.
PACKED = """
local function tally_add(packed, more)
  local n, counts, buckets = {0, 0, 0, 0, 0}, {}, {}
  for _, tally in ipairs({packed or '', more}) do
    local i, bucket = 0, nil
    for x in string.gmatch(tally, '%-?%d+') do
      i = i + 1
      if i <= 5 then n[i] = n[i] + tonumber(x)
      elseif i % 2 == 0 then bucket = tonumber(x)
      else
        if not counts[bucket] then counts[bucket] = 0 buckets[#buckets + 1] = bucket end
        counts[bucket] = counts[bucket] + tonumber(x)
      end
    end
  end
  table.sort(buckets)
  for _, bucket in ipairs(buckets) do n[#n + 1] = bucket n[#n + 1] = counts[bucket] end
  return table.concat(n, ' ')
end
local function stats_add(k, a)
  for i, hash in ipairs({0, 0, 0, 1, 1, 2, 2}) do
    local key, name = KEYS[k + hash], ARGV[a + 1 + i]
    redis.call('HSET', key, name, tally_add(redis.call('HGET', key, name), ARGV[a]))
  end
  for hash = 0, 2 do redis.call('EXPIREAT', KEYS[k + hash], ARGV[a + 1]) end
end
"""
SCOPES = ["replica:http://r1:8000/v1", "class:c1"]
SERIES = "5|variant:original"


def bucket(rng: random.Random) -> int:
    return math.floor(math.log(rng.lognormvariate(math.log(40), 0.6)) / math.log(TTFT_RATIO))


def hincrby_args(rng: random.Random) -> list[Any]:
    return [1, 1, 0, 1030, 1000, bucket(rng), 2**31, SERIES, *SCOPES * 3]


def packed_args(rng: random.Random) -> list[Any]:
    return [f"1 1 0 1030 1000 {bucket(rng)} 1", 2**31, SERIES, *SCOPES * 3]


def redis_cpu(redis: Redis) -> float:
    cpu = redis.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def one_round(
    redis: Redis, name: str, keys: list[str], args: Callable[[random.Random], list[Any]], n: int, warm: int
) -> tuple[float, float, int]:
    script = redis.register_script((PACKED if name == "packed" else STATS) + "stats_add(1, 1) return 1")
    redis.flushall()
    rng = random.Random(7)
    for _ in range(warm):
        script(keys=keys, args=args(rng))
    cpu, began = redis_cpu(redis), time.perf_counter()
    for _ in range(n):
        script(keys=keys, args=args(rng))
    took = time.perf_counter() - began
    return (redis_cpu(redis) - cpu) / n * 1e6, took / n * 1e6, int(redis.hlen(keys[1 if name != "packed" else 0]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=3000)
    parser.add_argument("--warm", type=int, default=300, help="questions the class's hour holds before")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    port = free_port()
    folder = STATE / f"bench-tallies-lua-{port}"
    process = start_redis(f"redis://127.0.0.1:{port}/0", port, folder, folder / "redis.log")
    ways: dict[str, tuple[list[str], Callable[[random.Random], list[Any]]]] = {
        "packed (d83f791)": (["h", "t", "m"], packed_args),
        "HINCRBY a figure (now)": (["h", "t", "m", "s"], hincrby_args),
    }
    found: dict[str, dict[str, list[float]]] = {way: {"cpu_us": [], "wall_us": [], "fields": []} for way in ways}
    try:
        redis = Redis(port=port)
        for _ in range(args.rounds):
            for way, (keys, make) in ways.items():
                cpu, wall, fields = one_round(
                    redis, "packed" if way.startswith("packed") else "hincrby", keys, make, args.questions, args.warm
                )
                found[way]["cpu_us"].append(cpu)
                found[way]["wall_us"].append(wall)
                found[way]["fields"].append(fields)
    finally:
        process.stop()

    def shown(values: list[float]) -> str:
        return f"{statistics.median(values):.0f} [{min(values):.0f}-{max(values):.0f}]"

    lines = [
        "| the piece | Redis CPU a question (µs) | a call, client's wall (µs) | the class's hour hash: fields |",
        "|---|---|---|---|",
        *(
            f"| {way} | {shown(f['cpu_us'])} | {shown(f['wall_us'])} | {f['fields'][-1]:.0f} |"
            for way, f in found.items()
        ),
    ]
    print("\n".join(lines))
    result = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": machine(), "args": vars(args), "found": found}
    (RESULTS / "tallies_lua.json").write_text(json.dumps(result, indent=2) + "\n")
    print("written to benchmarks/results/tallies_lua.json")


if __name__ == "__main__":
    main()
