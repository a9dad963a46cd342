"""Open pages on one service process: what idle pupil pages and teacher feeds cost it, and whether a class's
burst feels them.

Starts a Redis, the instant fake vLLM (`loadtest.fake_vllm`) and the service as a real `classroom serve` with one
worker (the parts of benchmarks/gateway.py), the open-files limit raised to the hard limit before they start (they
inherit it). Pupil pages are classes of 30 real joined pupils (POST /api/join), each class with a 1000-token passage
of its own, as the burst's class; each page is one `GET /api/pupil/events` held open and read, from the first `class`
event on, by a bare asyncio protocol in a process of its own (`PageHolder`: the burst's client times its answers on
an event loop that is not also reading the pages; before 2026-12-06 one loop did both). Then:

1. memory: the service's VmRSS (and RssAnon) from /proc before any page is open and after opening `--pages` of
   them in steps (`--settle` s at each), and after `--feeds` teacher feeds (`GET /api/classrooms/{id}/events`,
   the teacher signed in): one a class, the burst class's first (`--feeds-on spread`, as a district's teachers
   have them), or all of them on the burst class (`--feeds-on burst`, the worst case of fan-out);
2. Redis: the service's connections in Redis's `CLIENT LIST` (its database; pub/sub ones apart) and its
   `classroom_subscribers` gauge, with nothing open and with every page and feed open;
3. CPU a keep-alive: the service's CPU (utime + stime, /proc) over `--window` idle seconds with no page open and
   with the most pages open, the difference divided by the keep-alives the pages received meanwhile; again over
   `--idle-window` s in every round of 4. without pages (none) and with them (pages);
4. a class's burst: 30 pupils of one class (a 1000-token passage, the service's own prompt layout, the fake's
   answers of `--answer-tokens`) press "ask" at once, with nothing open (none), with the pupil pages (pages) and with
   the pages and the feeds (all), in rounds none, pages, all, all, pages, none, ... (`--rounds` of each),
   `--bursts` bursts a round: time to first token as the pupils see it (p50, p95, the last), errors, the service's
   CPU, and the question events the feeds received (each question is announced to every feed of its class when
   asked and when answered). After pages or feeds open or close, until the service is quiet, then one burst
   reported apart.

With `--apart` the pupil pages are open on a second `classroom serve` process, as deploy/k8s/pages.yaml and the
ingress run them, and the class asks (and the feeds read) the first.

    .venv/bin/python -m benchmarks.open_pages [--pages 1000 5000 10000] [--feeds 200] [--rounds 4] [--keepalive 10]
    .venv/bin/python -m benchmarks.open_pages --feeds-on burst   # into open-pages-one-class.json and .md
    .venv/bin/python -m benchmarks.open_pages --apart       # into open-pages-apart.json and .md
    .venv/bin/python -m benchmarks.open_pages --quick       # smoke: small numbers, under a minute, nothing written
    .venv/bin/python -m benchmarks.open_pages --report      # open-pages.md again from the saved JSON

Writes benchmarks/results/open-pages.json and open-pages.md (open-pages-one-class.* with `--feeds-on burst`). On
2 cores the client, the fake and Redis share the CPU with the service: each one's CPU is recorded beside the
figures.
"""

import argparse
import asyncio
import contextlib
import json
import math
import multiprocessing
import multiprocessing.connection
import os
import random
import resource
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any, cast

import aiohttp
import httpx
import redis as redis_client
import uvloop
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.gateway import (
    CLASS_SIZE,
    PASSAGE_TOKENS,
    PASSWORD,
    Asker,
    Classroom,
    git_head,
    lag_over,
    loop_lag,
    make_classes,
)
from benchmarks.gateway_parts import (
    MODEL_DIR,
    STATE,
    Meter,
    configure_fake,
    cpu_s,
    service_env,
    start_fake,
    start_service,
)
from benchmarks.parts import machine, standin_model
from loadtest.stats import distribution
from loadtest.workload import TextMaker
from service.classroom.accounts import add_teacher
from service.classroom.prompting import Prompts
from service.local.processes import free_port
from service.local.redis_server import start_redis
from service.settings import PROJECT_ROOT, ModelSettings, RedisSettings, Settings

RESULTS_DIR = PROJECT_ROOT / "benchmarks" / "results"
RESULT_NAMES = {"spread": "open-pages", "burst": "open-pages-one-class"}  # by where the feeds are (--feeds-on)
PUPIL_COOKIE = "classroom_pupil"
TEACHER_COOKIE = "classroom_teacher"
SERVICE_DB = 1
OPENING = 64  # pages being opened at once
PING = b": keep-alive"  # the service's keep-alive comment (service/api/event_stream.py)
QUESTION_EVENT = b"event: question"


class Stream(asyncio.Protocol):
    """One open page's connection, read by the event loop itself: open once the response's first bytes that
    matter (`ready`) came, then counting keep-alives and question events until closed."""

    def __init__(self, request: bytes, ready: bytes) -> None:
        self.request = request
        self.ready = ready
        self.opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.BaseTransport | None = None
        self.head = b""
        self.pings = 0
        self.events = 0
        self.lost = False
        self._tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        cast(asyncio.WriteTransport, transport).write(self.request)  # uvloop's transports are no subclasses

    def data_received(self, data: bytes) -> None:
        if not self.opened.done():
            self.head += data
            if len(self.head) >= 12 and not self.head.startswith(b"HTTP/1.1 200"):
                self.opened.set_exception(RuntimeError(self.head[:200].decode(errors="replace")))
            elif self.ready in self.head:
                self.opened.set_result(None)
        seen = self._tail + data  # a comment or event name split between two reads is counted once
        self.pings += seen.count(PING) - self._tail.count(PING)
        self.events += seen.count(QUESTION_EVENT) - self._tail.count(QUESTION_EVENT)
        self._tail = seen[-(len(QUESTION_EVENT) - 1) :]

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if not self.opened.done():
            self.opened.set_exception(exc or ConnectionError("closed before the first event"))

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def get_request(port: int, path: str, cookie: str) -> bytes:
    return (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nCookie: {cookie}\r\nAccept: text/event-stream\r\n\r\n"
    ).encode()


