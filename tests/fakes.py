"""Fakes for the faults a real vLLM cannot be made to produce on demand. Each says so in its name."""

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from service.backends.replica_http import Reply
from service.model_manifest import PRODUCT_NAME

FAKE_WORDS = ["Bees ", "dance ", "to ", "show "]
MODEL = PRODUCT_NAME  # what the tiny stand-in is served as


def _chunk(text: str) -> str:
    return _chunk_with({"content": text}, None)


def _probed_routes() -> list[Route]:
    """What the service's health probes ask of a replica: alive, and serving our model."""

    async def health(_: Request) -> JSONResponse:
        return JSONResponse({})

    async def models(_: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    return [Route("/health", health), Route("/v1/models", models)]


def fake_backend_slow_to_first_token(delay_s: float) -> Starlette:
    """Answers only after `delay_s` of silence, as a replica with a long queue does: a real vLLM on a
    tiny model cannot be made this slow on purpose."""

    async def chat(_: Request) -> StreamingResponse:
        async def body() -> AsyncIterator[str]:
            await asyncio.sleep(delay_s)
            for word in FAKE_WORDS:
                yield _chunk(word)
            yield "data: [DONE]\n\n"

        return StreamingResponse(body(), media_type="text/event-stream")

    return Starlette(routes=[*_probed_routes(), Route("/v1/chat/completions", chat, methods=["POST"])])


# The fakes below play a replica without a server: a fake transport (service.backends.replica_http.Transport)
# handed to ReplicaHttp, open_services or create_app, for the fast tier's tests of a stream cut, a silence
# and a Stop.

HANG = "hang"  # a fake stream's end: no more bytes, ever, until the reader gives up or is cancelled
DONE = b"data: [DONE]\n\n"


def sse_chunk(text: str | None = None, *, role: bool = False, finish_reason: str | None = None) -> bytes:
    """One event of vLLM's streamed chat completion: the role announcement, a token's text, or the last one."""
    delta: dict[str, str] = {"role": "assistant", "content": ""} if role else {"content": text or ""}
    return _chunk_with(delta, finish_reason).encode()


def _chunk_with(delta: dict[str, str], finish_reason: str | None) -> str:
    chunk = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }
    return f"data: {json.dumps(chunk)}\n\n"


def fake_answer(words: list[str]) -> list[bytes]:
    """A whole streamed answer of `words`, each its own chunk, as vLLM sends one: role, tokens, end, [DONE]."""
    return [sse_chunk(role=True), *(sse_chunk(word) for word in words), sse_chunk(finish_reason="stop"), DONE]


class FakeStream:
    """A scripted response (`replica_http.OpenStream`): `chunks`, one read each, then `then`: the end of the
    body, an exception (a cut connection, the read timeout), or HANG."""

    def __init__(self, chunks: list[bytes], *, then: BaseException | str | None = None, status: int = 200) -> None:
        self.status = status
        self._chunks = chunks
        self._then = then
        self.sent = 0  # chunks read so far
        self.released = self.closed = False

    async def read(self) -> bytes:
        return b"".join(self._chunks)

    async def chunks(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            await asyncio.sleep(0)  # a read: other tasks run between chunks, as on a socket
            self.sent += 1
            yield chunk
        if self._then == HANG:
            await asyncio.Event().wait()
        elif isinstance(self._then, BaseException):
            raise self._then

    def release(self) -> None:
        self.released = True

    def close(self) -> None:
        self.closed = True


@dataclass(frozen=True)
class FakeRequest:
    method: str
    url: str
    body: bytes | None
    headers: dict[str, str]
    timeout_s: float | None
    connect_timeout_s: float | None = None


class FakeTransportScripted:
    """A fake transport: a replica that passes its probes (serving `model`), answers warm-ups, and streams each
    question's answer from `streams`, in turn. What a real vLLM cannot be made to do on demand (die mid-stream,
    go silent) is scripted there. It keeps what was asked."""

    def __init__(self, streams: list[FakeStream] | None = None, *, model: str = MODEL) -> None:
        self.streams = list(streams or [])
        self.model = model
        self.requests: list[FakeRequest] = []  # probes and warm-ups
        self.streamed: list[FakeRequest] = []  # questions
        self.closed = False

    async def fetch(
        self,
        method: str,
        url: str,
        *,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
        connect_timeout_s: float | None = None,
    ) -> Reply:
        self.requests.append(FakeRequest(method, url, body, dict(headers or {}), timeout_s, connect_timeout_s))
        if url.endswith("/models"):
            return Reply(200, json.dumps({"object": "list", "data": [{"id": self.model}]}).encode())
        if url.endswith("/chat/completions"):
            return Reply(200, json.dumps({"choices": [{"message": {"content": "."}}]}).encode())
        return Reply(200, b"" if url.endswith("/metrics") else b"{}")

    async def stream(self, url: str, body: bytes, headers: Mapping[str, str] | None = None) -> FakeStream:
        self.streamed.append(FakeRequest("POST", url, body, dict(headers or {}), None))
        return self.streams.pop(0)

    async def close(self) -> None:
        self.closed = True
