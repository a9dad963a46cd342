"""Request and response bodies of the HTTP API. Stored records (service.records) are reused where they fit."""

from typing import Annotated

from pydantic import BaseModel, StringConstraints

from service.records import QuestionRecord, QuestionStatus, Usage

Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=100)]
PupilName = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=40)]


class CreateClassroom(BaseModel):
    name: Name


class ClassroomCreated(BaseModel):
    id: str
    name: str
    join_code: str


class AddPassage(BaseModel):
    # Emptiness and length are judged by the token budget, with messages a teacher understands.
    title: str
    text: str


class PassageAdded(BaseModel):
    id: str
    tokens: int
    max_tokens: int


class AskQuestion(BaseModel):
    pupil: PupilName
    # Checked by the domain (empty, too many letters or tokens) with sentences a child understands.
    question: str


class Answer(BaseModel):
    """The whole answer as one JSON body: the same fields as the stream's final `done` event."""

    question_id: str
    status: QuestionStatus
    answer: str
    usage: Usage | None
    ttft_ms: float | None
    total_ms: float | None
    finish_reason: str | None

    @classmethod
    def of(cls, record: QuestionRecord) -> "Answer":
        return cls(
            question_id=record.id,
            status=record.status,
            answer=record.answer,
            usage=record.usage,
            ttft_ms=record.ttft_ms,
            total_ms=record.total_ms,
            finish_reason=record.finish_reason,
        )


class QuestionList(BaseModel):
    questions: list[QuestionRecord]


class Readiness(BaseModel):
    redis: str
    backend: str
    model: str