async def open_streams(
    port: int, requests: list[bytes], ready: bytes, streams: list[Stream], failed: dict[str, int]
) -> None:
    """Each request on a connection of its own, OPENING at a time; those open join `streams`, the others are
    counted in `failed` by why."""
    loop = asyncio.get_running_loop()
    gate = asyncio.Semaphore(OPENING)

    async def one(request: bytes) -> None:
        async with gate:
            try:
                _, stream = await loop.create_connection(lambda: Stream(request, ready), "127.0.0.1", port)
                await asyncio.wait_for(stream.opened, 60)
            except (OSError, RuntimeError, TimeoutError) as exc:
                why = f"{type(exc).__name__}: {str(exc)[:80]}"
                failed[why] = failed.get(why, 0) + 1
                return
            streams.append(stream)

    await asyncio.gather(*(one(r) for r in requests))


class PageHolder:
    """The open pages and feeds, held and read by a process of their own (`hold`), so that the burst's client,
    here, times its answers on an event loop that is not also reading 10,000 sockets. Each call is a command
    over a pipe, answered once done."""

    def __init__(self) -> None:
        self._conn, theirs = multiprocessing.Pipe()
        self.process = multiprocessing.get_context("spawn").Process(target=hold, args=(theirs,), daemon=True)
        self.process.start()
        self.pages = self.feeds = 0

    async def _ask(self, *command: Any) -> Any:
        def exchange() -> Any:
            self._conn.send(command)
            return self._conn.recv()

        answer = await asyncio.to_thread(exchange)
        self.pages, self.feeds = answer["pages"], answer["feeds"]
        return answer

    async def open(self, kind: str, port: int, requests: list[bytes], ready: bytes) -> dict[str, int]:
        """Open `requests` to `port` as pages or feeds (`kind`); the ones that did not open, by why."""
        failed: dict[str, int] = (await self._ask("open", kind, port, requests, ready))["failed"]
        return failed

    async def close(self, kind: str) -> None:
        await self._ask("close", kind)

    async def counts(self) -> dict[str, int]:
        """Open pages and feeds, keep-alives the pages received, question events the feeds received, pages lost."""
        counts: dict[str, int] = await self._ask("counts")
        return counts

    def stop(self) -> None:
        with contextlib.suppress(OSError, EOFError):
            self._conn.send(("stop",))
        self.process.join(30)
        if self.process.is_alive():
            self.process.kill()


def hold(conn: "multiprocessing.connection.Connection") -> None:
    """The page holder's process: opens, closes and counts streams as `PageHolder` asks, until told to stop."""
    raise_open_files()

    async def serve() -> None:
        streams: dict[str, list[Stream]] = {"pages": [], "feeds": []}
        while True:
            command = await asyncio.to_thread(conn.recv)
            failed: dict[str, int] = {}
            if command[0] == "stop":
                for stream in streams["pages"] + streams["feeds"]:
                    stream.close()
                return
            if command[0] == "open":
                _, kind, port, requests, ready = command
                await open_streams(port, requests, ready, streams[kind], failed)
            elif command[0] == "close":
                for stream in streams[command[1]]:
                    stream.close()
                streams[command[1]] = []
            conn.send(
                {
                    "pages": len(streams["pages"]),
                    "feeds": len(streams["feeds"]),
                    "pings": sum(s.pings for s in streams["pages"]),
                    "events": sum(s.events for s in streams["feeds"]),
                    "lost": sum(s.lost for s in streams["pages"]),
                    "failed": failed,
                }
            )

    uvloop.run(serve())


# The service process: its memory, its open files, its Redis connections, its gauges.


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS, RssAnon and VmHWM of a process in KiB, and its open files."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    kib = {k: int(v.split()[0]) for k, _, v in (line.partition(":") for line in status) if k in ("VmRSS", "RssAnon")}
    return kib | {"fds": len(os.listdir(f"/proc/{pid}/fd"))}


def open_files_limit(pid: int) -> str:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return " ".join(line.split()[3:5])
    return "?"


def redis_connections(redis_url: str) -> dict[str, int]:
    """The service's connections in Redis (those on its database; this benchmark's own is on database 0)."""
    with redis_client.Redis.from_url(redis_url.rsplit("/", 1)[0] + "/0") as admin:
        clients = [c for c in admin.client_list() if int(c["db"]) == SERVICE_DB]
    pubsub = [c for c in clients if "P" in c["flags"] or int(c.get("sub", 0)) or int(c.get("psub", 0))]
    return {"all": len(clients), "pubsub": len(pubsub)}


async def gauges(service: str) -> dict[str, float]:
    async with httpx.AsyncClient(timeout=10) as client:
        text = (await client.get(f"{service}/metrics")).text
    wanted = ("classroom_subscribers", "classroom_subscribed_channels")
    return {f.name: f.samples[0].value for f in text_string_to_metric_families(text) if f.name in wanted}


async def settled(pid: int, seconds: float) -> dict[str, int]:
    await asyncio.sleep(seconds)
    return proc_status(pid)


# Setting up: the page classes' pupils, the teacher's cookie.


