"""The questions' own way in (service/api/question_lane.py), as an ASGI app between a client and the FastAPI
app: a well-formed question goes to the route's function, anything else on to the route with its body as it
came, and what the question raises is answered by the app's own handlers. (Every test that asks a question
of a running service also goes this way.)"""

import asyncio
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from fastapi import FastAPI
from starlette.responses import JSONResponse, Response
from starlette.types import Message, Receive, Scope, Send

from service.api import question_lane
from service.api.bodies import JSON_BODY_MAX_BYTES
from service.api.deps import PUPIL_COOKIE
from service.api.handlers import install_error_handlers
from service.api.question_lane import LANE_MAX_BYTES, QuestionLane
from service.api.schemas import AskQuestion
from service.errors import NotJoined, WrongClassroom
from service.services import Services

Call = tuple[Services, str | None, str, AskQuestion, str]


class Route:
    """What stands behind the lane: it reads the whole body it is handed and answers 299."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        self.bodies.append(body)
        await Response(status_code=299)(scope, receive, send)


def request(
    lane: QuestionLane,
    app: FastAPI,
    chunks: list[bytes],
    *,
    path: str = "/api/classrooms/c1/questions",
    method: str = "POST",
    headers: dict[str, str] | None = None,
) -> tuple[int, bytes]:
    sent = b"".join(chunks)
    given = {"content-type": "application/json", "content-length": str(len(sent))} | (headers or {})
    scope: Scope = {
        "type": "http",
        "method": method,
        "path": path,
        "headers": [(k.encode(), v.encode()) for k, v in given.items()],
        "app": app,
    }
    messages: list[Message] = [
        {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1} for i, chunk in enumerate(chunks)
    ]
    answered: list[Message] = []

    async def receive() -> Message:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        answered.append(message)

    asyncio.run(lane(scope, receive, send))
    return answered[0]["status"], b"".join(m.get("body", b"") for m in answered[1:])


@pytest.fixture()
def app() -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)
    app.state.services = SimpleNamespace(name="the services")
    return app


@pytest.fixture()
def asked(monkeypatch: pytest.MonkeyPatch) -> list[Call]:
    calls: list[Call] = []

    async def answer_question(*args: Any) -> Response:
        calls.append(args)
        return JSONResponse({"answered": args[3].question}, status_code=201)

    monkeypatch.setattr(question_lane, "answer_question", answer_question)
    return calls


def test_a_well_formed_question_goes_to_the_routes_function_with_its_cookie_class_and_accept(
    app: FastAPI, asked: list[Call]
) -> None:
    route = Route()
    body = orjson.dumps({"question": "Why is the sky blue?", "passage_id": "p1"})
    headers = {"cookie": "other=1; classroom_pupil=the-token", "accept": "application/json"}
    status, answer = request(QuestionLane(route), app, [body[:7], body[7:]], headers=headers)
    assert (status, orjson.loads(answer)) == (201, {"answered": "Why is the sky blue?"})
    [(services, token, classroom_id, question, accept)] = asked
    assert services is app.state.services
    assert (token, classroom_id, accept) == ("the-token", "c1", "application/json")
    assert question == AskQuestion(question="Why is the sky blue?", passage_id="p1")
    assert route.bodies == []


@pytest.mark.parametrize(
    ("chunks", "headers"),
    [
        ([b'{"question": "Why?"'], {}),  # not JSON
        ([b'{"question": ""}', b' {"passage_id": 7}'], {}),  # JSON, but no AskQuestion
        ([b'{"question": 1}'], {}),
        ([b'{"question": "Why?"}'], {"content-type": "text/plain"}),
        ([b'{"question": "Why?"}'], {"content-length": ""}),  # sent in pieces: the route counts them
        ([b'{"question": "Why?"}'], {"content-length": str(LANE_MAX_BYTES + 1)}),
        ([b'{"question": "Why?", "more": "' + b"x" * LANE_MAX_BYTES + b'"}'], {}),  # valid, but parsed by the route
    ],
)
def test_any_other_question_goes_on_to_the_route_with_its_body_as_it_came(
    app: FastAPI, asked: list[Call], chunks: list[bytes], headers: dict[str, str]
) -> None:
    route = Route()
    assert request(QuestionLane(route), app, chunks, headers=headers)[0] == 299
    assert route.bodies == [b"".join(chunks)]
    assert asked == []


def test_a_body_larger_than_any_question_goes_on_to_the_route_whole(app: FastAPI, asked: list[Call]) -> None:
    route = Route()
    chunks = [b'{"question": "' + b"a" * (LANE_MAX_BYTES // 2), b"a" * JSON_BODY_MAX_BYTES, b'"}']
    assert request(QuestionLane(route), app, chunks, headers={"content-length": "12"})[0] == 299
    assert route.bodies == [b"".join(chunks)]
    assert asked == []


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/classrooms/c1/questions"),
        ("POST", "/api/classrooms//questions"),
        ("POST", "/api/classrooms/c1/x/questions"),
        ("POST", "/api/classrooms/c1/passages"),
    ],
)
def test_other_requests_pass_untouched(app: FastAPI, asked: list[Call], method: str, path: str) -> None:
    route = Route()
    body = b'{"question": "Why?"}'
    assert request(QuestionLane(route), app, [body], method=method, path=path)[0] == 299
    assert route.bodies == [body]
    assert asked == []


def raising(error: Exception) -> Callable[..., Awaitable[Response]]:
    async def answer_question(*_: Any) -> Response:
        raise error

    return answer_question


def test_what_the_question_raises_is_answered_by_the_apps_own_handlers(
    app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(question_lane, "answer_question", raising(WrongClassroom()))
    status, body = request(QuestionLane(Route()), app, [b'{"question": "Why?"}'])
    assert status == 403
    assert orjson.loads(body)["error"] == {"code": "wrong_classroom", "message": WrongClassroom().message}


def test_an_unexpected_error_goes_on_to_the_servers_error_handler(
    app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(question_lane, "answer_question", raising(KeyError("a bug")))
    with pytest.raises(KeyError):
        request(QuestionLane(Route()), app, [b'{"question": "Why?"}'])


def test_an_open_pupil_page_goes_to_the_routes_function_with_its_cookie(
    app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[tuple[Any, str | None]] = []

    async def pupil_notices(services: Any, token: str | None) -> Response:
        opened.append((services, token))
        return Response(status_code=298)

    monkeypatch.setattr(question_lane, "pupil_notices", pupil_notices)
    route = Route()
    cookie = {"cookie": f"theme=dark; {PUPIL_COOKIE}=tok-1"}
    assert request(QuestionLane(route), app, [b""], method="GET", path="/api/pupil/events", headers=cookie)[0] == 298
    assert opened == [(app.state.services, "tok-1")] and route.bodies == []
    # Not the page's stream: the route, as before.
    for method, path in [("HEAD", "/api/pupil/events"), ("GET", "/api/pupil/events/x"), ("GET", "/api/pupil/me")]:
        assert request(QuestionLane(route), app, [b""], method=method, path=path, headers=cookie)[0] == 299
    assert len(opened) == 1


def test_what_opening_a_page_raises_is_answered_by_the_apps_own_handlers(
    app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(question_lane, "pupil_notices", raising(NotJoined()))
    status, body = request(QuestionLane(Route()), app, [b""], method="GET", path="/api/pupil/events")
    assert status == 401
    assert orjson.loads(body)["error"]["code"] == NotJoined().code
