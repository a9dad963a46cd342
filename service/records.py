"""What the service stores in Redis, as validated JSON. Wire formats reuse these where they match."""

from datetime import UTC, datetime
from enum import StrEnum

from pydantic import BaseModel, Field


def utcnow() -> datetime:
    return datetime.now(UTC)


class Teacher(BaseModel):
    id: str
    email: str
    name: str
    password_hash: str
    created_at: datetime = Field(default_factory=utcnow)


class Classroom(BaseModel):
    id: str
    teacher_id: str
    name: str
    join_code: str
    is_open: bool = True
    created_at: datetime = Field(default_factory=utcnow)


class PupilSession(BaseModel):
    """A pupil has no account: a display name and a join code give a session scoped to one classroom."""

    pupil_id: str
    classroom_id: str
    name: str
    created_at: datetime = Field(default_factory=utcnow)


class Passage(BaseModel):
    id: str
    classroom_id: str
    title: str
    text: str
    tokens: int = Field(description="Tokens of title and text, counted with the served model's tokenizer.")
    created_at: datetime = Field(default_factory=utcnow)


class Usage(BaseModel):
    prompt_tokens: int
    cached_tokens: int = Field(description="Prompt tokens served from vLLM's prefix cache.")
    completion_tokens: int


class QuestionStatus(StrEnum):
    ANSWERING = "answering"
    ANSWERED = "answered"
    # Cut short (the pupil left, the backend died mid-stream): the text so far is kept.
    INCOMPLETE = "incomplete"
    # No answer at all (the backend could not be reached).
    FAILED = "failed"
    # Not taken: the line for the replica was full (the pupil was told to ask again in a moment).
    REFUSED = "refused"


class QuestionRecord(BaseModel):
    id: str
    classroom_id: str
    passage_id: str
    pupil_id: str
    pupil: str
    question: str
    status: QuestionStatus = QuestionStatus.ANSWERING
    # Where it was sent: the variant and the replica's base URL (None if no replica was reachable).
    variant: str | None = None
    replica: str | None = None
    answer: str = ""
    error: str | None = None
    finish_reason: str | None = None
    usage: Usage | None = None
    ttft_ms: float | None = Field(default=None, description="From the question's arrival to the first token.")
    total_ms: float | None = None
    asked_at: datetime = Field(default_factory=utcnow)
    finished_at: datetime | None = None