async def page_pupils(url: str, email: str, pupils: int, maker: TextMaker) -> tuple[list[str], list[str]]:
    """Classes of 30, each with a passage of its own as long as the burst's, and `pupils` joined pupils' cookies,
    class by class; and the classes' ids."""
    rng = random.Random()
    codes, ids = [], []
    async with httpx.AsyncClient(base_url=url, timeout=60) as teacher:
        (await teacher.post("/api/teacher/session", json={"email": email, "password": PASSWORD})).raise_for_status()
        for c in range(math.ceil(pupils / CLASS_SIZE)):
            made = (await teacher.post("/api/classrooms", json={"name": f"Pages {c}"})).json()
            body = {
                "title": f"Passage {uuid.uuid4().hex[:8]}",
                "text": maker.text(rng, PASSAGE_TOKENS),
                "publish": True,
            }
            (await teacher.post(f"/api/classrooms/{made['id']}/passages", json=body)).raise_for_status()
            codes.append(made["join_code"])
            ids.append(made["id"])
    connector = aiohttp.TCPConnector(limit=32)
    async with aiohttp.ClientSession(url, connector=connector, cookie_jar=aiohttp.DummyCookieJar()) as session:

        async def join(n: int) -> str:
            body = {"join_code": codes[n // CLASS_SIZE], "name": f"P{n}"}
            async with session.post("/api/join", json=body) as joined:
                if joined.status != 201:
                    raise RuntimeError(f"join: HTTP {joined.status} {(await joined.text())[:120]}")
                return f"{PUPIL_COOKIE}={joined.cookies[PUPIL_COOKIE].value}"

        return list(await asyncio.gather(*(join(n) for n in range(pupils)))), ids


def teacher_cookie(url: str, email: str) -> str:
    signed = httpx.post(f"{url}/api/teacher/session", json={"email": email, "password": PASSWORD}, timeout=30)
    signed.raise_for_status()
    return f"{TEACHER_COOKIE}={signed.cookies[TEACHER_COOKIE]}"


# The phases.


CONDITIONS = {"none": "no page open", "pages": "{pages} pupil pages", "all": "{pages} pupil pages + {feeds} feeds {on}"}
ON = {"spread": "(one a class)", "burst": "(all on the burst's class)"}
ORDER = ["none", "pages", "all", "all", "pages", "none"]  # rounds in this order, again and again
QUIET_CORES = 0.2  # the service is quiet below this much of a core over a second (10,000 idle pages: ~0.09)


@dataclass
class Bench:
    service: str  # where the burst asks
    # Where the pupil pages are open: `service`, or with --apart a process of their own (a classroom-pages pod's).
    # The teachers' feeds are on `service` either way, as the ingress routes them (deploy/k8s/ingress.yaml).
    pages_url: str
    pid: int  # the process holding the pages
    feeds_pid: int  # the one holding the feeds
    redis_url: str
    meter: Meter
    pages: list[bytes]  # every page's request, the most pages
    feeds: list[bytes]
    holder: PageHolder
    failed: dict[str, int] = field(default_factory=dict)  # pages and feeds that did not open, by why
    fds_none: int = 0  # the service's open files with nothing open

    def _failed(self, failed: dict[str, int]) -> None:
        for why, count in failed.items():
            self.failed[why] = self.failed.get(why, 0) + count

    async def open_pages(self, count: int) -> None:
        port = int(self.pages_url.rsplit(":", 1)[1])
        self._failed(await self.holder.open("pages", port, self.pages[self.holder.pages : count], b"data:"))

    async def become(self, condition: str) -> dict[str, float]:
        """Open or close pages and feeds for `condition`, then until the service has let closed sockets go and
        is quiet: the seconds each took."""
        began = time.perf_counter()
        if condition != "all" and self.holder.feeds:
            await self.holder.close("feeds")
        if condition == "none" and self.holder.pages:
            await self.holder.close("pages")
        if condition != "none" and not self.holder.pages:
            await self.open_pages(len(self.pages))
        if condition == "all" and not self.holder.feeds:
            port = int(self.service.rsplit(":", 1)[1])
            self._failed(await self.holder.open("feeds", port, self.feeds, b"\r\n\r\n"))
        open_now = self.holder.pages + (self.holder.feeds if self.feeds_pid == self.pid else 0)
        for _ in range(240):  # two minutes at most; the pool may have opened Redis connections meanwhile
            if proc_status(self.pid)["fds"] <= self.fds_none + open_now + 40:
                break
            await asyncio.sleep(0.5)
        changed = time.perf_counter()
        calm = 0
        while calm < 2 and time.perf_counter() - changed < 120:
            used = cpu_s(self.pid)
            await asyncio.sleep(1.0)
            calm = calm + 1 if cpu_s(self.pid) - used < QUIET_CORES else 0
        return {"change_s": changed - began, "quiet_after_s": time.perf_counter() - changed}

    async def pings(self) -> int:
        return (await self.holder.counts())["pings"]

    async def feed_events(self) -> int:
        return (await self.holder.counts())["events"]


async def idle(bench: Bench, window_s: float) -> dict[str, Any]:
    """CPU of each part over `window_s` with nothing asked, and the keep-alives the open pages received."""
    pings = await bench.pings()
    bench.meter.start()
    await asyncio.sleep(window_s)
    used = bench.meter.stop()
    return {"pages": bench.holder.pages, "window_s": window_s, "cpu_s": used, "pings": await bench.pings() - pings}


async def burst(asker: Asker, classroom: Classroom, bench: Bench) -> dict[str, Any]:
    """The class presses "ask" at once; the feeds' events counted until a second after the last answer."""
    lag_before = await loop_lag(bench.service)
    events = await bench.feed_events()
    load = os.getloadavg()[0]
    bench.meter.start()
    began = time.perf_counter()
    answers = await asyncio.gather(*(asker.through(classroom, p) for p in range(len(classroom.cookies))))
    seconds = time.perf_counter() - began
    await asyncio.sleep(1.0)
    cpu = bench.meter.stop()
    ttfts = [t for a in answers if a.error is None and (t := a.ttft_s) is not None]
    firsts = [a.first for a in answers if a.first is not None]
    errors: dict[str, int] = {}
    for a in answers:
        if a.error is not None:
            errors[a.error] = errors.get(a.error, 0) + 1
    return {
        "ttft_ms": distribution(ttfts).model_dump(),
        "last_first_token_ms": (max(firsts) - began) * 1000 if len(firsts) == len(answers) else None,
        "seconds": seconds,
        "errors": errors,
        "cpu_s": cpu,
        "feed_events": await bench.feed_events() - events,
        "loop_late": lag_over(lag_before, await loop_lag(bench.service)),
        "load_1m": load,
        "pages": bench.holder.pages,
        "feeds": bench.holder.feeds,
    }


async def measure(bench: Bench, asker: Asker, burst_class: Classroom, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"memory": []}
    await burst(asker, burst_class, bench)  # unmeasured: the first burst opens the pool's connections
    out["redis_nothing_open"] = redis_connections(bench.redis_url) | await gauges(bench.pages_url)
    before = await settled(bench.pid, args.settle)
    bench.fds_none = before["fds"]
    out["memory"].append({"pages": 0} | before)
    out["idle_none"] = await idle(bench, args.window)
    print(f"  idle, no page: service {cpu_line(out['idle_none'])}", flush=True)
    for count in args.pages:
        began = time.perf_counter()
        await bench.open_pages(count)
        took = time.perf_counter() - began
        row = {"pages": bench.holder.pages, "open_s": took} | await settled(bench.pid, args.settle)
        out["memory"].append(row)
        print(f"  {row['pages']} pages open ({took:.0f} s): {memory_line(before, row)}", flush=True)
    out["idle_pages"] = await idle(bench, args.window)
    out["after_idle"] = {"pages": bench.holder.pages} | proc_status(bench.pid)
    out["pages_lost_while_idle"] = (await bench.holder.counts())["lost"]
    print(f"  idle, {out['idle_pages']['pages']} pages: service {cpu_line(out['idle_pages'])}", flush=True)
    await bench.become("all")
    out["feeds"] = {"feeds": bench.holder.feeds} | await settled(bench.feeds_pid, args.settle)
    out["redis_all_open"] = redis_connections(bench.redis_url) | await gauges(bench.pages_url)
    print(f"  + {out['feeds']['feeds']} feeds: Redis {out['redis_all_open']}", flush=True)
    out["bursts"] = {condition: [] for condition in CONDITIONS}
    out["changes"] = []
    out["idle_rounds"] = {"none": [], "pages": []}
    was = "all"
    for i in range(len(CONDITIONS) * args.rounds):
        condition = ORDER[i % len(ORDER)]
        change: dict[str, Any] = {"from": was, "to": condition} | await bench.become(condition)
        if condition != was:  # the first burst after pages or feeds opened or closed, apart
            first = await burst(asker, burst_class, bench)
            change["first_burst"] = first
            print(f"  first burst after the change, {condition}: {burst_line(first)}", flush=True)
            await asyncio.sleep(args.pause)
        out["changes"].append(change)
        was = condition
        if condition != "all" and args.idle_window > 0:  # keep-alives' CPU again, alternating with none
            out["idle_rounds"][condition].append(await idle(bench, args.idle_window))
            print(f"  idle, {condition}: service {cpu_line(out['idle_rounds'][condition][-1])}", flush=True)
        async with profiled(bench.pid, args.profile, f"{condition}-{i}"):
            for _ in range(args.bursts):
                row = await burst(asker, burst_class, bench)
                out["bursts"][condition].append(row)
                print(f"  burst, {condition}: {burst_line(row)}", flush=True)
                await asyncio.sleep(args.pause)
    out["redis_after_bursts"] = redis_connections(bench.redis_url) | await gauges(bench.pages_url)
    out["redis_after_bursts"]["state"] = condition
    out["failed_to_open"] = bench.failed
    return out


@contextlib.asynccontextmanager
async def profiled(pid: int, folder: Path | None, name: str) -> AsyncIterator[None]:
    """py-spy samples the service while the block runs (nonblocking, so no native frames: py-spy refuses
    both), its collapsed stacks written to `folder`/`name`.txt; nothing without a folder."""
    if folder is None:
        yield
        return
    await asyncio.to_thread(folder.mkdir, parents=True, exist_ok=True)
    spy = Path(sys.executable).with_name("py-spy")
    recorder = await asyncio.create_subprocess_exec(
        *(str(spy), "record", "--pid", str(pid), "--rate", "500", "--nonblocking", "--format", "raw"),
        *("--output", str(folder / f"{name}.txt")),
        stdout=subprocess.DEVNULL,
    )
    try:
        await asyncio.sleep(1.0)  # py-spy attaches before the block starts
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):  # py-spy gave up early: its own message says why
            recorder.send_signal(signal.SIGINT)
        await asyncio.wait_for(recorder.wait(), 30)


def cpu_line(window: dict[str, Any]) -> str:
    return f"{window['cpu_s']['service'] / window['window_s'] * 100:.2f} % of a core, {window['pings']} keep-alives"


def memory_line(before: dict[str, int], row: dict[str, float]) -> str:
    per = (row["VmRSS"] - before["VmRSS"]) / max(row["pages"], 1)
    return f"RSS {row['VmRSS'] / 1024:.0f} MiB, {per:.1f} KiB a page"


def burst_line(row: dict[str, Any]) -> str:
    t = row["ttft_ms"]
    last = row["last_first_token_ms"] or float("nan")
    return (
        f"TTFT p50 {t['p50'] or float('nan'):.1f} p95 {t['p95'] or float('nan'):.1f} last {last:.1f} ms, "
        f"{sum(row['errors'].values())} errors, {row['feed_events']} feed events, "
        f"service CPU {_asked(row['cpu_s']) * 1000:.0f} ms"
    )


async def run_async(
    args: argparse.Namespace, service: str, pages_url: str, pids: dict[str, int], redis_url: str, fake: str
) -> Any:
    email = args.email
    prompts = Prompts.from_settings(Settings(model=ModelSettings(dir=MODEL_DIR)))
    maker = TextMaker(prompts.tokenizer)
    began = time.perf_counter()
    burst_class = (await make_classes(service, email, 1, CLASS_SIZE, maker))[0]
    cookies, page_classes = await page_pupils(service, email, max(args.pages), maker)
    # One feed a class, as a district's teachers have them, or every feed on the burst class: the worst case.
    fed = [burst_class.id, *page_classes] if args.feeds_on == "spread" else [burst_class.id]
    print(f"  {len(cookies)} pupils joined in {time.perf_counter() - began:.0f} s", flush=True)
    pages_port, port = int(pages_url.rsplit(":", 1)[1]), int(service.rsplit(":", 1)[1])
    teacher = teacher_cookie(service, email)
    holder = PageHolder()
    bench = Bench(
        service,
        pages_url,
        pids["service"],
        pids.get("asked", pids["service"]),
        redis_url,
        Meter(pids | {"pages": cast(int, holder.process.pid)}),
        [get_request(pages_port, "/api/pupil/events", c) for c in cookies],
        [get_request(port, f"/api/classrooms/{fed[f % len(fed)]}/events", teacher) for f in range(args.feeds)],
        holder,
    )
    configure_fake(fake, answer_tokens=args.answer_tokens, tpot_ms=0)
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, cookie_jar=aiohttp.DummyCookieJar()) as s:
        asker = Asker(s, service, fake, prompts, maker)
        try:
            return await measure(bench, asker, burst_class, args)
        finally:
            holder.stop()


