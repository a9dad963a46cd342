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
    # Archived: put away by the teacher, closed to pupils, listed apart; None while in use.
    archived_at: datetime | None = None


class PupilSession(BaseModel):
    """A pupil has no account: a display name and a join code give a session scoped to one classroom."""

    pupil_id: str
    classroom_id: str
    name: str
    # Tells apart pupils of the class who typed the same name (any case): the first "Ada" is 1, the next 2.
    pupil_number: int = 1
    created_at: datetime = Field(default_factory=utcnow)


def pupil_label(name: str, number: int) -> str:
    """A pupil as teachers see them: "Ada", and "Ada (2)" for the second who typed that name."""
    return name if number <= 1 else f"{name} ({number})"


class Passage(BaseModel):
    id: str
    classroom_id: str
    title: str
    text: str
    tokens: int = Field(description="Tokens of title and text, counted with the served model's tokenizer.")
    # An edit stores a new passage (a new id, the next version) and keeps this one for its questions.
    version: int = 1
    previous_id: str | None = None
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
    pupil_number: int = 1
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
