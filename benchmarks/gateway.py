"""The service's own cost as a gateway: the same questions straight to an instant fake vLLM and through the
service in front of it, side by side, in one run.

Starts a Redis (append-only file, fsync on every write, as the stack runs it), `loadtest.fake_vllm` (vLLM's
exact stream shape, answered at once, in a process of its own) and the service as a real `classroom serve`
(for each `--workers` count in turn), then measures, direct and through, alternating:

a. one question at a time (32-token answers): time to first token and the gaps between streamed events;
b. relay: 30 and 120 pupils asking back to back, 256-token answers: tokens a second; the service's CPU
   (utime + stime of all its processes, from /proc) per streamed token and per question, the latter from a
   run of 1-token answers;
c. burst: 30 pupils of one class press "ask" at once, twice in a row, nothing else running: from the burst
   to the last pupil's first token, and every error.

The prompts are the service's own layout: a 1000-token passage first, a 30-token question last.

    .venv/bin/python -m benchmarks.gateway [--workers 1 2] [--label after] [--classroom .venv/bin/classroom]
    .venv/bin/python -m benchmarks.gateway --profile-dir DIR  # py-spy profiles of the service instead

Writes benchmarks/results/gateway-LABEL.json and re-makes benchmarks/results/gateway.md from every
gateway-*.json there (a `before` run of an older checkout beside the newest). On 2 cores the client, the
fake, Redis and the service share the CPU: each one's CPU is recorded beside the figures.

This file holds the classes and the phases; the client is gateway_client.py, the parts (the fake, the
service, CPU meters, py-spy) gateway_parts.py, the table gateway_report.py.
"""

import argparse
import asyncio
import contextlib
import json
import os
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

import aiohttp
import httpx
import orjson
import redis as redis_client
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.gateway_client import Answer, ask_direct, ask_service
from benchmarks.gateway_parts import (
    MODEL_DIR,
    STATE,
    Meter,
    configure_fake,
    profiled,
    service_env,
    start_fake,
    start_service,
)
from benchmarks.gateway_report import PACED_TPOT_MS, report
from benchmarks.parts import machine, standin_model
from loadtest.client import until_warmed
from loadtest.stats import distribution
from loadtest.workload import TextMaker
from service.classroom.accounts import add_teacher
from service.classroom.prompting import Prompts
from service.local.processes import free_port
from service.local.redis_server import start_redis
from service.settings import PROJECT_ROOT, ModelSettings, RedisSettings, Settings

RESULTS = PROJECT_ROOT / "benchmarks" / "results"
PASSWORD = "benchmark password"
MODEL = "Qwen/Qwen2.5-1.5B-Instruct"
PASSAGE_TOKENS = 1000
QUESTION_TOKENS = 30
CLASS_SIZE = 30

# The class: a teacher, classes with passages, pupils' cookies; the same prompts for the direct requests.


@dataclass
class Classroom:
    id: str
    cookies: list[str]
    title: str
    text: str


async def make_classes(url: str, email: str, classes: int, pupils: int, maker: TextMaker) -> list[Classroom]:
    rng = random.Random()
    made = []
    async with httpx.AsyncClient(base_url=url, timeout=60) as teacher:
        (await teacher.post("/api/teacher/session", json={"email": email, "password": PASSWORD})).raise_for_status()
        for c in range(classes):
            classroom = (await teacher.post("/api/classrooms", json={"name": f"Class {c}"})).json()
            title, text = f"Passage {uuid.uuid4().hex[:8]}", maker.text(rng, PASSAGE_TOKENS)
            added = await teacher.post(
                f"/api/classrooms/{classroom['id']}/passages", json={"title": title, "text": text, "publish": True}
            )
            added.raise_for_status()
            cookies = []
            for p in range(pupils):
                async with httpx.AsyncClient(base_url=url, timeout=60) as pupil:
                    joined = await pupil.post("/api/join", json={"join_code": classroom["join_code"], "name": f"P{p}"})
                    joined.raise_for_status()
                    cookies.append("; ".join(f"{k}={v}" for k, v in joined.cookies.items()))
            with contextlib.suppress(TimeoutError):  # warmed, as it is minutes after the teacher published it
                await until_warmed(teacher, classroom["id"], timeout_s=30, poll_s=0.1)
            made.append(Classroom(classroom["id"], cookies, title, text))
    return made


