"""Operator refresh: what one `GET /api/operator/stats` costs when read from the tallies questions add as they end
(service/store/stats.py), at 10,000, 100,000 and 1,000,000 questions stored, against reading the records.

A district of 2,000 classes of 400 teachers, 2 variants (original 80 %, fp8 20 %) on 4 replicas, over a school year:
180 school days of 7 hours (weekends skipped), each class asking in one lesson hour a day; now is 3.5 hours into
the last school day, so the last 24 h hold about a school day. N question records (short texts, as the service
stores them) are seeded straight into a scratch Redis, in pipelines, with the tallies their final records would
have added (the same `adding`, summed here, written with HSET; the old hours are kept, where the service lets them
expire a day after the hour); `--busy-day` adds that many questions more within the last 24 h (the issue's
100,000 a day), as a further row.

Timed, for the windows 1 h and 24 h, each `--repeats` times (median [min-max], ms):
- `read`: the store's read and the figures (`stats_window` + `aggregates.window_figures`);
- `route`: the route's function (the above, the classes' labels, the response model);
- `http`: the route through HTTP on a `classroom serve` of that Redis (JSON included), from this process;
- `old`: the route's function as it was (a88d742): `questions_between` and `figures` per group and minute.

Prints a table and writes benchmarks/results/operator_refresh.json.

    .venv/bin/python -m benchmarks.operator_refresh [--sizes 10000,100000,1000000] [--busy-day 100000] [--repeats 20]
"""

import argparse
import asyncio
import gc
import json
import random
import statistics
import time
import types
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import httpx
from redis.asyncio import Redis

from benchmarks.gateway_parts import STATE, service_env, start_fake, start_service
from benchmarks.parts import CLASSROOM, machine
from service.api.operator import ClassroomLabel, StatsOut, operator_stats
from service.classroom import aggregates, figures
from service.local.processes import free_port
from service.local.redis_server import start_redis
from service.records import Classroom, QuestionRecord, QuestionStatus, Teacher, Usage
from service.services import Services
from service.settings import PROJECT_ROOT
from service.store import RECENT_S, Keys, Store
from service.store.ids import new_id
from service.store.stats import HOUR, Tally, adding, tally_of, window_reads

RESULTS = PROJECT_ROOT / "benchmarks" / "results" / "operator_refresh.json"
CLASSES, TEACHERS, SCHOOL_DAYS, SCHOOL_HOURS = 2000, 400, 180, 7
REPLICAS = {"original": ["http://vllm-original-0:8000/v1", "http://vllm-original-1:8000/v1"]}
REPLICAS["fp8"] = ["http://vllm-fp8-0:8000/v1", "http://vllm-fp8-1:8000/v1"]
WINDOWS = (3600, 24 * 3600)
OPERATOR_TOKEN = "benchmark operator token"
OUTCOMES = [  # (weight, status, error)
    (93, QuestionStatus.ANSWERED, None),
    (3, QuestionStatus.INCOMPLETE, "You stopped this answer."),
    (2, QuestionStatus.INCOMPLETE, "The answer was cut short because the answering service stopped."),
    (1, QuestionStatus.FAILED, "The answering service cannot be reached."),
    (1, QuestionStatus.REFUSED, "Many pupils are asking."),
]


def district(rng: random.Random) -> tuple[list[Teacher], list[Classroom]]:
    teachers = [
        Teacher(id=new_id(), email=f"t{i}@school.example", name=f"Teacher {i}", password_hash="x")
        for i in range(TEACHERS)
    ]
    classes = [
        Classroom(id=new_id(), teacher_id=teachers[i % TEACHERS].id, name=f"Class {i % 12 + 1}", join_code=f"{i:06d}")
        for i in range(CLASSES)
    ]
    rng.shuffle(classes)
    return teachers, classes


