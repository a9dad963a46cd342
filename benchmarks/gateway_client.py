"""The gateway benchmark's client: one aiohttp session (its C HTTP parser), each question's events timed at the
read that brought them, straight to the fake vLLM (`ask_direct`) or through the service's pupil API
(`ask_service`)."""

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
import orjson

from service.backends.vllm_stream import brings_tokens


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


async def _ask(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    headers: dict[str, str],
    answer: Answer,
    read: Callable[[list[bytes], float], None],
    *,
    service: bool,
) -> None:
    """POST the question; `read` takes the whole SSE events each read of the stream brought, and its time. The
    service's stream may end its lines with CRLF, and its errors say why."""
    try:
        async with session.post(url, data=body, headers=headers) as response:
            if response.status != 200:
                why = f": {(await response.text())[:120]}" if service else ""
                answer.error = f"http {response.status}{why}"
                return
            buffer = b""
            async for data in response.content.iter_any():
                now = time.perf_counter()
                if service:
                    buffer, data = buffer.replace(b"\r\n", b"\n"), data.replace(b"\r\n", b"\n")
                events, buffer = _sse_events(buffer + data)
                read(events, now)
    except aiohttp.ClientError as exc:
        answer.error = type(exc).__name__
    answer.first = answer.event_times[0] if answer.event_times else None


async def ask_direct(session: aiohttp.ClientSession, url: str, body: bytes) -> Answer:
    answer = Answer(sent=time.perf_counter())

    def read(events: list[bytes], now: float) -> None:
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

    await _ask(session, url, body, {"Content-Type": "application/json"}, answer, read, service=False)
    return answer


async def ask_service(session: aiohttp.ClientSession, url: str, cookie: str, body: bytes) -> Answer:
    answer = Answer(sent=time.perf_counter())
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream", "Cookie": cookie}

    def read(events: list[bytes], now: float) -> None:
        for event in events:
            if event.startswith(b"event: token"):
                answer.event_times.append(now)
            elif event.startswith(b"event: done"):
                done = orjson.loads(event.split(b"data: ", 1)[1])
                answer.tokens = done["usage"]["completion_tokens"]
                answer.service_ttft_ms = done["ttft_ms"]
            elif event.startswith(b"event: error"):
                answer.error = "error event"

    await _ask(session, url, body, headers, answer, read, service=True)
    if answer.error is None and answer.first is None:
        answer.error = "no token"
    return answer
