"""The ways a pupil's question and a pupil's open page take into the service: straight to the route's own function.

A class's burst is thirty questions at once on one event loop, and each paid FastAPI's route matching, its
dependency solving and its request handling before the first byte went to vLLM (a third of a
question's CPU: benchmarks/results/gateway-issue25.md). This middleware takes `POST /api/classrooms/{id}/questions`
with a JSON body that is a valid `AskQuestion` to `pupil.answer_question` directly, and answers what that
raises with the app's own exception handlers, as FastAPI would. Any other such request (a body that is not
JSON, not valid, or too large) goes on to the FastAPI route, the body handed on as it came, so that every
error keeps its one shape; that route is also what the OpenAPI schema documents.

An open pupil page's class notices (`GET /api/pupil/events`) go to `pupil.pupil_notices` the same way: an idle
page holds its request for as long as it is open, and what FastAPI keeps of a request while its response
streams (the route's exit stacks, dependencies and frames, ~10 KiB) was half of what a page cost
(benchmarks/results/open-pages.md).
"""

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson
from pydantic import ValidationError
from starlette.requests import Request, cookie_parser
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.deps import PUPIL_COOKIE
from service.api.pupil import answer_question, pupil_notices
from service.api.schemas import AskQuestion

PREFIX, SUFFIX = "/api/classrooms/", "/questions"
NOTICES = "/api/pupil/events"
# A question's body is a few hundred bytes (`limits.question_max_chars`); a larger one goes to the route
# unread, so that no body of up to JSON_BODY_MAX_BYTES is parsed here and then again there.
LANE_MAX_BYTES = 64 * 1024
Handler = Callable[[Request, Exception], Awaitable[Response]]


class QuestionLane:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        classroom_id = _classroom_asked(scope)
        if classroom_id is None:
            if _opens_notices(scope):
                token = _cookies(scope).get(PUPIL_COOKIE)
                await _respond(scope, receive, send, lambda services: pupil_notices(services, token))
            else:
                await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        length = headers.get(b"content-length", b"")
        if _media_type(headers.get(b"content-type", b"")) != b"application/json" or not length.isdigit():
            await self.app(scope, receive, send)  # not JSON, or sent in pieces: the route says what is wrong
            return
        if int(length) > LANE_MAX_BYTES:
            await self.app(scope, receive, send)  # the route reads it, or refuses it unread (bodies.py)
            return
        read, whole = await _read(receive, LANE_MAX_BYTES)
        question = _question(b"".join(m.get("body", b"") for m in read)) if whole else None
        if question is None:
            await self.app(scope, _replay(read, receive), send)
            return
        accept = headers.get(b"accept", b"").decode("latin-1")
        token = _cookies(scope).get(PUPIL_COOKIE)
        await _respond(
            scope, receive, send, lambda services: answer_question(services, token, classroom_id, question, accept)
        )


async def _respond(scope: Scope, receive: Receive, send: Send, answer: Callable[[Any], Awaitable[Response]]) -> None:
    """What the route's function answers, given the app's services; what it raises answered by the app's own
    handlers, as FastAPI would."""
    app = scope["app"]
    try:
        response = await answer(app.state.services)
    except Exception as exc:
        handler = _handler(app.exception_handlers, exc)
        if handler is None:
            raise  # to the server's error handler, as from any route
        response = await handler(Request(scope, receive), exc)
    await response(scope, receive, send)


def _classroom_asked(scope: Scope) -> str | None:
    """The class of `POST /api/classrooms/{classroom_id}/questions`; None for any other request."""
    if scope["type"] != "http" or scope["method"] != "POST":
        return None
    path: str = scope["path"]
    if not (path.startswith(PREFIX) and path.endswith(SUFFIX)):
        return None
    classroom_id = path[len(PREFIX) : -len(SUFFIX)]
    return classroom_id if classroom_id and "/" not in classroom_id else None


def _opens_notices(scope: Scope) -> bool:
    return bool(scope["type"] == "http" and scope["method"] == "GET" and scope["path"] == NOTICES)


def _headers(scope: Scope) -> dict[bytes, bytes]:
    """The first of each header, as Starlette's `Headers.get` reads them (names arrive lower-cased)."""
    first: dict[bytes, bytes] = {}
    for name, value in scope["headers"]:
        first.setdefault(name, value)
    return first


def _cookies(scope: Scope) -> dict[str, str]:
    """Every `Cookie` header's cookies, as Starlette's `Request.cookies` reads them."""
    cookies: dict[str, str] = {}
    for name, value in scope["headers"]:
        if name == b"cookie":
            cookies.update(cookie_parser(value.decode("latin-1")))
    return cookies


def _media_type(content_type: bytes) -> bytes:
    return content_type.partition(b";")[0].strip().lower()


async def _read(receive: Receive, limit: int) -> tuple[list[Message], bool]:
    """The request's body messages, up to `limit` bytes; whether that was the whole body."""
    read: list[Message] = []
    size = 0
    while True:
        message = await receive()
        read.append(message)
        if message["type"] != "http.request":
            return read, False  # the client went away
        size += len(message.get("body", b""))
        if size > limit:
            return read, False
        if not message.get("more_body", False):
            return read, True


def _replay(read: list[Message], receive: Receive) -> Receive:
    """`receive` with the messages already read handed on first."""
    pending = list(read)

    async def replayed() -> Message:
        return pending.pop(0) if pending else await receive()

    return replayed


def _question(body: bytes) -> AskQuestion | None:
    # Parsed as the route parses JSON (bodies.py: orjson, strict about UTF-8), then validated.
    try:
        return AskQuestion.model_validate(orjson.loads(body))
    except (orjson.JSONDecodeError, ValidationError):
        return None


def _handler(handlers: Mapping[Any, Handler], exc: Exception) -> Handler | None:
    """The app's handler for `exc`, looked up as Starlette's ExceptionMiddleware does; `Exception`'s is the
    server error handler's, outside it."""
    for kind in type(exc).__mro__:
        if kind is Exception:
            return None
        if kind in handlers:
            return handlers[kind]
    return None