def question(rng: random.Random, classroom: Classroom, asked: float) -> QuestionRecord:
    weights, outcomes = zip(*[(w, (s, e)) for w, s, e in OUTCOMES], strict=True)
    status, error = rng.choices(outcomes, weights)[0]
    variant = "original" if rng.random() < 0.8 else "fp8"
    reached = status != QuestionStatus.REFUSED
    prompt = rng.randint(300, 1500)
    ttft = rng.lognormvariate(5.9, 0.5) * (0.8 if variant == "fp8" else 1.0)  # median ~365 ms
    usage = Usage(
        prompt_tokens=prompt, cached_tokens=prompt // 16 * 16 * rng.randint(8, 10) // 10, completion_tokens=40
    )
    pupil = rng.randrange(30)
    return QuestionRecord(
        id=new_id(), classroom_id=classroom.id, passage_id=f"passage-{classroom.id}", pupil_id=f"pupil-{pupil}",
        pupil=f"Pupil {pupil}", question="Why do bees dance?", status=status, variant=variant if reached else None,
        replica=rng.choice(REPLICAS[variant]) if reached else None, error=error,
        answer="Because." if status == QuestionStatus.ANSWERED else "", usage=usage if reached else None,
        ttft_ms=ttft if reached and status != QuestionStatus.FAILED else None, total_ms=ttft + 900 if reached else None,
        asked_at=datetime.fromtimestamp(asked, UTC), finished_at=datetime.fromtimestamp(asked + 1.5, UTC),
    )  # fmt: skip


