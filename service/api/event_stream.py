"""The Server-Sent Events responses: every token of every answer passes through here, and every open page
(a pupil's class notices, a teacher's live feed) stays in one for as long as it is open.

sse-starlette, used before, runs four tasks and a cancel scope for every event of a response and keeps ~20 KiB
of them a response; this one costs one task and a timer a response and one `send` an event
(benchmarks/results/gateway.md, open-pages.md). What it keeps: a comment after every `keepalive_s` of silence,
so that proxies with idle timeouts do not cut a stream that waits for its first token; and the client
disconnecting ends the events' generator at once, even while it waits. An answer's events only follow it
(`service.classroom.live`): ending them leaves the answer to be written to its end.

An endless stream (an open page) ends when the server begins to shut down (`Draining`): uvicorn waits for every
response to end before it stops, and the page's EventSource reconnects, to another process, after the random delay
the stream opened with (`retry:`), so that a rolled pod's pages do not all come back in the same second.
"""

import asyncio
import random
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

import anyio
from starlette.background import BackgroundTask
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from service.draining import Draining

# A comment line, without the blank line that ends an event: the blank line would end an event of no data,
# which some clients (httpx-sse) hand on as an empty event once a token's `id` has been seen.
KEEPALIVE = b": keep-alive\n"
# No proxy may store or transform (e.g. compress, which buffers) a stream.
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


def page_retry(max_s: float) -> bytes:
    """The field that opens a page's stream: reconnect after a random delay between 1 s and `max_s`. Without the
    blank line that would end an event: a browser takes the field at once, and no client sees an empty event."""
    return b"retry: %d\n" % random.randint(1000, max(1000, int(max_s * 1000)))


def sse_event(name: bytes, data: bytes) -> bytes:
    """One event as the stream sends it: its name and its one line of data (JSON, which has no newline)."""
    return b"event: " + name + b"\ndata: " + data + b"\n\n"


def event_stream_documented(description: str) -> dict[str, Any]:
    """The OpenAPI response of a route that answers with Server-Sent Events."""
    return {"content": {"text/event-stream": {"schema": EVENT_SCHEMA}}, "description": description}


class EventStream(Response):
    """A response whose body is `events` (each an encoded SSE event), as they come; with `draining`, one that
    ends when the server begins to stop, opened by `opening` (a page's `retry:`). A `Response` for FastAPI to pass
    through as it is; none of Starlette's body handling is used."""

    media_type = "text/event-stream"

    def __init__(
        self,
        events: AsyncGenerator[bytes],
        *,
        keepalive_s: float,
        draining: Draining | None = None,
        opening: bytes = b"",
    ) -> None:
        self.status_code = 200
        self._opening = opening
        self.background: BackgroundTask | None = None
        self._events = events
        self._keepalive_s = keepalive_s
        self._draining = draining
        self._open = True
        self._last_sent = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._ping: asyncio.Task[None] | None = None

    async def __call__(self, _scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
        if self._opening:
            await send({"type": "http.response.body", "body": self._opening, "more_body": True})
        loop = asyncio.get_running_loop()
        self._last_sent = loop.time()
        self._timer = loop.call_later(self._keepalive_s, self._keep_alive, send, loop)
        disconnected = False
        with anyio.CancelScope() as stream:
            listener = asyncio.create_task(self._until_disconnect(receive, stream))
            if self._draining is not None:
                self._draining.hold(stream)
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
                disconnected = listener.done()
                listener.cancel()
                if self._draining is not None:
                    self._draining.release(stream)
        if stream.cancelled_caught and not disconnected:  # drained: the response ends, the page reconnects
            if self._ping is not None:
                await self._ping
            await send({"type": "http.response.body", "body": b"", "more_body": False})

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
