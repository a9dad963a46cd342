"""Redis' memory under the school's retention: questions of two simulated school years stored as the service
stores them, then one round of retention (`service.classroom.retention`) at each retention setting, on a
Redis of its own (append-only file, fsync on every write, as the stack runs it).

Measures Redis' used memory (INFO) before and after the round, the bytes a stored question takes, the round's
time and rate, and the archive's bytes a question on disk; then what a district's Redis holds under each
setting: (questions a day) x (days kept) x (bytes a question), against the 768 MB bound of deploy/k8s/redis.yaml.

    .venv/bin/python -m benchmarks.retention [--days 730] [--per-day 300] [--classes 100] [--keep 365 30 7]

Writes benchmarks/results/retention.json and retention.md.
"""

import argparse
import asyncio
import json
import platform
import random
import shutil
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from service.classroom.archive import QuestionArchive
from service.classroom.retention import Retention
from service.local.processes import free_port
from service.local.redis_server import start_redis
from service.records import QuestionRecord, QuestionStatus, Usage
from service.store import RECENT_S, Keys, Store, connect
from service.store.ids import new_id

RESULTS = Path(__file__).parent / "results"
# A district as issue 24 counts it: 2,000 classes, 100,000 questions a school day.
DISTRICT_PER_DAY = 100_000
BOUND_BYTES = 768 * 2**20  # deploy/k8s/redis.yaml's maxmemory
# An answer of ~256 tokens and a question of a line, of words drawn at random (each record its own, so the
# archive's compression sees text as varied as pupils' questions are).
WORDS = [
    "".join(random.Random(i).choices("etaoinshrdlucmfwypvbgkjqxz", k=random.Random(-i).randint(2, 9)))
    for i in range(2000)
]