def raise_open_files() -> int:
    """The hard limit for this process and, inherited, the parts it starts."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def changed_files(folder: str) -> list[str]:
    """Files of `folder` that differ from the checkout's commit (others may be editing them as it runs)."""
    done = subprocess.run(
        ["git", "-C", str(PROJECT_ROOT), "status", "--porcelain", "--", folder], capture_output=True, text=True
    )
    return [line[3:] for line in done.stdout.splitlines()]


def run(args: argparse.Namespace) -> dict[str, Any]:
    checkout, changed = git_head(PROJECT_ROOT), changed_files("service")
    limit = raise_open_files()
    standin_model()
    redis_port = free_port()
    redis = start_redis(
        f"redis://127.0.0.1:{redis_port}/0", redis_port, STATE / f"redis-{redis_port}", STATE / "logs" / "redis.log"
    )
    fake, fake_root = start_fake()
    args.email = f"{uuid.uuid4().hex[:8]}@bench.example"
    redis_url = f"redis://127.0.0.1:{redis_port}/{SERVICE_DB}"
    try:
        env = service_env(redis_url, fake_root, free_port()) | {
            "CLASSROOM_API__WORKERS": "1",
            "CLASSROOM_ANSWER__KEEPALIVE_S": str(args.keepalive),
        }
        asyncio.run(add_teacher(Settings(redis=RedisSettings(url=redis_url)), args.email, "B", PASSWORD))
        service, url = start_service(args.classroom, env, 1)
        # With --apart the pages and feeds are held by a second process (a `classroom-pages` pod's), the
        # questions asked of the first: "service" is always the one holding the pages, "asked" the one asked.
        pages, pages_url = (
            start_service(args.classroom, env | {"CLASSROOM_API__PORT": str(free_port())}, 1)
            if (args.apart)
            else (service, url)
        )
        try:
            pids = {"service": pages.pid, "fake": fake.pid, "redis": redis.pid, "client": os.getpid()}
            if args.apart:
                pids["asked"] = service.pid
            print(f"service {url}, pid {service.pid}, open files {open_files_limit(service.pid)}", flush=True)
            if args.apart:
                print(f"pages' service {pages_url}, pid {pages.pid}", flush=True)
            result = uvloop.run(run_async(args, url, pages_url, pids, redis_url, fake_root))
            service_limit = open_files_limit(pages.pid)
        finally:
            service.stop()
            if args.apart:
                pages.stop()
    finally:
        fake.stop()
        redis.stop()
    return {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "checkout": checkout,
        "service_changed": changed,
        "machine": machine(),
        "settings": {
            "pages": args.pages,
            "feeds": args.feeds,
            "feeds_on": args.feeds_on,
            "keepalive_s": args.keepalive,
            "window_s": args.window,
            "idle_window_s": args.idle_window,
            "rounds": args.rounds,
            "bursts_a_round": args.bursts,
            "answer_tokens": args.answer_tokens,
            "class_size": CLASS_SIZE,
            "passage_tokens": PASSAGE_TOKENS,
            "open_files_client": limit,
            "open_files_service": service_limit,
            "workers": 1,
            "apart": args.apart,
        },
        **result,
    }