def school_days(now: float) -> list[float]:
    """The start of each school day, the last (now 3.5 hours into it) first; two days off after every five."""
    return [now - 3.5 * HOUR - (k + 2 * (k // 5)) * 24 * HOUR for k in range(SCHOOL_DAYS)]


async def seed(redis: Redis, n: int, busy: int, now: float, rng: random.Random) -> dict[str, Any]:
    """The district, `n` questions over the school year and `busy` more in the last 24 h: records, their indexes
    (the class's; the recent one for the last day's) and the tallies they add."""
    started = time.perf_counter()
    teachers, classes = district(rng)
    async with redis.pipeline(transaction=False) as batch:
        for teacher in teachers:
            batch.set(Keys.teacher(teacher.id), teacher.model_dump_json())
        for classroom in classes:
            batch.set(Keys.classroom(classroom.id), classroom.model_dump_json())
            batch.sadd(Keys.classrooms(), classroom.id)
        await batch.execute()
    days = school_days(now)
    weights = [0.5] + [1.0] * (len(days) - 1)  # the last day is half over
    in_window, fields, hashes = 0, 0, set[str]()
    for k, start in enumerate(days):
        count = round(n * weights[k] / sum(weights))
        extra = round(busy * (0.5 if k < 2 else 0))  # the last 24 h: half of the last day, half of the one before
        tallies: dict[tuple[str, str], Tally] = {}
        records = []
        for i in range(count + extra):
            c = rng.randrange(CLASSES)
            classroom = classes[c]
            earliest = now - 24 * HOUR if i >= count else start
            asked = start + (c * 7919 + k * 104_729) % SCHOOL_HOURS * HOUR + rng.uniform(0, HOUR)
            if not earliest <= asked <= min(now, start + SCHOOL_HOURS * HOUR):  # its lesson is not (yet) then
                asked = rng.uniform(max(earliest, start), min(now, start + SCHOOL_HOURS * HOUR))
            record = question(rng, classroom, asked)
            records.append(record)
            keys, args = adding(record)
            tally = tally_of(record)
            for key, name in zip([keys[3], *[keys[0]] * 2, *[keys[1]] * 2, *[keys[2]] * 2], args[7:], strict=True):
                tallies.setdefault((key, str(name)), Tally()).add(tally)
        for chunk in range(0, len(records), 5000):
            async with redis.pipeline(transaction=False) as batch:
                for record in records[chunk : chunk + 5000]:
                    asked = record.asked_at.timestamp()
                    batch.set(Keys.question(record.id), record.model_dump_json(exclude_defaults=True))
                    batch.zadd(Keys.questions(record.classroom_id), {record.id: asked})
                    if asked >= now - RECENT_S:
                        batch.zadd(Keys.recent_questions(), {record.id: asked})
                        in_window += 1
                await batch.execute()
        by_key: dict[str, dict[str, int]] = {}
        for (key, name), tally in tallies.items():
            by_key.setdefault(key, {}).update(tally.fields(name))
        async with redis.pipeline(transaction=False) as batch:
            for key, mapping in by_key.items():
                batch.hset(key, mapping=mapping)  # type: ignore[arg-type]  # redis-py's mapping type is too narrow
            await batch.execute()
        hashes.update(by_key)
        fields += sum(len(m) for m in by_key.values())
    return {
        "questions": n + busy,
        "in_last_24h": in_window,
        "stat_hashes": len(hashes),
        "stat_fields": fields,
        "seed_s": round(time.perf_counter() - started, 1),
        "redis_used_memory_mb": round(int((await redis.info("memory"))["used_memory"]) / 2**20),
    }


async def old_stats(store: Store, window_s: int) -> StatsOut:
    """The route's function as it was (a88d742), its helpers inlined: every record of the window read."""
    until = time.time()
    since = until - window_s
    records = await store.questions_between(since, until)
    classrooms = await store.classrooms({r.classroom_id for r in records})
    teachers = await store.teachers(c.teacher_id for c in classrooms.values())

    def breakdown(of: Iterable[QuestionRecord], key: Callable[[QuestionRecord], str]) -> dict[str, figures.Figures]:
        groups: dict[str, list[QuestionRecord]] = {}
        for record in of:
            groups.setdefault(key(record), []).append(record)
        return {name: figures.figures(group) for name, group in sorted(groups.items())}

    def series(of: list[QuestionRecord]) -> list[figures.Point]:
        buckets: dict[int, list[QuestionRecord]] = {}
        for record in of:
            buckets.setdefault(int((record.asked_at.timestamp() - since) // 60), []).append(record)
        count = max(1, int((until - since) // 60) + 1)
        return [
            figures.Point(start=since + i * 60, **figures.figures(buckets.get(i, [])).model_dump())
            for i in range(count)
        ]

    return StatsOut(
        window_s=window_s,
        overall=figures.figures(records),
        by_variant=breakdown(records, lambda r: r.variant or "none"),
        by_replica=breakdown(records, lambda r: r.replica or "none"),
        by_classroom=breakdown(records, lambda r: r.classroom_id),
        classrooms={
            c.id: ClassroomLabel(name=c.name, join_code=c.join_code, teacher=teachers[c.teacher_id].name)
            for c in classrooms.values()
        },
        series={
            v: series([r for r in records if (r.variant or "none") == v])
            for v in sorted({r.variant or "none" for r in records})
        },
    )


async def timed(step: Callable[[], Awaitable[object]], repeats: int) -> dict[str, float]:
    await step()  # warm
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        await step()
        times.append((time.perf_counter() - started) * 1000)
    return {
        "median_ms": round(statistics.median(times), 2),
        "min_ms": round(min(times), 2),
        "max_ms": round(max(times), 2),
    }


async def fields_read(redis: Redis, window_s: int) -> tuple[int, int]:
    """How many hashes and fields `stats_window` reads for a window ending now."""
    reads = window_reads(time.time() - window_s)
    keys = [*reads.series, *reads.totals]
    async with redis.pipeline(transaction=False) as batch:
        for key in keys:
            batch.hlen(key)
        return len(keys), sum(await batch.execute())


async def measure(store: Store, url: str, window_s: int, repeats: int, old_repeats: int) -> dict[str, Any]:
    services = cast(Services, types.SimpleNamespace(store=store))
    new = await operator_stats(None, services, window_s)
    hashes, fields = await fields_read(store.redis, window_s)
    found: dict[str, Any] = {
        "window_s": window_s,
        "in_window": new.overall.questions,
        "hashes_read": hashes,
        "fields_read": fields,
    }

    async def read() -> None:
        aggregates.window_figures(await store.stats_window(time.time() - window_s))

    found["read"] = await timed(read, repeats)
    found["route"] = await timed(lambda: operator_stats(None, services, window_s), repeats)
    headers = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=120) as client:

        async def http() -> None:
            (await client.get("/api/operator/stats", params={"window_s": window_s})).raise_for_status()

        found["http"] = await timed(http, repeats)
        found["response_kb"] = round(
            len((await client.get("/api/operator/stats", params={"window_s": window_s})).content) / 1024
        )
    if old_repeats:
        old = await old_stats(store, window_s)
        found["old_in_window"] = old.overall.questions
        found["old"] = await timed(lambda: old_stats(store, window_s), old_repeats)
    return found


async def run_size(redis_url: str, n: int, busy: int, repeats: int, old_repeats: int) -> dict[str, Any]:
    redis = Redis.from_url(redis_url)
    store = Store(redis)
    await redis.flushdb()
    seeded = await seed(redis, n, busy, time.time(), random.Random(n + busy))
    gc.collect()
    gc.freeze()  # what the seeding left is no work for the collector during the timings
    print(
        f"{n:,} (+{busy:,} in the last 24 h): seeded in {seeded['seed_s']} s, {seeded['stat_hashes']:,} hashes",
        flush=True,
    )
    fake, root = start_fake()
    env = service_env(redis_url, root, free_port()) | {"CLASSROOM_AUTH__OPERATOR_TOKEN": OPERATOR_TOKEN}
    service, url = start_service(Path(CLASSROOM), env, workers=1)
    try:
        windows = [await measure(store, url, w, repeats, old_repeats) for w in WINDOWS]
    finally:
        service.stop()
        fake.stop()
        await store.subscriptions.close()
        await redis.aclose()
    return {"questions_seeded": n, "busy_last_24h": busy, **seeded, "windows": windows}


def table(rows: list[dict[str, Any]]) -> None:
    def cell(m: dict[str, float] | None) -> str:
        return "-" if m is None else f"{m['median_ms']:.1f} [{m['min_ms']:.1f}-{m['max_ms']:.1f}]"

    print(
        "\n| questions stored | window | in window | hashes / fields read | read + figures (ms) | route function (ms) "
        "| HTTP (ms) | old way (ms) |\n|---|---|---|---|---|---|---|---|"
    )
    for row in rows:
        stored = f"{row['questions_seeded']:,}" + (
            f" + {row['busy_last_24h']:,} in 24 h" if row["busy_last_24h"] else ""
        )
        for w in row["windows"]:
            print(
                f"| {stored} | {w['window_s'] // 3600} h | {w['in_window']:,} "
                f"| {w['hashes_read']} / {w['fields_read']:,} "
                f"| {cell(w['read'])} | {cell(w['route'])} | {cell(w['http'])} | {cell(w.get('old'))} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000", help="questions stored, over a school year")
    parser.add_argument(
        "--busy-day", type=int, default=100_000, help="a further row: the largest size, this many more in the last 24 h"
    )
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--old-repeats", type=int, default=5, help="the old way's (0: not measured)")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    port = free_port()
    redis_url = f"redis://127.0.0.1:{port}/0"
    redis = start_redis(redis_url, port, STATE / f"redis-{port}", STATE / "logs" / "redis-operator.log")
    runs = [(n, 0) for n in sizes] + ([(sizes[-1], args.busy_day)] if args.busy_day else [])
    try:
        rows = [asyncio.run(run_size(redis_url, n, busy, args.repeats, args.old_repeats)) for n, busy in runs]
    finally:
        redis.stop()
    table(rows)
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        result = {"machine": machine(), "repeats": args.repeats, "old_repeats": args.old_repeats, "runs": rows}
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
        print(f"\nwritten to {RESULTS.relative_to(PROJECT_ROOT)}")


if __name__ == "__main__":
    main()
