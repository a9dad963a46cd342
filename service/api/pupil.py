"""Pupils: join a class with its code, read its passage, ask, and watch the answer stream in."""

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import JSONResponse

from service.api.bodies import ApiRoute
from service.api.deps import (
    PUPIL_COOKIE,
    AccountsDep,
    AnsweringDep,
    CurrentPupil,
    ServicesDep,
    SettingsDep,
    StoreDep,
    client_of,
    end_session,
    set_session_cookie,
)
from service.api.event_stream import EventStream, event_stream_documented, page_retry, sse_event
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
from service.classroom.class_cache import CachedClass
from service.classroom.live import Followed, Queued, Said
from service.records import PupilSession
from service.services import Services

router = APIRouter(tags=["pupil"], route_class=ApiRoute, responses=errors(*STORE))

OWN_HISTORY_LIMIT = 200


@router.post("/api/join", status_code=201, responses=errors(*JSON_BODY, 404, 429))
async def join(
    body: Join, request: Request, accounts: AccountsDep, settings: SettingsDep, response: Response
) -> Joined:
    token, session, classroom = await accounts.join(body.join_code, body.name, client_of(request))
    auth = settings.auth
    set_session_cookie(response, PUPIL_COOKIE, token, auth.pupil_session_hours, auth.secure_cookies)
    return Joined(classroom_id=classroom.id, classroom_name=classroom.name, name=session.name)


@router.delete("/api/pupil/session", status_code=204, responses=errors(*WRITE))
async def leave(request: Request, store: StoreDep, response: Response) -> None:
    await end_session(request, response, PUPIL_COOKIE, store.end_pupil_session)


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
    response_class=EventStream,
    status_code=200,
    responses={
        200: event_stream_documented(
            "`event: class`, what the page shows of the class (ClassNotice), on connecting and on "
            "every change: a passage published, the class closed or reopened"
        ),
        **errors(*STORE, 401, json_route=False),
    },
)
async def class_notices(pupil: CurrentPupil, services: ServicesDep) -> EventStream:
    """Server-Sent Events for an open pupil page: the passage to read and whether the class is open, now and
    whenever the teacher changes them, so that no pupil is answered about a passage they cannot see."""
    # An open page reaches `pupil_notices` through `QuestionLane` without coming here.
    return _notices(services, pupil)


async def pupil_notices(services: Services, session_token: str | None) -> EventStream:
    """`class_notices` for the pupil whose session `session_token` is."""
    return _notices(services, await services.accounts.pupil(session_token))


def _notices(services: Services, pupil: PupilSession) -> EventStream:
    events = services.notices.rendered(pupil.classroom_id, _notice_event)
    answer = services.settings.answer
    return EventStream(
        events,
        keepalive_s=answer.keepalive_s,
        draining=services.draining,
        opening=page_retry(answer.page_reconnect_max_s),
    )


def _notice_event(cached: CachedClass | None) -> bytes:
    notice = ClassNotice.of(*((cached.classroom, cached.passage) if cached else (None, None)))
    return sse_event(b"class", notice.model_dump_json().encode())


@router.get("/api/pupil/questions", responses=errors(401))
async def my_questions(pupil: CurrentPupil, store: StoreDep) -> PupilQuestionList:
    """The pupil's own questions and answers, newest first; never another pupil's."""
    records = await store.pupil_questions(pupil.pupil_id, OWN_HISTORY_LIMIT)
    return PupilQuestionList(questions=[PupilQuestion.of(r) for r in records])


async def sse_events(events: AsyncGenerator[Followed], question_id: str | None = None) -> AsyncGenerator[bytes]:
    """`question` first (on the stream that asks it), `queued` with the place in line while the question waits
    for its turn, then `token`s, each with the answer's length in characters after it as its SSE `id` (what a
    page that comes back sends as `Last-Event-ID`), and always one final event: `done` or `error`. Encoded
    here, once each: every token of every answer passes through."""
    if question_id is not None:
        yield sse_event(b"question", orjson.dumps({"question_id": question_id}))
    async with aclosing(events) as followed:
        async for event in followed:
            if isinstance(event, Said):
                yield b"event: token\nid: %d\ndata: %b\n\n" % (event.offset, orjson.dumps({"text": event.text}))
            elif isinstance(event, Queued):
                yield sse_event(b"queued", orjson.dumps({"place": event.place}))
            elif event.message is None:
                yield sse_event(b"done", Answer.of(event.record).model_dump_json().encode())
            else:
                yield sse_event(b"error", orjson.dumps({"question_id": event.record.id, "message": event.message}))


