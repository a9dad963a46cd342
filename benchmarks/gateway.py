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
"""

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import orjson
import psutil
import redis as redis_client

from loadtest.client import until_warmed
from loadtest.environment import cpu_model
from loadtest.stats import Distribution, distribution
from loadtest.workload import TextMaker
from service.backends.vllm_stream import brings_tokens
from service.classroom.accounts import add_teacher
from service.classroom.prompting import Prompts
from service.local.model.prepare import prepare_model
from service.local.processes import ManagedProcess, free_port
from service.local.redis_server import start_redis
from service.settings import PROJECT_ROOT, ModelSettings, RedisSettings, Settings

RESULTS = PROJECT_ROOT / "benchmarks" / "results"
STATE = PROJECT_ROOT / "var" / "bench-gateway"
MODEL_DIR = PROJECT_ROOT / "var" / "models" / "tiny"
PASSWORD = "benchmark password"
MODEL = "Qwen/Qwen2.5-1.5B-Instruct"
PASSAGE_TOKENS = 1000
QUESTION_TOKENS = 30
CLASS_SIZE = 30
PACED_TPOT_MS = 3.5


# The client: one aiohttp session (its C HTTP parser), events timed at the read that brought them.


@dataclass
class Answer:
    sent: float
    first: float | None = None
    event_times: list[float] = field(default_factory=list)
    tokens: int = 0
    error: str | None = None
    service_ttft_ms: float | None = None  # the service's own: from the question's arrival to vLLM's first token

    @property
    def ttft_s(self) -> float | None:
        return None if self.first is None else self.first - self.sent

    def gaps_s(self) -> list[float]:
        return [b - a for a, b in zip(self.event_times, self.event_times[1:], strict=False)]


def _sse_events(buffer: bytes) -> tuple[list[bytes], bytes]:
    *complete, rest = buffer.split(b"\n\n")
    return complete, rest


async def ask_direct(session: aiohttp.ClientSession, url: str, body: bytes) -> Answer:
    answer = Answer(sent=time.perf_counter())
    try:
        async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as response:
            if response.status != 200:
                answer.error = f"http {response.status}"
                return answer
            buffer = b""
            async for data in response.content.iter_any():
                now = time.perf_counter()
                events, buffer = _sse_events(buffer + data)
                for event in events:
                    payload = event.removeprefix(b"data: ")
                    if payload == b"[DONE]":
                        continue
                    chunk = orjson.loads(payload)
                    for choice in chunk["choices"]:
                        delta = choice["delta"]
                        if brings_tokens(delta.get("role"), delta.get("content")):
                            answer.event_times.append(now)
                    if chunk.get("usage"):
                        answer.tokens = chunk["usage"]["completion_tokens"]
    except aiohttp.ClientError as exc:
        answer.error = type(exc).__name__
    answer.first = answer.event_times[0] if answer.event_times else None
    return answer


async def ask_service(session: aiohttp.ClientSession, url: str, cookie: str, body: bytes) -> Answer:
    answer = Answer(sent=time.perf_counter())
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream", "Cookie": cookie}
    try:
        async with session.post(url, data=body, headers=headers) as response:
            if response.status != 200:
                answer.error = f"http {response.status}: {(await response.text())[:120]}"
                return answer
            buffer = b""
            async for data in response.content.iter_any():
                now = time.perf_counter()
                events, buffer = _sse_events(buffer.replace(b"\r\n", b"\n") + data.replace(b"\r\n", b"\n"))
                for event in events:
                    if event.startswith(b"event: token"):
                        answer.event_times.append(now)
                    elif event.startswith(b"event: done"):
                        done = orjson.loads(event.split(b"data: ", 1)[1])
                        answer.tokens = done["usage"]["completion_tokens"]
                        answer.service_ttft_ms = done["ttft_ms"]
                    elif event.startswith(b"event: error"):
                        answer.error = "error event"
    except aiohttp.ClientError as exc:
        answer.error = type(exc).__name__
    answer.first = answer.event_times[0] if answer.event_times else None
    if answer.error is None and answer.first is None:
        answer.error = "no token"
    return answer


# The parts: Redis, the fake, the service.


def wait_http(url: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer 200")


def start_fake() -> tuple[ManagedProcess, str]:
    port = free_port()
    argv = [sys.executable, "-m", "loadtest.fake_vllm", "--port", str(port)]
    process = ManagedProcess("fake vLLM", argv, STATE / "logs" / f"fake-{port}.log")
    process.start()
    root = f"http://127.0.0.1:{port}"
    wait_http(f"{root}/health")
    return process, root


def configure_fake(root: str, **behaviour: float | None) -> None:
    httpx.post(f"{root}/fake/config", json=behaviour, timeout=5).raise_for_status()


def service_env(redis_url: str, fake_root: str, port: int) -> dict[str, str]:
    return dict(os.environ) | {
        "CLASSROOM_REDIS__URL": redis_url,
        "CLASSROOM_BACKEND__BASE_URL": f"{fake_root}/v1",
        "CLASSROOM_MODEL__DIR": str(MODEL_DIR),
        "CLASSROOM_STATE_DIR": str(STATE),
        "CLASSROOM_API__PORT": str(port),
        # Pupils here ask back to back for minutes: no per-pupil limit.
        "CLASSROOM_LIMITS__QUESTIONS_PER_MINUTE": "1000000",
    }


def start_service(classroom: Path, env: dict[str, str], workers: int) -> tuple[ManagedProcess, str]:
    argv = [str(classroom), "serve"] + (["--workers", str(workers)] if workers > 1 else [])
    port = env["CLASSROOM_API__PORT"]
    process = ManagedProcess("service", argv, STATE / "logs" / f"service-{port}.log", env=env)
    process.start()
    url = f"http://127.0.0.1:{port}"
    process.wait_until(lambda: _ready(url), 60)
    return process, url


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def cpu_s(pid: int) -> float:
    """User and system CPU seconds of a process and all its living descendants."""
    root = psutil.Process(pid)
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


@dataclass
class Meter:
    """CPU seconds of each part over one measured stretch."""

    pids: dict[str, int]
    began: dict[str, float] = field(default_factory=dict)

    def start(self) -> None:
        self.began = {name: cpu_s(pid) for name, pid in self.pids.items()}

    def stop(self) -> dict[str, float]:
        return {name: cpu_s(pid) - self.began[name] for name, pid in self.pids.items()}


@contextlib.contextmanager
def profiled(pid: int, out: Path | None) -> Iterator[None]:
    """py-spy samples the service (and its workers) while the block runs, stopping it for each sample so
    that every stack is whole; `out` gets the shares of the samples in each function."""
    if out is None:
        yield
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    raw = out.with_suffix(".raw")
    py_spy = Path(sys.executable).with_name("py-spy")
    argv = [str(py_spy), "record", "-p", str(pid), "--subprocesses", "-r", "250", "-f", "raw", "-o", str(raw)]
    spy = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # py-spy attaches
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=60)
        out.write_text(top_frames(raw.read_text()))
        raw.unlink()


def top_frames(collapsed: str, count: int = 30) -> str:
    """Self and inclusive shares of the samples, by function, from py-spy's collapsed stacks (threads that
    only wait are left out: they hold no CPU)."""
    own: dict[str, int] = {}
    through: dict[str, int] = {}
    total = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        frames = [f.split(" (")[0] + " (" + f.split(" (")[-1].split("site-packages/")[-1] for f in stack.split(";")]
        if any(idle in frames[-1] for idle in ("Condition.wait", "_worker (concurrent", "Queue.get")):
            continue
        samples = int(count_text)
        total += samples
        own[frames[-1]] = own.get(frames[-1], 0) + samples
        for frame in set(frames):
            through[frame] = through.get(frame, 0) + samples
    lines = [f"{total} samples of the service's running threads", "", "self %  function"]
    lines += [f"{own[f] / total * 100:5.1f}  {f}" for f in sorted(own, key=own.__getitem__, reverse=True)[:count]]
    lines += ["", "inclusive %  function (below the frames every sample passes through)"]
    ranked = sorted((f for f in through if through[f] < total * 0.98), key=through.__getitem__, reverse=True)
    ranked = ranked[: count * 3]
    lines += [f"{through[f] / total * 100:5.1f}  {f}" for f in ranked]
    return "\n".join(lines) + "\n"


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


async def burst(asker: Asker, classroom: Classroom, meter: Meter) -> list[dict[str, Any]]:
    """The whole class presses "ask" at once; the figure is when the last of them sees a first token."""
    bursts = []
    for _ in range(2):
        meter.start()
        began = time.perf_counter()
        answers = await asyncio.gather(*(asker.through(classroom, p) for p in range(len(classroom.cookies))))
        seconds = time.perf_counter() - began
        firsts = [a.first for a in answers if a.first is not None]
        row = summary(answers, seconds) | {"cpu_s": meter.stop()}
        row["last_first_token_ms"] = (max(firsts) - began) * 1000 if len(firsts) == len(answers) else None
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
        # As a GPU decodes (the H200's TPOT for a class: loadtest/results/gpu-h200/): a chunk every 3.5 ms a
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


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def git_head(directory: Path) -> str:
    done = subprocess.run(["git", "-C", str(directory), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip()


def run(args: argparse.Namespace) -> dict[str, Any]:
    prepare_model(MODEL_DIR, "tiny", seed=0, standin=True)
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
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version()},
        "shape": {"passage_tokens": PASSAGE_TOKENS, "question_tokens": QUESTION_TOKENS, "class_size": CLASS_SIZE},
        "redis_appendfsync": args.redis_fsync,
        "by_workers": results,
    }


Figure = Callable[[dict[str, Any]], tuple[float, ...]]


def _dist(d: dict[str, Any], key: str) -> float:
    value = Distribution.model_validate(d).at(key) if d else None
    return float("nan") if value is None else value


def _tokens_per_s(runs: list[dict[str, Any]]) -> float:
    return median([x["tokens_per_s"] for x in runs])


def _errors(m: dict[str, Any]) -> float:
    through = [*m["burst"], *m["relay"]["30"]["through"], *m["relay"]["120"]["through"], m["sequential"]["through"]]
    through += m["relay_paced"]["through"] if "relay_paced" in m else []
    return float(sum(sum(x["errors"].values()) for x in through))


NAN = float("nan")
# (figure, format of each value, its unit, the values of one measurement)
FIGURES: list[tuple[str, str, str, Figure]] = [
    ("TTFT one at a time, direct p50 / p95", "{:.2f}", " ms", lambda m: (
        _dist(m["sequential"]["direct"]["ttft_ms"], "p50"), _dist(m["sequential"]["direct"]["ttft_ms"], "p95"))),
    ("TTFT one at a time, through p50 / p95", "{:.2f}", " ms", lambda m: (
        _dist(m["sequential"]["through"]["ttft_ms"], "p50"), _dist(m["sequential"]["through"]["ttft_ms"], "p95"))),
    ("added TTFT p50 / p95", "{:+.2f}", " ms", lambda m: tuple(
        _dist(m["sequential"]["through"]["ttft_ms"], k) - _dist(m["sequential"]["direct"]["ttft_ms"], k)
        for k in ("p50", "p95"))),
    ("of which in the service (arrival to vLLM's first token) p50", "{:.2f}", " ms", lambda m: (
        _dist(m["sequential"]["through"].get("service_ttft_ms", {}), "p50"),)),
    ("service CPU a question, outside streaming", "{:.2f}", " ms", lambda m: (
        m["questions"]["service_cpu_ms_per_question"],)),
    ("tokens/s, 30 at once, direct / through", "{:,.0f}", "", lambda m: (
        _tokens_per_s(m["relay"]["30"]["direct"]), _tokens_per_s(m["relay"]["30"]["through"]))),
    ("tokens/s, 120 at once, direct / through", "{:,.0f}", "", lambda m: (
        _tokens_per_s(m["relay"]["120"]["direct"]), _tokens_per_s(m["relay"]["120"]["through"]))),
    ("service CPU a streamed token, 30 / 120 at once", "{:.1f}", " µs", lambda m: (
        m["relay"]["30"]["cpu_us_per_token"], m["relay"]["120"]["cpu_us_per_token"])),
    ("tokens an SSE event, 120 at once", "{:.1f}", "", lambda m: (
        median([x["tokens_per_event"] for x in m["relay"]["120"]["through"]]),)),
    (f"paced at {PACED_TPOT_MS} ms a token, 120 at once: tokens/s direct / through", "{:,.0f}", "", lambda m: (
        _tokens_per_s(m["relay_paced"]["direct"]), _tokens_per_s(m["relay_paced"]["through"]))
        if "relay_paced" in m else (NAN, NAN)),
    ("paced: service CPU a streamed token", "{:.1f}", " µs", lambda m: (
        m["relay_paced"]["cpu_us_per_token"] if "relay_paced" in m else NAN,)),
    ("paced: gap between events through, p50 / p95", "{:.2f}", " ms", lambda m: tuple(
        median([_dist(x["gap_ms"], k) for x in m["relay_paced"]["through"]]) for k in ("p50", "p95"))
        if "relay_paced" in m else (NAN, NAN)),
    ("burst of 30: last pupil's first token, 1st / 2nd burst", "{:.0f}", " ms", lambda m: tuple(
        b["last_first_token_ms"] or NAN for b in m["burst"])),
    ("errors through the service, all phases", "{:.0f}", "", lambda m: (_errors(m),)),
]  # fmt: skip


def _cell(form: str, unit: str, measurements: list[dict[str, Any]], figure: Figure) -> str:
    """Each value's median over the runs, with the range when there were several."""
    values = list(zip(*(figure(m) for m in measurements), strict=True))
    parts = []
    for series in values:
        mid = median(list(series))
        spread = f" [{form.format(min(series))}–{form.format(max(series))}]" if len(series) > 1 else ""
        parts.append(form.format(mid) + spread)
    return (" / ".join(parts) + unit).replace("nan", "–")


def report(files: list[Path]) -> str:
    """A Markdown table of every saved run: one column per (label, workers), medians over its runs."""
    saved = [json.loads(f.read_text()) for f in files]
    columns = []
    for r in saved:
        for workers, measured in r["by_workers"].items():
            columns.append((r, workers, measured if isinstance(measured, list) else [measured]))
    head = " | ".join(
        f"{r['label']} ({r['service_checkout']}), {w} worker(s), {len(ms)} run(s)" for r, w, ms in columns
    )
    lines = [f"| figure | {head} |", "|---|" + "---|" * len(columns)]
    for name, form, unit, figure in FIGURES:
        lines.append(f"| {name} | " + " | ".join(_cell(form, unit, ms, figure) for _, _, ms in columns) + " |")
    return "\n".join(lines) + "\n"


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
