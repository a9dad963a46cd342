"""What the service stores in Redis, as validated JSON. Wire formats reuse these where they match."""

from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path

import yaml
from pydantic import BaseModel, Field, ValidationError, model_validator

from service.errors import InvalidInput


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

    def changed(
        self, *, name: str | None = None, is_open: bool | None = None, archived: bool | None = None
    ) -> "Classroom":
        """Renamed, closed or reopened, archived or restored (None: as it is). Archiving an archived class keeps
        when it was archived."""
        changes: dict[str, object] = {}
        if name is not None:
            changes["name"] = name
        if is_open is not None:
            changes["is_open"] = is_open
        if archived is not None and archived != (self.archived_at is not None):
            changes["archived_at"] = utcnow() if archived else None
        return self.model_copy(update=changes)


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


# The error an answer is stored with when its pupil pressed Stop (the pupil reads it).
STOPPED = "You stopped this answer."
UNANSWERED = frozenset({QuestionStatus.FAILED, QuestionStatus.REFUSED, QuestionStatus.INCOMPLETE})
# Ended by the pupil, not by us: Stop, and (in records stored before answers outlived their connection) a
# pupil who closed the page.
PUPILS_DOING = frozenset({STOPPED, "The pupil left before the answer finished."})


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


def is_error(record: QuestionRecord) -> bool:
    """Failed, refused for a full line, or cut short by the backend; a pupil who stopped it is no error of ours."""
    return record.status in UNANSWERED and record.error not in PUPILS_DOING


# The backends' configuration (service/backends/routing.py routes by it), shared by every process through Redis.


class Variant(BaseModel):
    replicas: list[str] = Field(min_length=1, description="OpenAI base URLs, e.g. http://10.0.0.5:8000/v1")
    description: str = ""


class Canary(BaseModel):
    variant: str
    percent: int = Field(ge=0, le=100)


class WarmupBurst(BaseModel):
    """How a replica's last warm-up burst went (service/backends/warmup.py), for the operator's console."""

    at: datetime = Field(default_factory=utcnow)
    requests: int
    failed: int = Field(description="requests still without an answer after every attempt")
    retried: int = Field(description="requests sent again: a connection that did not open, an answer that never came")
    took_s: float
    error: str | None = Field(default=None, description="the first failure, in the replica's or the connection's words")


class BackendConfig(BaseModel):
    version: int = 0
    active: str
    canary: Canary | None = None
    variants: dict[str, Variant]

    @model_validator(mode="after")
    def _names_exist(self) -> "BackendConfig":
        if self.active not in self.variants:
            raise ValueError(f"the active variant '{self.active}' is not one of {sorted(self.variants)}")
        if self.canary is not None:
            if self.canary.variant not in self.variants:
                raise ValueError(f"the canary variant '{self.canary.variant}' is not one of {sorted(self.variants)}")
            if self.canary.variant == self.active:
                raise ValueError("the canary must be another variant than the active one")
        return self

    @classmethod
    def from_file(cls, path: Path) -> "BackendConfig":
        return cls.model_validate(yaml.safe_load(path.read_text()))

    @classmethod
    def single(cls, base_url: str) -> "BackendConfig":
        """One variant, one replica: what a deployment that names only `backend.base_url` gets."""
        return cls(active="original", variants={"original": Variant(replicas=[base_url])})

    def replica_urls(self) -> list[str]:
        return sorted({url for variant in self.variants.values() for url in variant.replicas})

    # An operator's changes (service/api/operator.py), each checked as a whole by `revised` when it is stored.

    def with_active(self, variant: str) -> "BackendConfig":
        """New questions go to `variant`; a canary of that variant ends (it has become the active one)."""
        canary = None if self.canary and self.canary.variant == variant else self.canary
        return self.model_copy(update={"active": variant, "canary": canary})

    def with_canary(self, canary: "Canary | None") -> "BackendConfig":
        return self.model_copy(update={"canary": canary})

    def with_variant(self, name: str, variant: "Variant") -> "BackendConfig":
        """`name` declared, or its replicas changed (one added to scale out, one removed to drain it)."""
        return self.model_copy(update={"variants": {**self.variants, name: variant}})

    def without_variant(self, name: str) -> "BackendConfig":
        if name not in self.variants:
            raise InvalidInput(f"there is no variant '{name}'")
        return self.model_copy(update={"variants": {k: v for k, v in self.variants.items() if k != name}})

    def revised(self, version: int) -> "BackendConfig":
        """This configuration as `version`, checked as a whole (the variants it names exist, the canary is another
        one): InvalidInput with the checks' own sentences if it cannot route."""
        try:
            return BackendConfig.model_validate({**self.model_dump(), "version": version})
        except ValidationError as exc:
            # A check of ours raises ValueError: its sentence as written, not pydantic's "Value error, ..." wrapping.
            raise InvalidInput(
                "; ".join(str(e["ctx"]["error"]) if e["type"] == "value_error" else e["msg"] for e in exc.errors())
            ) from exc