SSE: dict[int | str, dict[str, Any]] = {
    200: event_stream_documented(
        "SSE stream (`question`, `queued`, `token`s, then `done` or `error`), or one JSON body"
    )
}


@router.post(
    "/api/classrooms/{classroom_id}/questions",
    response_model=Answer,
    responses={**SSE, **errors(*JSON_BODY, 401, 404, 409, 429, 502, 503)},
)
async def ask(classroom_id: str, body: AskQuestion, services: ServicesDep, request: Request) -> Response:
    """Answers as Server-Sent Events; with `Accept: application/json`, as one JSON body. The answer is written
    to its end whatever this connection does: a page that loses it follows the rest through
    `GET /api/pupil/questions/{question_id}/events`. (The pupil's session is checked where the question is
    admitted: `Answering.ask`.)"""
    # A well-formed question reaches `answer_question` through `QuestionLane` without coming here.
    token = request.cookies.get(PUPIL_COOKIE)
    return await answer_question(services, token, classroom_id, body, request.headers.get("accept", ""))


async def answer_question(
    services: Services, session_token: str | None, classroom_id: str, body: AskQuestion, accept: str
) -> Response:
    """The answer to a pupil's question: its events as they come, or, if `accept` asks for JSON only, the
    whole answer as one JSON body."""
    answering = services.answering
    if "application/json" in accept and "text/event-stream" not in accept:
        record = await answering.answer(session_token, classroom_id, body.question, body.passage_id)
        return JSONResponse(Answer.of(record).model_dump(mode="json"))
    live = await answering.ask(session_token, classroom_id, body.question, body.passage_id)
    events = answering.follow(live, 0)
    return EventStream(sse_events(events, live.record.id), keepalive_s=services.settings.answer.keepalive_s)


@router.get(
    "/api/pupil/questions/{question_id}/events",
    response_class=EventStream,
    status_code=200,
    responses={
        200: event_stream_documented("SSE stream: `token`s from the offset, then `done` or `error`"),
        **errors(*STORE, 401, 404, 422, json_route=False),
    },
)
async def follow_answer(
    question_id: str,
    pupil: CurrentPupil,
    answering: AnsweringDep,
    services: ServicesDep,
    after: Annotated[int | None, Query(ge=0, description="characters of the answer the page has already")] = None,
    last_event_id: Annotated[
        int | None, Header(alias="Last-Event-ID", ge=0, description="the `id` of the last token event received")
    ] = None,
) -> EventStream:
    """One of the pupil's own answers, from where the page left it (`Last-Event-ID`, else `after`, else the
    start), on any service process: the rest said so far in one `token` event, then each piece as it comes,
    then the final `done` or `error` event exactly as the question's own stream ends it; for an answer that
    ended, the rest and its final event at once."""
    found = await answering.find(pupil.pupil_id, question_id)
    offset = last_event_id if last_event_id is not None else after or 0
    events = answering.follow(found, offset)
    return EventStream(sse_events(events), keepalive_s=services.settings.answer.keepalive_s)


@router.post("/api/pupil/questions/{question_id}/stop", status_code=204, responses=errors(*WRITE, 401, 404, 409, 422))
async def stop_answer(question_id: str, pupil: CurrentPupil, answering: AnsweringDep) -> None:
    """End one of the pupil's own answers now, on whichever service process writes it: vLLM stops generating,
    and the answer is stored `incomplete` with what it said so far. 409 if it has finished already."""
    await answering.stop(pupil.pupil_id, question_id)
