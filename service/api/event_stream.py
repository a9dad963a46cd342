"""The Server-Sent Events response of an answer: every token of every answer passes through here.

sse-starlette (which the teachers' endless live feed keeps, for its handling of server shutdown) runs four
tasks and a cancel scope for every event of a response; an answer is finite and its events are many, so
this one costs one task and a timer a response and one `send` an event (benchmarks/results/gateway.md).
What it keeps: a comment after every `keepalive_s` of silence, so that proxies with idle timeouts do not cut
a stream that waits for its first token; and the client disconnecting ends the events' generator at once,
even while it waits. An answer's events only follow it (`service.classroom.live`): ending them leaves the answer to be
written to its end.
"""

import asyncio
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

import anyio
from starlette.background import BackgroundTask
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

# A comment line, without the blank line that ends an event: the blank line would end an event of no data,
# which some clients (httpx-sse) hand on as an empty event once a token's `id` has been seen.
KEEPALIVE = b": keep-alive\n"
# No proxy may store or transform (e.g. compress, which buffers) a stream; sse-starlette sets the rest.
STREAM_HEADERS = {"Cache-Control": "no-store, no-transform"}
HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    *((name.lower().encode(), value.encode()) for name, value in STREAM_HEADERS.items()),
    (b"x-accel-buffering", b"no"),  # nginx: pass each event on at once
    (b"connection", b"keep-alive"),
]

# One event as OpenAPI before 3.2 documents a stream's `schema` (and schemathesis checks each event by it):
# its name, its data (JSON, whose fields the route's description names) and, for answers, its id.
EVENT_SCHEMA = {
    "type": "object",
    "required": ["data"],
    "properties": {
        "event": {"type": "string"},
        "data": {"type": "string", "contentMediaType": "application/json"},
        "id": {"type": "string"},
        "retry": {"type": "integer"},
    },
}


def event_stream_documented(description: str) -> dict[str, Any]:
    """The OpenAPI response of a route that answers with Server-Sent Events."""
    return {"content": {"text/event-stream": {"schema": EVENT_SCHEMA}}, "description": description}


class EventStream(Response):
    """A response whose body is `events` (each an encoded SSE event), as they come. A `Response` for FastAPI
    to pass through as it is; none of Starlette's body handling is used."""

    media_type = "text/event-stream"

    def __init__(self, events: AsyncGenerator[bytes], *, keepalive_s: float) -> None:
        self.status_code = 200
        self.background: BackgroundTask | None = None
        self._events = events
        self._keepalive_s = keepalive_s
        self._open = True
        self._last_sent = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._ping: asyncio.Task[None] | None = None

    async def __call__(self, _scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
        loop = asyncio.get_running_loop()
        self._last_sent = loop.time()
        self._timer = loop.call_later(self._keepalive_s, self._keep_alive, send, loop)
        with anyio.CancelScope() as stream:
            listener = asyncio.create_task(self._until_disconnect(receive, stream))
            try:
                async with aclosing(self._events) as events:
                    async for event in events:
                        self._last_sent = loop.time()
                        await send({"type": "http.response.body", "body": event, "more_body": True})
                self._open = False
                if self._ping is not None:
                    await self._ping  # never a comment after the end
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            finally:
                self._open = False
                self._timer.cancel()
                listener.cancel()

    @staticmethod
    async def _until_disconnect(receive: Receive, stream: anyio.CancelScope) -> None:
        # The request's body was read before the response began: what comes next is the disconnect.
        while (await receive())["type"] != "http.disconnect":
            pass
        stream.cancel()

    def _keep_alive(self, send: Send, loop: asyncio.AbstractEventLoop) -> None:
        if not self._open:
            return
        wait = self._last_sent + self._keepalive_s - loop.time()
        if wait <= 0 and (self._ping is None or self._ping.done()):
            self._ping = loop.create_task(self._send_keepalive(send))
            wait = self._keepalive_s
        self._timer = loop.call_later(max(wait, 0.01), self._keep_alive, send, loop)

    async def _send_keepalive(self, send: Send) -> None:
        if self._open:
            self._last_sent = asyncio.get_running_loop().time()
            await send({"type": "http.response.body", "body": KEEPALIVE, "more_body": True})
