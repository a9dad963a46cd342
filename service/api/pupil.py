"""Pupils: join a class with its code, read its passage, ask, and watch the answer stream in."""

import json
from collections.abc import AsyncGenerator
from contextlib import aclosing

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from sse_starlette import EventSourceResponse, ServerSentEvent

from service.answering import AnswerStream, Failed, Finished, Token
from service.api.schemas import Answer, AskQuestion, Join, Joined, PassageView, PupilView, QuestionList
from service.deps import (
    PUPIL_COOKIE,
    AccountsDep,
    AnsweringDep,
    CurrentPupil,
    ServicesDep,
    StoreDep,
    set_session_cookie,
)

router = APIRouter(tags=["pupil"])

OWN_HISTORY_LIMIT = 200
# Besides what sse-starlette sets (X-Accel-Buffering: no, Connection: keep-alive): no proxy may store or
# transform (e.g. compress, which buffers) the stream.
STREAM_HEADERS = {"Cache-Control": "no-store, no-transform"}


@router.post("/api/join", status_code=201)
async def join(body: Join, accounts: AccountsDep, services: ServicesDep, response: Response) -> Joined:
    token, session, classroom = await accounts.join(body.join_code, body.name)
    auth = services.settings.auth
    set_session_cookie(response, PUPIL_COOKIE, token, auth.pupil_session_hours, auth.secure_cookies)
    return Joined(classroom_id=classroom.id, classroom_name=classroom.name, name=session.name)


@router.delete("/api/pupil/session", status_code=204)
async def leave(request: Request, store: StoreDep, response: Response) -> None:
    if token := request.cookies.get(PUPIL_COOKIE):
        await store.end_pupil_session(token)
    response.delete_cookie(PUPIL_COOKIE)


@router.get("/api/pupil/me")
async def my_class(pupil: CurrentPupil, store: StoreDep) -> PupilView:
    """The pupil's class and the passage to read."""
    classroom = await store.get_classroom(pupil.classroom_id)
    passage = await store.active_passage(classroom.id)
    return PupilView(
        name=pupil.name,
        classroom_id=classroom.id,
        classroom_name=classroom.name,
        is_open=classroom.is_open,
        passage=PassageView(id=passage.id, title=passage.title, text=passage.text) if passage else None,
    )


@router.get("/api/pupil/questions")
async def my_questions(pupil: CurrentPupil, store: StoreDep) -> QuestionList:
    """The pupil's own questions and answers, newest first; never another pupil's."""
    return QuestionList(questions=await store.pupil_questions(pupil.pupil_id, OWN_HISTORY_LIMIT))


async def sse_events(stream: AnswerStream) -> AsyncGenerator[ServerSentEvent]:
    """`question` first, then `token`s, and always one final event: `done` or `error`."""
    yield ServerSentEvent(event="question", data=json.dumps({"question_id": stream.record.id}))
    async with aclosing(stream.events()) as events:
        async for event in events:
            match event:
                case Token(text):
                    yield ServerSentEvent(event="token", data=json.dumps({"text": text}))
                case Finished(record):
                    yield ServerSentEvent(event="done", data=Answer.of(record).model_dump_json())
                case Failed(record, message):
                    data = json.dumps({"question_id": record.id, "message": message})
                    yield ServerSentEvent(event="error", data=data)


@router.post(
    "/api/classrooms/{classroom_id}/questions",
    response_model=Answer,
    responses={200: {"content": {"text/event-stream": {}}, "description": "SSE stream, or one JSON body"}},
)
async def ask(
    classroom_id: str,
    body: AskQuestion,
    pupil: CurrentPupil,
    answering: AnsweringDep,
    services: ServicesDep,
    request: Request,
) -> object:
    """Answers as Server-Sent Events; with `Accept: application/json`, as one JSON body."""
    stream = await answering.ask(pupil, classroom_id, body.question)
    accept = request.headers.get("accept", "")
    if "application/json" in accept and "text/event-stream" not in accept:
        return JSONResponse(Answer.of(await stream.collect()).model_dump(mode="json"))
    return EventSourceResponse(sse_events(stream), ping=services.settings.answer.keepalive_s, headers=STREAM_HEADERS)
