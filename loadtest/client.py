"""Send one request and record its timeline: to vLLM's OpenAI API directly, or through the service's pupil
API (which builds the same prompt itself).

The measured streams go through one aiohttp session per target (its C HTTP parser: about half the CPU per
streamed token of httpx's pure-Python one, measured while the client shared 2 cores with vLLM, where the
client's CPU is taken from the server); SSE is parsed by hand, a line and one json.loads a piece.
overhead.py measures what remains. One-off set-up calls (sign-in, classes, priming) use httpx."""

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
import httpx

from loadtest.results import RequestRecord
from loadtest.workload import RequestSpec, Workload
from service.backends.vllm_stream import brings_tokens

# Generous: a cold prompt on 2 CPU cores can take tens of seconds before its first token.
READ_TIMEOUT_S = 300.0
CONNECT_TIMEOUT_S = 10.0


def new_session(connections: int) -> aiohttp.ClientSession:
    """Made inside the running event loop (aiohttp binds a session to it)."""
    connector = aiohttp.TCPConnector(limit=connections, limit_per_host=connections)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S, sock_read=READ_TIMEOUT_S)
    return aiohttp.ClientSession(connector=connector, timeout=timeout, cookie_jar=aiohttp.DummyCookieJar())


async def until_warmed(
    teacher: httpx.AsyncClient, classroom_id: str, timeout_s: float = 60.0, poll_s: float = 0.2
) -> None:
    """Until the service has warmed the class's active passage, as its teacher's view of the class says: the
    service warms each new passage in the background, and real classes ask minutes later. TimeoutError after
    `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        details = (await teacher.get(f"/api/classrooms/{classroom_id}")).json()
        # `active_passage_warmed_on` (the replicas) before the operators' view took them: benchmarks.gateway's
        # --classroom measures older checkouts.
        if details.get("active_passage_warmed", details.get("active_passage_warmed_on")):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"the passage of class {classroom_id} was not warmed within {timeout_s:g} s")
        await asyncio.sleep(poll_s)


def new_http_client(base_url: str, connections: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    timeout = httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
    return httpx.AsyncClient(base_url=base_url, limits=limits, timeout=timeout)


@dataclass
class Timeline:
    """Marks filled in while a request runs; turned into a RequestRecord when it ends."""

    clock_zero: float
    scheduled_at: float
    sent_at: float = 0.0
    free_at: float | None = None  # the pupil API: when the pupil's previous answer had ended
    token_times: list[float] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    error: str | None = None
    error_detail: str | None = None
    service_ttft_ms: float | None = None
    service_total_ms: float | None = None

    def now(self) -> float:
        return time.perf_counter() - self.clock_zero

    def fail(self, kind: str, detail: str) -> None:
        if self.error is None:
            self.error, self.error_detail = kind, detail[:300]

    def record(self, spec: RequestSpec) -> RequestRecord:
        usage = self.usage or {}
        details = usage.get("prompt_tokens_details") or {}
        if self.error is None and not self.token_times:
            self.fail("no_token", "the stream ended without any text")
        return RequestRecord(
            index=spec.index,
            group=spec.group,
            scheduled_at=self.scheduled_at,
            sent_at=self.sent_at,
            pupil_free_at=self.free_at,
            first_token_at=self.token_times[0] if self.token_times else None,
            token_times=self.token_times,
            ended_at=self.now(),
            prompt_tokens=usage.get("prompt_tokens"),
            cached_tokens=usage.get("cached_tokens", details.get("cached_tokens")),
            output_tokens=usage.get("completion_tokens"),
            finish_reason=self.finish_reason,
            error=self.error,
            error_detail=self.error_detail,
            service_ttft_ms=self.service_ttft_ms,
            service_total_ms=self.service_total_ms,
        )


class Target(Protocol):
    url: str

    async def prepare(self, workload: Workload) -> None: ...

    async def send(self, spec: RequestSpec, timeline: Timeline) -> None:
        """Fill the timeline; raise nothing (errors are recorded)."""

    async def close(self) -> None: ...


async def _events(response: aiohttp.ClientResponse) -> AsyncIterator[tuple[str, str]]:
    """(event, data) pairs of a Server-Sent Events stream."""
    event = "message"
    async for raw in response.content:
        line = raw.decode().rstrip("\r\n")
        if not line:
            event = "message"
        elif line.startswith("data:"):
            yield event, line[5:].lstrip()
        elif line.startswith("event:"):
            event = line[6:].strip()


def said(exc: BaseException) -> str:
    """An exception as a person reads it: its kind and its own words (a repr nests the connection's key)."""
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def _guarded(timeline: Timeline, run: Any) -> None:
    try:
        await run
    except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
        timeline.fail("timeout", said(exc))
    except aiohttp.ClientPayloadError as exc:
        timeline.fail("incomplete", said(exc))
    except aiohttp.ClientError as exc:
        timeline.fail("connection", said(exc))
    except (json.JSONDecodeError, KeyError, ValueError) as exc:
        timeline.fail("protocol", said(exc))


class VllmTarget:
    """vLLM's OpenAI chat-completions API, streamed with usage."""

    def __init__(self, base_url: str, model: str, connections: int, api_key: str = "EMPTY") -> None:
        self.url = base_url.rstrip("/")
        self.model = model
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None
        self._headers = {"Authorization": f"Bearer {api_key}"}
        self._workload: Workload | None = None

    async def prepare(self, workload: Workload) -> None:
        self._workload = workload
        self._session = self._session or new_session(self._connections)

    async def prime(self, messages: list[dict[str, str]]) -> None:
        """Send a prompt prefix once for one token, as the service's warm-up does for a new passage."""
        body = {"model": self.model, "messages": messages, "max_tokens": 1}
        async with new_http_client(self.url, 1) as http:
            response = await http.post("/chat/completions", json=body, headers=self._headers)
            response.raise_for_status()

    async def send(self, spec: RequestSpec, timeline: Timeline) -> None:
        assert self._workload is not None, "prepare() first"
        body = self._workload.body(spec, self.model)
        await _guarded(timeline, self._stream(body, timeline))

    async def _stream(self, body: dict[str, Any], timeline: Timeline) -> None:
        assert self._session is not None, "prepare() first"
        timeline.sent_at = timeline.now()
        url = f"{self.url}/chat/completions"
        async with self._session.post(url, json=body, headers=self._headers) as response:
            if response.status != 200:
                timeline.fail(f"http_{response.status}", await response.text(errors="replace"))
                return
            finished = False
            async for _, data in _events(response):
                if data == "[DONE]":
                    finished = True
                    continue
                chunk = json.loads(data)
                for choice in chunk.get("choices") or ():
                    delta = choice.get("delta") or {}
                    if brings_tokens(delta.get("role"), delta.get("content")):
                        timeline.token_times.append(timeline.now())
                    timeline.finish_reason = choice.get("finish_reason") or timeline.finish_reason
                if chunk.get("usage"):
                    timeline.usage = chunk["usage"]
                if "error" in chunk:
                    timeline.fail("server_error", json.dumps(chunk["error"]))
            if not finished:
                timeline.fail("incomplete", "the stream ended before [DONE]")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


class PupilApiTarget:
    """The service's pupil API: a teacher makes the classes and adds their passages, pupils join, each
    question is an SSE stream of `token` events and a final `done` (or `error`)."""

    def __init__(self, base_url: str, connections: int, teacher_email: str, teacher_password: str) -> None:
        self.url = base_url.rstrip("/")
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None
        self._email, self._password = teacher_email, teacher_password
        self._classroom: dict[str, str] = {}  # group -> classroom id
        self._pupils: dict[tuple[str, int], str] = {}  # (group, pupil) -> its Cookie header
        self._busy: dict[tuple[str, int], asyncio.Lock] = {}

    async def prepare(self, workload: Workload, warm_timeout_s: float = 120.0) -> None:
        self._session = self._session or new_session(self._connections)
        async with new_http_client(self.url, 4) as teacher:
            signed = await teacher.post("/api/teacher/session", json={"email": self._email, "password": self._password})
            _check(signed, "sign in as the load test's teacher")
            # A new prepare (a sweep's next level) makes new classes with the new passages.
            self._classroom.clear()
            for cls in [*workload.classes, *([workload.warmup_class] if workload.warmup_class else [])]:
                made = await teacher.post("/api/classrooms", json={"name": f"loadtest {cls.group}"})
                _check(made, "create a classroom")
                classroom = made.json()
                self._classroom[cls.group] = classroom["id"]
                added = await teacher.post(
                    f"/api/classrooms/{classroom['id']}/passages",
                    json={"title": cls.title, "text": cls.text, "publish": True},
                )
                _check(added, "add a passage")
                for pupil in range(cls.pupils):
                    async with new_http_client(self.url, 1) as joining:  # a cookie jar of its own
                        joined = await joining.post(
                            "/api/join", json={"join_code": classroom["join_code"], "name": f"Pupil {pupil + 1}"}
                        )
                        _check(joined, "join a class")
                        # The session cookie as a header, whatever the service names it.
                        self._pupils[(cls.group, pupil)] = "; ".join(f"{k}={v}" for k, v in joined.cookies.items())
                        self._busy[(cls.group, pupil)] = asyncio.Lock()
            # The service warms each new passage in the background; real classes ask minutes later.
            deadline = time.monotonic() + warm_timeout_s
            for group, classroom_id in self._classroom.items():
                try:
                    await until_warmed(teacher, classroom_id, deadline - time.monotonic())
                except TimeoutError:
                    # Unwarmed passages would measure another workload than the one reported.
                    raise RuntimeError(
                        f"the service did not warm the passage of {group} within {warm_timeout_s:g} s: "
                        "its log says why (a replica down, the warm-up failing)"
                    ) from None

    async def send(self, spec: RequestSpec, timeline: Timeline) -> None:
        assert spec.group is not None and spec.pupil is not None and spec.question is not None
        key = (spec.group, spec.pupil)
        # One answer at a time per pupil (the service answers 409 otherwise): a pupil whose answer still
        # streams asks the next question when it ends. That wait is the workload's, not latency and not the
        # client's lateness: it is reported apart ("waiting for the pupil's previous answer").
        async with self._busy[key]:
            timeline.free_at = timeline.now()
            await _guarded(timeline, self._stream(spec, self._pupils[key], timeline))

    async def _stream(self, spec: RequestSpec, cookie: str, timeline: Timeline) -> None:
        assert self._session is not None, "prepare() first"
        url = f"{self.url}/api/classrooms/{self._classroom[spec.group or '']}/questions"
        headers = {"Cookie": cookie, "Accept": "text/event-stream"}
        timeline.sent_at = timeline.now()
        async with self._session.post(url, json={"question": spec.question}, headers=headers) as response:
            if response.status != 200:
                timeline.fail(f"http_{response.status}", await response.text(errors="replace"))
                return
            ended = False
            async for event, data in _events(response):
                if event == "token":
                    timeline.token_times.append(timeline.now())
                elif event == "done":
                    done = json.loads(data)
                    timeline.usage = done.get("usage")
                    timeline.finish_reason = done.get("finish_reason")
                    timeline.service_ttft_ms = done.get("ttft_ms")
                    timeline.service_total_ms = done.get("total_ms")
                    ended = True
                elif event == "error":
                    timeline.fail("service_error", data)
                    ended = True
            if not ended:
                timeline.fail("incomplete", "the stream ended without a final event")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def _check(response: httpx.Response, doing: str) -> None:
    if response.status_code >= 400:
        raise RuntimeError(f"could not {doing}: {response.status_code} {response.text[:300]}")
