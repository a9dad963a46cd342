"""Pupils: ask a question about the classroom's passage and watch the answer stream in."""

import json
from collections.abc import AsyncGenerator
from contextlib import aclosing

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sse_starlette import EventSourceResponse, ServerSentEvent

from service.answering import AnswerStream, Failed, Finished, Token
from service.api.schemas import Answer, AskQuestion
from service.deps import AnsweringDep

router = APIRouter(prefix="/api/classrooms", tags=["pupil"])


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
    "/{classroom_id}/questions",
    response_model=Answer,
    responses={200: {"content": {"text/event-stream": {}}, "description": "SSE stream, or one JSON body"}},
)
async def ask(classroom_id: str, body: AskQuestion, answering: AnsweringDep, request: Request) -> object:
    """Answers as Server-Sent Events; with `Accept: application/json`, as one JSON body."""
    stream = await answering.ask(classroom_id, body.pupil, body.question)
    accept = request.headers.get("accept", "")
    if "application/json" in accept and "text/event-stream" not in accept:
        return JSONResponse(Answer.of(await stream.collect()).model_dump(mode="json"))
    return EventSourceResponse(sse_events(stream))