# The report, made from the saved JSON.


def _med(values: list[float]) -> str:
    if not values:
        return "–"
    return f"{median(values):.1f} [{min(values):.1f}-{max(values):.1f}]"


def _holder(cpu: dict[str, float]) -> float:
    """What holding and reading the pages cost: their process's CPU (runs before 2026-12-06 held them in the client,
    and counted the client with every part it started: that sum, less the parts)."""
    if "pages" in cpu:
        return cpu["pages"]
    return cpu["client"] - cpu["service"] - cpu["redis"] - cpu["fake"]


def _asked(cpu: dict[str, float]) -> float:
    """The CPU of the process the burst asked: with --apart not the one holding the pages."""
    return cpu.get("asked", cpu["service"])


def report(r: dict[str, Any]) -> str:
    s = r["settings"]
    apart = s.get("apart", False)
    none = r["memory"][0]
    changed = r.get("service_changed")
    processes = (
        "Two `classroom serve` processes (1 worker each) on one Redis, as a `classroom` and a `classroom-pages` pod: "
        'the pupil pages open on one ("service" below: its memory, open files, keep-alives), the class asking '
        "the other (its CPU a burst), where the teachers' feeds are open too"
        if apart
        else "One `classroom serve` process (1 worker)"
    )
    lines = [
        "# benchmarks/open_pages.py: open pages "
        + ("on a process of their own, a class asking another" if apart else "on one service process"),
        "",
        f"{r['date']}, checkout {r['checkout']}{' with service/ changed: ' + ', '.join(changed) if changed else ''}, "
        f"{r['machine']['cpu']} ({r['machine']['cores']} cores), Python "
        f"{r['machine']['python']}. {processes} in front of the instant fake vLLM, Redis "
        f"with fsync always; keep-alive every {s['keepalive_s']:g} s (`answer.keepalive_s`); open files "
        f"{s['open_files_client']} (client), {s['open_files_service']} (service: soft hard).",
        "",
        "    .venv/bin/python -m benchmarks.open_pages "
        f"--pages {' '.join(map(str, s['pages']))} --feeds {s['feeds']} --rounds {s['rounds']} "
        f"--bursts {s['bursts_a_round']} --keepalive {s['keepalive_s']:g} --window {s['window_s']:g} "
        f"--idle-window {s.get('idle_window_s', 0):g}" + (" --apart" if apart else ""),
        "",
        "| open pupil pages | service VmRSS | RssAnon | since none | a page, from none | a page, since the row above "
        "| service's open files |",
        "|---|---|---|---|---|---|---|",
    ]
    s_pages = s["pages"][-1]
    previous = none
    for row in r["memory"]:
        grown = row["VmRSS"] - none["VmRSS"]
        per = f"{grown / row['pages']:.1f} KiB" if row["pages"] else "–"
        step = row["pages"] - previous["pages"]
        marginal = f"{(row['VmRSS'] - previous['VmRSS']) / step:.1f} KiB" if step else "–"
        lines.append(
            f"| {row['pages']:,} | {row['VmRSS'] / 1024:.1f} MiB | {row['RssAnon'] / 1024:.1f} MiB | "
            f"+{grown / 1024:.1f} MiB | {per} | {marginal} | {row['fds']:,} |"
        )
        previous = row
    if "after_idle" in r:  # the idle window's keep-alives made the collector run: garbage of the opening freed
        row = r["after_idle"]
        lines.append(
            f"| {row['pages']:,}, after the idle window | {row['VmRSS'] / 1024:.1f} MiB | {row['RssAnon'] / 1024:.1f} "
            f"MiB | +{(row['VmRSS'] - none['VmRSS']) / 1024:.1f} MiB | "
            f"{(row['VmRSS'] - none['VmRSS']) / row['pages']:.1f} KiB | – | {row['fds']:,} |"
        )
    feeds = r["feeds"]
    if apart:  # the feeds are on the other process: its memory, not comparable with the rows above
        lines.append(f"| + {feeds['feeds']} teacher feeds, on the process asked | – | – | – | – | – | – |")
    else:
        lines.append(
            f"| + {feeds['feeds']} teacher feeds | {feeds['VmRSS'] / 1024:.1f} MiB | "
            f"{feeds['RssAnon'] / 1024:.1f} MiB | "
            f"+{(feeds['VmRSS'] - none['VmRSS']) / 1024:.1f} MiB | – | "
            f"{(feeds['VmRSS'] - previous['VmRSS']) / max(feeds['feeds'], 1):.1f} KiB a feed | {feeds['fds']:,} |"
        )
    idle_none, idle_pages = r["idle_none"], r["idle_pages"]
    extra = (
        idle_pages["cpu_s"]["service"] - idle_none["cpu_s"]["service"] * idle_pages["window_s"] / idle_none["window_s"]
    )
    expected = idle_pages["pages"] * idle_pages["window_s"] / s["keepalive_s"]
    per_ping = extra / idle_pages["pings"] * 1e6 if idle_pages["pings"] else float("nan")
    lines += [
        "",
        "| idle window | pages | keep-alives received (expected) | service CPU | page holder | Redis | fake "
        "| CPU a keep-alive |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for w, exp, per in ((idle_none, 0.0, "–"), (idle_pages, expected, f"**{per_ping:.0f} µs**")):
        c = w["cpu_s"]
        lines.append(
            f"| {w['window_s']:g} s | {w['pages']:,} | {w['pings']:,} ({exp:,.0f}) | "
            f"{c['service'] / w['window_s'] * 100:.2f} % of a core | {_holder(c) / w['window_s'] * 100:.2f} % | "
            f"{c['redis'] / w['window_s'] * 100:.2f} % | {c['fake'] / w['window_s'] * 100:.2f} % | {per} |"
        )
    rounds = r.get("idle_rounds", {})
    if rounds.get("none") and rounds.get("pages"):
        rate = {c: [w["cpu_s"]["service"] / w["window_s"] for w in rounds[c]] for c in ("none", "pages")}
        base = median(rate["none"])
        per_window = [
            (w["cpu_s"]["service"] - base * w["window_s"]) / w["pings"] * 1e6 for w in rounds["pages"] if w["pings"]
        ]
        lines.append(
            f"| {len(rounds['none'])} + {len(rounds['pages'])} windows of {s['idle_window_s']:g} s, alternating "
            f"(rounds none, pages) | 0 / {rounds['pages'][0]['pages']:,} | "
            f"{median([float(w['pings']) for w in rounds['pages']]):,.0f} a window | "
            f"{_med([x * 100 for x in rate['none']])} / {_med([x * 100 for x in rate['pages']])} % of a core "
            f"| – | – | – | **{_med(per_window)} µs** |"
        )
    lines += ["", "| Redis: the service's connections (pub/sub) | subscribers | channels |", "|---|---|---|"]
    for name, key in (
        ("nothing open", "redis_nothing_open"),
        (f"{s_pages:,} pages + {s['feeds']} feeds open", "redis_all_open"),
        (f"after the bursts (in a round of {r['redis_after_bursts'].get('state', '?')})", "redis_after_bursts"),
    ):
        c = r[key]
        lines.append(
            f"| {name}: {c['all']} ({c['pubsub']}) | {c.get('classroom_subscribers', 0):.0f} | "
            f"{c.get('classroom_subscribed_channels', 0):.0f} |"
        )
    lines += [
        "",
        "| a class of 30 asks at once | bursts | TTFT p50 | TTFT p95 | last first token | errors | service CPU "
        "a burst | feed events a burst | loop timers >10 ms late | load 1m |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    p95s: dict[str, float] = {}
    on = ON[s.get("feeds_on", "burst")]
    for condition, label in CONDITIONS.items():
        rows = r["bursts"][condition]
        p95 = [b["ttft_ms"]["p95"] for b in rows if b["ttft_ms"]["p95"] is not None]
        p95s[condition] = median(p95) if p95 else float("nan")
        lines.append(
            f"| {label.format(pages=f'{s_pages:,}', feeds=s['feeds'], on=on)} | {len(rows)} | "
            f"{_med([b['ttft_ms']['p50'] for b in rows if b['ttft_ms']['p50']])} ms | **{_med(p95)} ms** | "
            f"{_med([b['last_first_token_ms'] for b in rows if b['last_first_token_ms']])} ms | "
            f"{sum(sum(b['errors'].values()) for b in rows)} | {_med([_asked(b['cpu_s']) * 1000 for b in rows])} ms "
            f"| {_med([float(b['feed_events']) for b in rows])} | "
            f"{_med([b['loop_late'].get('0.01', 0.0) for b in rows])} | {_med([b['load_1m'] for b in rows])} |"
        )
    per_page = (r["memory"][-1]["VmRSS"] - none["VmRSS"]) / max(r["memory"][-1]["pages"], 1) * 1.024
    ratio = p95s["all"] / p95s["none"] if p95s["none"] else float("nan")
    cpu = {c: median([_asked(b["cpu_s"]) for b in r["bursts"][c]] or [float("nan")]) for c in CONDITIONS}
    events = median([b["feed_events"] for b in r["bursts"]["all"]] or [0]) or float("nan")
    per_event = (cpu["all"] - cpu["pages"]) / events * 1e6
    lines += [
        "",
        "| change of the pages open (then until the service is quiet) | times | opening or closing | then quiet after "
        "| the first burst after it: TTFT p95 | its last first token | service CPU |",
        "|---|---|---|---|---|---|---|",
    ]
    for was, to in dict.fromkeys((c["from"], c["to"]) for c in r["changes"] if c["from"] != c["to"]):
        done = [c for c in r["changes"] if (c["from"], c["to"]) == (was, to)]
        firsts = [c["first_burst"] for c in done]
        lines.append(
            f"| {was} → {to} | {len(done)} | {_med([c['change_s'] for c in done])} s | "
            f"{_med([c['quiet_after_s'] for c in done])} s | "
            f"{_med([b['ttft_ms']['p95'] for b in firsts if b['ttft_ms']['p95']])} ms | "
            f"{_med([b['last_first_token_ms'] for b in firsts if b['last_first_token_ms']])} ms | "
            f"{_med([_asked(b['cpu_s']) * 1000 for b in firsts])} ms |"
        )
    lines += [
        "",
        f"Goals: ≤ 20 KB a page: {per_page:.1f} KB ({'met' if per_page <= 20 else 'not met'}); burst p95 with the "
        f"pages and feeds within 10 %: {ratio:.2f}× ({'met' if ratio <= 1.10 else 'not met'}; pages alone "
        f"{p95s['pages'] / p95s['none']:.2f}×). Pages that failed to open: {sum(r['failed_to_open'].values())}"
        f"{' ' + str(r['failed_to_open']) if r['failed_to_open'] else ''}; closed by the service while idle: "
        f"{r['pages_lost_while_idle']}. The feeds' "
        f"fan-out: {events:,.0f} events a burst, the service's CPU a burst {cpu['all'] * 1000:.0f} ms with them "
        f"against {cpu['pages'] * 1000:.0f} ms with the pages alone"
        + (
            f": {per_event:.0f} µs a feed event (medians)."
            if s.get("feeds_on", "burst") == "burst"
            else " (medians; too few events to time one: `--feeds-on burst` does)."
        ),
        "",
        APART_FINDINGS if apart else FINDINGS,
        "",
        NOTES.format(
            keepalive=s["keepalive_s"],
            passage=s["passage_tokens"],
            tokens=s["answer_tokens"],
            feeds_where=FEEDS_WHERE[s.get("feeds_on", "burst")].format(feeds=s["feeds"]),
            quiet=QUIET_CORES,
        ),
    ]
    return "\n".join(lines) + "\n"


FEEDS_WHERE = {
    "spread": "one a class (the burst's class and {feeds} - 1 of the pages' classes), as a district's teachers have "
    "them: one copy of every question event of the burst",
    "burst": "all of them on the burst's class: a worst case of fan-out (a class has one teacher, who may have a "
    "few tabs open), {feeds} copies of every question event",
}

NOTES = """What the figures are. *VmRSS*, *RssAnon*: the service process's, from /proc/PID/status, 5 s after the
pages were opened; "a page, from none" is its growth since no page was open divided by the pages, "since the row
above" the same for the last step only (without what the first pages pay once). Socket buffers are the kernel's, not
in RSS. A page is a joined pupil's `GET /api/pupil/events`, read from its first `class` event; pupils are in classes
of 30, each class with a passage of {passage} tokens of its own (random words, as the burst's class). A teacher feed
is `GET /api/classrooms/ID/events` with the one teacher's cookie, {feeds_where}. *CPU a keep-alive*: the service's
CPU (utime + stime) over the idle window with the pages open, less its CPU with none open over the same length of
time, divided by the keep-alives the client counted (the service's `: keep-alive` comment, one every {keepalive:g} s
a page). *Redis*: `CLIENT LIST` entries on the service's database; pub/sub ones (flag P) in brackets;
*subscribers*/*channels*: its `classroom_subscribers` and `classroom_subscribed_channels` gauges (the process's own
listeners among them). *Burst*: 30 pupils of one class (a {passage}-token passage, warmed; the service's own prompt
layout; fresh random 30-token questions) ask at once through the service; the fake answers {tokens} tokens at once.
TTFT is from sending to the first `token` event; "last first token" from the burst's start to the last pupil's first
token. *Feed events a burst*: `question` events the feeds received from the burst's start to a second after its last
answer (2 a question a feed). Rounds go none, pages, all, all, pages, none, ... (none: nothing open; pages: the
pupil pages; all: pages and feeds); between rounds of different conditions pages or feeds are closed or opened, then
the benchmark waits until the service is quiet (below {quiet:g} of a core over a second, twice running) and sends
one burst that is reported apart (the change table), then the measured ones; medians over every measured burst of a
condition, [min-max]. Loop timers: `classroom_event_loop_lag_seconds` timers that fired over 10 ms late.

The service's Redis pool keeps the connections it opened: opening pages 64 at a time takes up to 64 of them for a
moment (a session read and the class's), so the count after opening is the pool's most, not what open pages hold.

Caveats: the 2 cores are shared by the service, the client that asks, the page holder (a process of its own that
holds every page's socket and reads every keep-alive), the fake and Redis, and other work on the machine (load
average in the table); the fake answers at once, so a burst measures the service's own work, not a model's. The
pages' sockets are on the same machine: each
page is two sockets, one in the service's process. The 60 s idle windows are one each, the shorter ones alternate
with the rounds; the service's own timers (the loop-lag watcher every 50 ms, probes) are in all of them."""


APART_FINDINGS = """Why apart: on one process (open-pages.md) a class's burst beside 10,000 pages and 200 feeds was
1.25-1.63x slower at p95 with the pages held out of the client, so the slowdown was the service's own (its CPU a
burst 85 -> 150 ms). Here the same pupil pages are open on a second process, as deploy/k8s/pages.yaml runs
them (deploy/k8s/ingress.yaml sends `GET /api/pupil/events` to the `classroom-pages` pods; the teachers' feeds,
a class's one or two, stay with the questions, as here), and the class asks the first. The two processes still share
these 2 cores with the client, the page holder, the fake and Redis, as pods on separate nodes would not. The Redis
table's subscribers are the pages' process's."""

FINDINGS = """What changed since the run before this one (ada48b5, on an AMD EPYC: a page 70.5 KiB, a keep-alive 83
µs, 10,000 pages opened in 21 s, the burst's p95 2.22× beside the pages and 3.81× beside pages and feeds, 14 µs a
feed event, 1.3 s for the first burst after the pages closed), each found with tracemalloc in a wrapper of
`classroom serve` (2,000 pages; scripts outside the repository, not re-run by this one):

- *sse-starlette's response* (four tasks a response, their task group, cancel scopes and events: ~21 KiB a page)
  replaced by the service's own `EventStream` (one task and a timer; service/api/event_stream.py), which now also
  ends an open page's stream when the server is told to stop (service/draining.py), as sse-starlette did;
- *a copy of its class a page*: a page that opened re-read its class (a Redis round trip, the passage parsed, its
  system message rendered) and kept it, with its notice and the notice's JSON; now it reads only the class's version
  and the cached class serves it, and the notice is made once a change for all of the process's pages of the class
  (service/classroom/notices.py);
- *FastAPI's request machinery* (the route's exit stacks, dependency values and frames, ~10 KiB a page while its
  response streams): the page's `GET /api/pupil/events` goes to its route's function the way a question does
  (service/api/question_lane.py);
- start-up's objects frozen out of the collector's sight (`gc.freeze()` after start-up).

What is left of a page (tracemalloc, ~29 KiB traced a page against ~21 KiB of RSS before the lane, the largest
first): uvicorn's protocol, request cycle and its `message_event` (a deque each), the middlewares' frames, the
stream's task, cancel scope and timer.

What the collector did to a burst beside 10,000 pages (a run with `gc.callbacks` logging in a wrapper, before
service/quiet_collector.py): full collections took 0.35-0.40 s with 10,000 pages open, and came whenever what survived
younger collections had grown by a quarter: what survives them is mostly what is in flight, so a burst set one off and
waited for it (bursts of 500-670 ms, p95s of 503 and 641 ms in the runs before). Now CPython starts no full collection
itself: the process makes one when no answer is being written (at most every 60 s, at least every 10 min). The worst
burst of this run: p95 133 ms.

What is left (not found here): with the pages open a burst costs the service ~80 ms more CPU (140 against 60 ms, its
second after the burst included). The keep-alives in that window explain about 40 ms (1,000 a second at ~37 µs); a
py-spy profile of the bursts (`--profile`, nonblocking, so without native frames) puts most of the rest in the event
loop's own C code (uvloop), not in any Python frame. Spreading the keep-alives (the first at a random point of the
interval) did not change the burst (pages alone 1.31×, against 0.98-1.51× in three runs without), and was not kept.
Since 2026-12-06 the pages are held by a process of their own, not by the loop that times the burst: the slowdown
stayed (pages alone 1.63×, pages and feeds 1.25×, on an AMD EPYC where the burst alone is slower), so it is the
service's: its CPU a burst went from 85 to 150 ms with the pages open, about 65 ms of it the keep-alives of the
measured 1.1 s (1,000 a second at 59 µs on this machine). Rerun on 2026-12-07 (this table; a noisier day, the burst
alone 97 against 74 ms): 1.56× beside the pages, 1.44× beside pages and feeds, the service's CPU a burst 90 -> 285 ms.
So the pages now go to processes of their own: deploy/k8s/pages.yaml runs the same pods as `classroom-pages`, and
deploy/k8s/ingress.yaml sends `GET /api/pupil/events` there. `--apart` measures that shape on this machine, the same
day, right before this run (open-pages-apart.md): 1.03× beside the pages, 0.93× beside pages and feeds (the feeds on
the process asked, as the ingress routes them)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, nargs="+", default=[1000, 5000, 10000], help="open pupil pages, in steps")
    parser.add_argument("--feeds", type=int, default=200, help="teacher feeds of the burst's class")
    parser.add_argument("--keepalive", type=float, default=10.0, help="the service's answer.keepalive_s")
    parser.add_argument("--window", type=float, default=60.0, help="seconds of each idle CPU window")
    parser.add_argument(
        "--idle-window", type=float, default=20.0, help="seconds of an idle CPU window in each none and pages round"
    )
    parser.add_argument("--rounds", type=int, default=4, help="burst rounds of each condition, alternating")
    parser.add_argument("--bursts", type=int, default=2, help="bursts a round")
    parser.add_argument("--pause", type=float, default=2.0, help="seconds between bursts")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds before memory is read after opening")
    parser.add_argument("--answer-tokens", type=int, default=128, help="tokens of each of the fake's answers")
    parser.add_argument(
        "--classroom", type=Path, default=Path(sys.executable).with_name("classroom"), help="the service's command"
    )
    parser.add_argument(
        "--profile", type=Path, help="py-spy records the service during each round's bursts, into this folder"
    )
    parser.add_argument("--quick", action="store_true", help="small numbers, a smoke check; writes nothing")
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    parser.add_argument(
        "--feeds-on",
        choices=list(RESULT_NAMES),
        default="spread",
        help="one feed a class (spread), or every feed on the burst's class (burst)",
    )
    parser.add_argument(
        "--apart",
        action="store_true",
        help="the pupil pages on a second service process, as a classroom-pages pod's (into open-pages-apart.*)",
    )
    parser.add_argument("--report", action="store_true", help="the .md again from the saved JSON, nothing run")
    args = parser.parse_args()
    name = RESULT_NAMES[args.feeds_on] + ("-apart" if args.apart else "")
    RESULTS, REPORT = RESULTS_DIR / f"{name}.json", RESULTS_DIR / f"{name}.md"
    if args.report:
        table = report(json.loads(RESULTS.read_text()))
        REPORT.write_text(table)
        print(table + f"\nwritten to {REPORT.relative_to(PROJECT_ROOT)}")
        return
    if args.quick:
        args.pages, args.feeds, args.keepalive, args.window = [100, 300], 20, 1.0, 3.0
        args.rounds, args.bursts, args.no_write, args.idle_window = 1, 1, True, 2.0
        args.settle, args.pause = 1.0, 0.5
    args.pages = sorted(args.pages)
    result = run(args)
    table = report(result)
    print("\n" + table)
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
        REPORT.write_text(table)
        print(f"written to {RESULTS.relative_to(PROJECT_ROOT)} and {REPORT.relative_to(PROJECT_ROOT)}")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stopped: the parts it started are stopped too
    with contextlib.suppress(KeyboardInterrupt):
        main()