def words(rng: random.Random, chars: int) -> str:
    return " ".join(rng.choices(WORDS, k=chars // 6))[:chars]


def record(classroom: int, n: int, asked: datetime) -> QuestionRecord:
    pupil, rng = n % 30, random.Random(n)
    return QuestionRecord(
        id=new_id(), classroom_id=f"class{classroom:04d}", passage_id=f"passage{classroom:04d}",
        pupil_id=f"pupil{classroom:04d}x{pupil:02d}", pupil=f"Pupil {pupil}", question=words(rng, 60) + "?",
        status=QuestionStatus.ANSWERED, answer=words(rng, 940), variant="original", replica="http://vllm-0:8000/v1",
        usage=Usage(prompt_tokens=1180, cached_tokens=1152, completion_tokens=256), ttft_ms=180.0,
        total_ms=2400.0, asked_at=asked, finished_at=asked + timedelta(seconds=2.4),
    )  # fmt: skip


async def seed(store: Store, days: int, per_day: int, classes: int) -> int:
    """`days` of questions, `per_day` a day over `classes` classes, stored and indexed as the service does."""
    now = datetime.now(UTC)
    redis = store.redis
    for c in range(classes):
        await redis.sadd(Keys.classrooms(), f"class{c:04d}")
    n = 0
    for day in range(days, 0, -1):
        async with redis.pipeline(transaction=False) as batch:
            for i in range(per_day):
                asked = now - timedelta(days=day, seconds=-i * 20)
                r = record(i % classes, n, asked)
                score = asked.timestamp()
                batch.set(Keys.question(r.id), r.model_dump_json())
                for index in (
                    Keys.questions(r.classroom_id),
                    Keys.questions_by_name(r.classroom_id, r.pupil),
                    Keys.passage_questions(r.passage_id),
                    Keys.pupil_questions(r.pupil_id),
                ):
                    batch.zadd(index, {r.id: score})
                if score > time.time() - RECENT_S:
                    batch.zadd(Keys.recent_questions(), {r.id: score})
                n += 1
            await batch.execute()
    return n


async def used(store: Store) -> int:
    return (await store.memory_usage()).used_bytes


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    rows = []
    for keep in args.keep:
        port = free_port()
        work = Path(tempfile.mkdtemp(prefix="retention-"))
        url = f"redis://127.0.0.1:{port}/0"
        server = start_redis(url, port, work / "redis", work / "redis.log")
        redis = connect(url)
        store = Store(redis)
        try:
            empty = await used(store)
            began = time.perf_counter()
            stored = await seed(store, args.days, args.per_day, args.classes)
            seeded_s = time.perf_counter() - began
            before = await used(store)
            archive = QuestionArchive(work / "archive")
            retention = Retention(store, archive, retention_days=keep, every_s=3600)
            began = time.perf_counter()
            archived = await retention.sweep()
            swept_s = time.perf_counter() - began
            after = await used(store)
            archive_bytes = sum(f.stat().st_size for f in (work / "archive").rglob("*.jsonl.gz"))
            per_question = (before - empty) / stored
            district = DISTRICT_PER_DAY * keep * per_question
            rows.append(
                {
                    "keep_days": keep,
                    "stored": stored,
                    "seeded_s": round(seeded_s, 1),
                    "used_before_mb": round(before / 2**20, 1),
                    "archived": archived,
                    "kept": stored - archived,
                    "used_after_mb": round(after / 2**20, 1),
                    "expected_after_mb": round((empty + (stored - archived) * per_question) / 2**20, 1),
                    "bytes_per_question": round(per_question),
                    "sweep_s": round(swept_s, 2),
                    "archived_per_s": round(archived / swept_s) if swept_s else None,
                    "archive_bytes_per_question": round(archive_bytes / archived) if archived else None,
                    "district_mb": round(district / 2**20),
                    "district_days_in_bound": int(BOUND_BYTES / (DISTRICT_PER_DAY * per_question)),
                }
            )
        finally:
            await store.subscriptions.close()
            await redis.aclose()
            server.stop()
            shutil.rmtree(work, ignore_errors=True)
    return {
        "machine": f"{platform.machine()}, {platform.python_version()}",
        "days": args.days,
        "per_day": args.per_day,
        "classes": args.classes,
        "district_per_day": DISTRICT_PER_DAY,
        "bound_mb": BOUND_BYTES // 2**20,
        "rows": rows,
    }


def table(result: dict[str, Any]) -> str:
    lines = [
        "| kept (days) | stored | Redis before | archived | kept | Redis after (expected) | bytes a question | "
        "round | archived a second | archive bytes a question | a district's Redis at this setting |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['keep_days']} | {r['stored']:,} | {r['used_before_mb']} MB | {r['archived']:,} | {r['kept']:,} | "
            f"{r['used_after_mb']} MB ({r['expected_after_mb']} MB) | {r['bytes_per_question']:,} | "
            f"{r['sweep_s']} s | {r['archived_per_s']:,} | {r['archive_bytes_per_question']} | "
            f"{r['district_mb']:,} MB |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--days", type=int, default=730, help="days of questions seeded (two school years)")
    parser.add_argument("--per-day", type=int, default=300, help="questions a day, over all the classes")
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--keep", type=int, nargs="+", default=[365, 30, 7], help="retention settings, days")
    args = parser.parse_args()
    result = asyncio.run(measure(args))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "retention.json").write_text(json.dumps(result, indent=1) + "\n")
    text = table(result)
    print(text)
    days_in_bound = result["rows"][0]["district_days_in_bound"]
    (RESULTS / "retention.md").write_text(
        "# Redis' memory under the school's retention\n\n"
        f"`python -m benchmarks.retention` on {result['machine']}: {result['days']} days of questions, "
        f"{result['per_day']} a day over {result['classes']} classes (each record as the service stores it: a "
        "~940-character answer of random words, timings, usage, five indexes), then one round of retention at "
        "each setting. "
        "Redis before and after: INFO's used_memory. A district's Redis: "
        f"{result['district_per_day']:,} questions a day x the days kept x the bytes a question.\n\n"
        + text
        + f"\nAt {result['district_per_day']:,} questions a day, the {result['bound_mb']} MB bound of "
        f"deploy/k8s/redis.yaml holds about {days_in_bound} days of a district's questions: a district keeps "
        "`school.retention_days` near that (the rest goes to the archive, which the teacher downloads), or "
        "gives Redis the memory its setting needs (the column above). Past the bound Redis refuses writes "
        "(noeviction) and the service answers 507; nothing is dropped.\n"
    )


if __name__ == "__main__":
    main()