@dataclass
class Asker:
    """Sends one question direct or through, for a pupil of a class; the questions are fresh random text."""

    session: aiohttp.ClientSession
    service: str
    fake: str
    prompts: Prompts
    maker: TextMaker
    rng: random.Random = field(default_factory=random.Random)

    def question(self) -> str:
        return self.maker.text(self.rng, QUESTION_TOKENS - 1) + "?"

    def direct(self, classroom: Classroom) -> Awaitable[Answer]:
        body = {
            "model": MODEL,
            "messages": self.prompts.messages(classroom.title, classroom.text, self.question()),
            "max_tokens": 256,
            "temperature": 0.3,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        return ask_direct(self.session, f"{self.fake}/v1/chat/completions", orjson.dumps(body))

    def through(self, classroom: Classroom, pupil: int) -> Awaitable[Answer]:
        url = f"{self.service}/api/classrooms/{classroom.id}/questions"
        return ask_service(self.session, url, classroom.cookies[pupil], orjson.dumps({"question": self.question()}))


Ask = Callable[[Classroom, int], Awaitable[Answer]]


def paths(asker: Asker) -> dict[str, Ask]:
    return {"direct": lambda c, _p: asker.direct(c), "through": asker.through}


def summary(answers: Sequence[Answer], seconds: float) -> dict[str, Any]:
    good = [a for a in answers if a.error is None]
    tokens = sum(a.tokens for a in good)
    errors: dict[str, int] = {}
    for a in answers:
        if a.error is not None:
            errors[a.error] = errors.get(a.error, 0) + 1
    ttfts = [t for a in good if (t := a.ttft_s) is not None]
    gaps = [g for a in good for g in a.gaps_s()]
    events = sum(len(a.event_times) for a in good)
    return {
        "questions": len(answers),
        "errors": errors,
        "seconds": seconds,
        "tokens": tokens,
        "tokens_per_s": tokens / seconds if seconds else None,
        "questions_per_s": len(good) / seconds if seconds else None,
        "tokens_per_event": tokens / events if events else None,
        "ttft_ms": distribution(ttfts).model_dump(),
        "service_ttft_ms": distribution([a.service_ttft_ms / 1000 for a in good if a.service_ttft_ms]).model_dump(),
        "gap_ms": distribution(gaps).model_dump(),
    }


async def sequential(asker: Asker, classroom: Classroom, meter: Meter, questions: int, block: int) -> dict[str, Any]:
    """One question at a time, direct and through in alternating blocks."""
    answers: dict[str, list[Answer]] = {"direct": [], "through": []}
    cpu: dict[str, dict[str, float]] = {"direct": {}, "through": {}}
    for start in range(0, questions, block):
        for name, ask in paths(asker).items():
            meter.start()
            for i in range(start, min(start + block, questions)):
                answers[name].append(await ask(classroom, i % len(classroom.cookies)))
            for part, used in meter.stop().items():
                cpu[name][part] = cpu[name].get(part, 0.0) + used
    return {name: summary(answers[name], 0) | {"cpu_s": cpu[name]} for name in answers}


async def concurrent(ask: Ask, classes: list[Classroom], streams: int, per_stream: int) -> tuple[list[Answer], float]:
    """`streams` pupils (classes of 30 filled in turn), each asking `per_stream` questions back to back."""

    async def pupil(n: int) -> list[Answer]:
        classroom, index = classes[n // CLASS_SIZE], n % CLASS_SIZE
        return [await ask(classroom, index) for _ in range(per_stream)]

    began = time.perf_counter()
    done = await asyncio.gather(*(pupil(n) for n in range(streams)))
    return [a for answers in done for a in answers], time.perf_counter() - began


async def relay(
    asker: Asker, classes: list[Classroom], meter: Meter, streams: int, per_stream: int, repeats: int
) -> dict[str, Any]:
    out: dict[str, list[dict[str, Any]]] = {"direct": [], "through": []}
    for repeat in range(repeats):
        order = list(paths(asker).items())
        for name, ask in order if repeat % 2 == 0 else order[::-1]:  # alternate, so drift hits both alike
            meter.start()
            answers, seconds = await concurrent(ask, classes, streams, per_stream)
            out[name].append(summary(answers, seconds) | {"cpu_s": meter.stop()})
    return out


async def loop_lag(service: str) -> dict[str, float]:
    """The service's `classroom_event_loop_lag_seconds` buckets (cumulative, by upper bound), all workers'."""
    async with httpx.AsyncClient(timeout=10) as client:
        text = (await client.get(f"{service}/metrics")).text
    return {
        sample.labels["le"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "classroom_event_loop_lag_seconds"
        for sample in family.samples
        if sample.name.endswith("_bucket")
    }


def lag_over(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Of the loop's timers due between two readings, how many fired later than each bound."""
    due = after.get("+Inf", 0.0) - before.get("+Inf", 0.0)
    return {le: due - (after[le] - before.get(le, 0.0)) for le in after if le != "+Inf"} | {"timers": due}


async def burst(asker: Asker, classroom: Classroom, meter: Meter) -> list[dict[str, Any]]:
    """The whole class presses "ask" at once; the figure is when the last of them sees a first token, and how
    late the service's event loop ran its timers meanwhile."""
    bursts = []
    for _ in range(2):
        lag_before = await loop_lag(asker.service)
        meter.start()
        began = time.perf_counter()
        answers = await asyncio.gather(*(asker.through(classroom, p) for p in range(len(classroom.cookies))))
        seconds = time.perf_counter() - began
        firsts = [a.first for a in answers if a.first is not None]
        row = summary(answers, seconds) | {"cpu_s": meter.stop()}
        row["last_first_token_ms"] = (max(firsts) - began) * 1000 if len(firsts) == len(answers) else None
        row["loop_late"] = lag_over(lag_before, await loop_lag(asker.service))
        bursts.append(row)
    return bursts


def cost(relay_runs: list[dict[str, Any]], per_question_cpu_s: float) -> dict[str, float]:
    """The service's CPU per streamed token: what a relay run used beyond its questions' fixed cost."""
    cpu = sum(r["cpu_s"]["service"] for r in relay_runs)
    questions = sum(r["questions"] for r in relay_runs)
    tokens = sum(r["tokens"] for r in relay_runs) or float("nan")  # every answer failed
    return {
        "cpu_us_per_token_all_in": cpu / tokens * 1e6,
        "cpu_us_per_token": (cpu - questions * per_question_cpu_s) / tokens * 1e6,
    }


async def measure(
    service: str, fake: str, pids: dict[str, int], email: str, args: argparse.Namespace
) -> dict[str, Any]:
    prompts = Prompts.from_settings(Settings(model=ModelSettings(dir=MODEL_DIR)))
    maker = TextMaker(prompts.tokenizer)
    classes = await make_classes(service, email, 4, CLASS_SIZE, maker)
    burst_class = (await make_classes(service, email, 1, CLASS_SIZE, maker))[0]
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, cookie_jar=aiohttp.DummyCookieJar()) as s:
        asker = Asker(s, service, fake, prompts, maker)
        meter = Meter(pids)
        result: dict[str, Any] = {}
        configure_fake(fake, answer_tokens=32)
        result["sequential"] = await sequential(asker, classes[0], meter, args.sequential, block=25)
        print(f"  one at a time: {line(result['sequential'])}", flush=True)
        configure_fake(fake, answer_tokens=1)
        with profiled(pids["service"], profile(args, "questions")):
            questions = await relay(asker, classes, meter, 30, args.per_stream * 4, repeats=1)
        per_question = questions["through"][0]["cpu_s"]["service"] / questions["through"][0]["questions"]
        result["questions"] = questions | {"service_cpu_ms_per_question": per_question * 1000}
        print(f"  1-token answers, 30 at once: service CPU {per_question * 1000:.2f} ms a question", flush=True)
        configure_fake(fake, answer_tokens=256)
        result["relay"] = {}
        for streams in (30, 120):
            with profiled(pids["service"], profile(args, f"relay-{streams}")):
                runs = await relay(asker, classes, meter, streams, args.per_stream, args.repeats)
            result["relay"][str(streams)] = runs | cost(runs["through"], per_question)
            print(f"  relay {streams}: {relay_line(result['relay'][str(streams)])}", flush=True)
        # As a GPU decodes (the H200's TPOT for a class: results/gpu-h200/): a chunk every 3.5 ms a
        # stream, so the service relays token by token, not in big reads.
        configure_fake(fake, answer_tokens=256, tpot_ms=PACED_TPOT_MS)
        with profiled(pids["service"], profile(args, "relay-paced")):
            runs = await relay(asker, classes, meter, 120, 2, 1)
        result["relay_paced"] = runs | cost(runs["through"], per_question)
        print(f"  relay 120, paced at {PACED_TPOT_MS} ms a token: {relay_line(result['relay_paced'])}", flush=True)
        configure_fake(fake, answer_tokens=128, tpot_ms=0)
        result["burst"] = await burst(asker, burst_class, meter)
        print(f"  burst of 30: {burst_line(result['burst'])}", flush=True)
    return result


def profile(args: argparse.Namespace, phase: str) -> Path | None:
    return None if args.profile_dir is None else args.profile_dir / f"gateway-profile-{args.label}-{phase}.txt"


def line(seq: dict[str, Any]) -> str:
    d, t = seq["direct"], seq["through"]
    return (
        f"TTFT p50 {d['ttft_ms']['p50']:.2f} -> {t['ttft_ms']['p50']:.2f} ms, "
        f"p95 {d['ttft_ms']['p95']:.2f} -> {t['ttft_ms']['p95']:.2f} ms"
    )


def relay_line(r: dict[str, Any]) -> str:
    d = median([x["tokens_per_s"] for x in r["direct"]])
    t = median([x["tokens_per_s"] for x in r["through"]])
    errors = sum(sum(x["errors"].values()) for x in r["through"])
    return f"{d:,.0f} tok/s direct, {t:,.0f} through; {r['cpu_us_per_token']:.1f} us CPU a token; {errors} errors"


def burst_line(bursts: list[dict[str, Any]]) -> str:
    return "; ".join(
        f"last first token {b['last_first_token_ms'] or float('nan'):.1f} ms, {sum(b['errors'].values())} errors"
        for b in bursts
    )


def git_head(directory: Path) -> str:
    done = subprocess.run(["git", "-C", str(directory), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip()


def run(args: argparse.Namespace) -> dict[str, Any]:
    standin_model()
    redis_port = free_port()
    redis_url = f"redis://127.0.0.1:{redis_port}/0"
    redis = start_redis(redis_url, redis_port, STATE / f"redis-{redis_port}", STATE / "logs" / "redis.log")
    if args.redis_fsync != "always":  # a diagnostic: what durability costs a question
        with redis_client.Redis.from_url(redis_url) as admin:
            admin.config_set("appendfsync", args.redis_fsync)
    fake, fake_root = start_fake()
    email = f"{uuid.uuid4().hex[:8]}@bench.example"
    results: dict[str, Any] = {}
    try:
        for db, workers in enumerate(args.workers, start=1):
            env = service_env(f"redis://127.0.0.1:{redis_port}/{db}", fake_root, free_port())
            asyncio.run(
                add_teacher(Settings(redis=RedisSettings(url=env["CLASSROOM_REDIS__URL"])), email, "B", PASSWORD)
            )
            service, url = start_service(args.classroom, env, workers)
            try:
                print(f"workers {workers}:", flush=True)
                pids = {"service": service.pid, "fake": fake.pid, "redis": redis.pid, "client": os.getpid()}
                results[str(workers)] = [
                    asyncio.run(measure(url, fake_root, pids, email, args)) for _ in range(args.runs)
                ]
            finally:
                service.stop()
    finally:
        fake.stop()
        redis.stop()
    return {
        "label": args.label,
        "service_checkout": git_head(args.classroom.resolve().parents[2]),
        "benchmark_checkout": git_head(PROJECT_ROOT),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": machine(),
        "shape": {"passage_tokens": PASSAGE_TOKENS, "question_tokens": QUESTION_TOKENS, "class_size": CLASS_SIZE},
        "redis_appendfsync": args.redis_fsync,
        "by_workers": results,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--label", default="after")
    parser.add_argument(
        "--classroom",
        type=Path,
        default=Path(sys.executable).with_name("classroom"),
        help="the `classroom` command whose service is measured (another checkout's, for `before`)",
    )
    parser.add_argument("--sequential", type=int, default=200, help="questions one at a time, per path")
    parser.add_argument("--per-stream", type=int, default=4, help="questions each pupil asks in a relay run")
    parser.add_argument("--repeats", type=int, default=2, help="relay runs per path, alternating")
    parser.add_argument("--runs", type=int, default=3, help="whole measurements per worker count (noise: medians)")
    parser.add_argument(
        "--redis-fsync",
        default="always",
        choices=["always", "everysec"],
        help="Redis's appendfsync (the stack's is always; everysec shows what that costs)",
    )
    parser.add_argument("--profile-dir", type=Path, help="py-spy the service instead; its figures are not saved")
    args = parser.parse_args()  # fmt: skip
    result = run(args)
    if args.profile_dir is not None:
        print(f"profiles in {args.profile_dir}")
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"gateway-{args.label}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    table = report(sorted(RESULTS.glob("gateway-*.json"), key=lambda f: (f.stem != "gateway-before", f.stem)))
    (RESULTS / "gateway.md").write_text(table)
    print("\n" + table + f"\nwritten to {out.relative_to(PROJECT_ROOT)} and results/gateway.md")


if __name__ == "__main__":
    main()
