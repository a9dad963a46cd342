"""Pupils: join a class with its code, read its passage, ask, and watch the answer stream in."""

from collections.abc import AsyncGenerator
from contextlib import aclosing

import orjson
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from sse_starlette import EventSourceResponse, ServerSentEvent

from service.answering import AnswerStream, Failed, Finished, InLine, Token
from service.api.bodies import ApiRoute
from service.api.event_stream import STREAM_HEADERS, EventStream
from service.api.schemas import (
    JSON_BODY,
    STORE,
    WRITE,
    Answer,
    AskQuestion,
    ClassNotice,
    Join,
    Joined,
    PassageView,
    PupilQuestion,
    PupilQuestionList,
    PupilView,
    errors,
)
from service.deps import (
    PUPIL_COOKIE,
    AccountsDep,
    AnsweringDep,
    CurrentPupil,
    ServicesDep,
    StoreDep,
    client_of,
    set_session_cookie,
)

router = APIRouter(tags=["pupil"], route_class=ApiRoute, responses=errors(*STORE))

OWN_HISTORY_LIMIT = 200


@router.post("/api/join", status_code=201, responses=errors(*JSON_BODY, 404, 429))
async def join(
    body: Join, request: Request, accounts: AccountsDep, services: ServicesDep, response: Response
) -> Joined:
    token, session, classroom = await accounts.join(body.join_code, body.name, client_of(request))
    auth = services.settings.auth
    set_session_cookie(response, PUPIL_COOKIE, token, auth.pupil_session_hours, auth.secure_cookies)
    return Joined(classroom_id=classroom.id, classroom_name=classroom.name, name=session.name)


@router.delete("/api/pupil/session", status_code=204, responses=errors(*WRITE))
async def leave(request: Request, store: StoreDep, response: Response) -> None:
    if token := request.cookies.get(PUPIL_COOKIE):
        await store.end_pupil_session(token)
    response.delete_cookie(PUPIL_COOKIE)


@router.get("/api/pupil/me", responses=errors(401))
async def my_class(pupil: CurrentPupil, store: StoreDep) -> PupilView:
    """The pupil's class and the passage to read."""
    classroom = await store.get_classroom(pupil.classroom_id)
    passage = await store.active_passage(classroom.id)
    return PupilView(
        name=pupil.name,
        classroom_id=classroom.id,
        classroom_name=classroom.name,
        is_open=classroom.is_open and classroom.archived_at is None,
        passage=PassageView.of(passage) if passage else None,
    )


@router.get(
    "/api/pupil/events",
    response_class=EventSourceResponse,
    responses={
        200: {
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
            "description": "`event: class`, what the page shows of the class (ClassNotice), on connecting and on "
            "every change: a passage published, the class closed or reopened",
        },
        **errors(401),
    },
)
async def class_notices(pupil: CurrentPupil, services: ServicesDep) -> EventSourceResponse:
    """Server-Sent Events for an open pupil page: the passage to read and whether the class is open, now and
    whenever the teacher changes them, so that no pupil is answered about a passage they cannot see."""

    async def events() -> AsyncGenerator[ServerSentEvent]:
        shown: ClassNotice | None = None
        async with aclosing(services.notices.watch(pupil.classroom_id)) as changes:
            async for cached in changes:
                notice = ClassNotice.of(*((cached.classroom, cached.passage) if cached else (None, None)))
                if notice != shown:
                    shown = notice
                    yield ServerSentEvent(event="class", data=notice.model_dump_json())

    return EventSourceResponse(events(), ping=services.settings.answer.keepalive_s, headers=STREAM_HEADERS)


@router.get("/api/pupil/questions", responses=errors(401))
async def my_questions(pupil: CurrentPupil, store: StoreDep) -> PupilQuestionList:
    """The pupil's own questions and answers, newest first; never another pupil's."""
    records = await store.pupil_questions(pupil.pupil_id, OWN_HISTORY_LIMIT)
    return PupilQuestionList(questions=[PupilQuestion.of(r) for r in records])


def _event(name: bytes, data: bytes) -> bytes:
    return b"event: " + name + b"\ndata: " + data + b"\n\n"


async def sse_events(stream: AnswerStream) -> AsyncGenerator[bytes]:
    """`question` first, `queued` with the place in line while the question waits for its turn, then `token`s,
    and always one final event: `done` or `error`. Encoded here, once each: every token of every answer
    passes through."""
    yield _event(b"question", orjson.dumps({"question_id": stream.record.id}))
    async with aclosing(stream.events()) as events:
        async for event in events:
            if isinstance(event, Token):
                yield b"event: token\ndata: " + orjson.dumps({"text": event.text}) + b"\n\n"
            elif isinstance(event, InLine):
                yield _event(b"queued", orjson.dumps({"place": event.place}))
            elif isinstance(event, Finished):
                yield _event(b"done", Answer.of(event.record).model_dump_json().encode())
            elif isinstance(event, Failed):
                yield _event(b"error", orjson.dumps({"question_id": event.record.id, "message": event.message}))


@router.post(
    "/api/classrooms/{classroom_id}/questions",
    response_model=Answer,
    responses={
        200: {"content": {"text/event-stream": {}}, "description": "SSE stream, or one JSON body"},
        **errors(*JSON_BODY, 401, 404, 409, 429, 502, 503),
    },
)
async def ask(
    classroom_id: str,
    body: AskQuestion,
    answering: AnsweringDep,
    services: ServicesDep,
    request: Request,
) -> object:
    """Answers as Server-Sent Events; with `Accept: application/json`, as one JSON body. (The pupil's session
    is checked where the question is admitted: `Answering.ask`.)"""
    stream = await answering.ask(request.cookies.get(PUPIL_COOKIE), classroom_id, body.question, body.passage_id)
    accept = request.headers.get("accept", "")
    if "application/json" in accept and "text/event-stream" not in accept:
        return JSONResponse(Answer.of(await stream.collect()).model_dump(mode="json"))
    return EventStream(sse_events(stream), keepalive_s=services.settings.answer.keepalive_s)
