"""Request and response bodies of the HTTP API. Stored records (service.records) are reused where they fit."""

import unicodedata
from datetime import datetime
from typing import Annotated, Any, Self

from pydantic import AfterValidator, BaseModel, Field, StrictBool, StringConstraints

from service.records import Classroom, Passage, QuestionRecord, QuestionStatus, Teacher, Usage


def _one_line(name: str) -> str:
    """Names show on pages, in CSV file names and headers: no line breaks, tabs or other control characters."""
    if any(unicodedata.category(c) == "Cc" for c in name):
        raise ValueError("a name cannot hold line breaks, tabs or other control characters")
    return name


def _stripped(text: str) -> str:
    text = text.strip()
    if not text:
        raise ValueError("it holds only spaces: please type it")
    return text


def _printable(text: str) -> str:
    """Text people typed or pasted (questions, passages, titles): lines and tabs, but no NUL or other
    control characters, which no page shows and some tokenizers and spreadsheets choke on."""
    if any(unicodedata.category(c) == "Cc" and c not in "\n\r\t" for c in text):
        raise ValueError("it holds a control character (such as NUL) that no page can show; please type it again")
    return text


Text = Annotated[str, AfterValidator(_printable)]
# The lengths are the typed text's, as the OpenAPI schema says, and the space around it is then dropped.
Name = Annotated[
    str, StringConstraints(min_length=1, max_length=100), AfterValidator(_stripped), AfterValidator(_one_line)
]
# The join page says so as the pupil types (it does not cut a longer name short).
PUPIL_NAME_MAX_CHARS = 40
PupilName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=PUPIL_NAME_MAX_CHARS),
    AfterValidator(_stripped),
    AfterValidator(_one_line),
]


# Errors


class ErrorDetail(BaseModel):
    code: str = Field(description="for programs, e.g. 'classroom_not_found'")
    message: str = Field(description="for people: a sentence saying what happened and what to do")


class ErrorBody(BaseModel):
    """Every error of every route, the service's own (handlers.py) and the framework's alike."""

    error: ErrorDetail


RETRY_AFTER = {"Retry-After": {"description": "seconds to wait", "required": True, "schema": {"type": "integer"}}}
# What each status means on any route that declares it; a route declares only those it can answer.
ERRORS: dict[int, tuple[str, dict[str, Any]]] = {
    400: ("The body could not be read (a broken form)", {}),
    401: ("Not signed in or joined, or the session has ended", {}),
    403: ("Not allowed here (another class, a closed class, not the operator), or sent by another website", {}),
    404: ("No such classroom, passage, class code or question of the pupil's", {}),
    409: ("The class has no passage yet, the pupil's answer has not finished, or it has (nothing to stop)", {}),
    413: ("The body is larger than the route takes", {}),
    415: ("The body is not JSON (send 'Content-Type: application/json')", {}),
    422: ("A value is missing or refused; the message says which and why", {}),
    429: ("Too many questions or wrong attempts for now", RETRY_AFTER),
    502: ("The answering service refused the question", {}),
    503: (
        "The answering service cannot be reached (the question was saved), or the service's store cannot "
        "(nothing was taken)",
        RETRY_AFTER,
    ),
}
# Any route with a JSON body: unreadable, sent by another site with our cookie, too large, not JSON, refused.
JSON_BODY = (403, 413, 415, 422)
# Any other write: another site may have sent it with our cookie.
WRITE = (403,)


# Any route that reads or writes the store (Redis): unreachable for longer than the client retries.
STORE = (503,)


def errors(*statuses: int, json_route: bool = True) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a route: each status it can answer, in the one error shape. FastAPI documents a
    model in the media type of the route's own answers; a route that answers otherwise (`json_route=False`:
    CSV) names the error shape as JSON itself."""
    documented: dict[int | str, dict[str, Any]] = {}
    for status in sorted(set(statuses)):
        description, headers = ERRORS[status]
        shape = {"model": ErrorBody} if json_route else {"content": {"application/json": {"schema": ERROR_SCHEMA}}}
        documented[status] = {"description": description, **shape} | ({"headers": headers} if headers else {})
    return documented


ERROR_SCHEMA = {"$ref": "#/components/schemas/ErrorBody"}  # there because the JSON routes name the model


# Teachers


class SignIn(BaseModel):
    email: str
    password: str


class TeacherOut(BaseModel):
    id: str
    email: str
    name: str

    @classmethod
    def of(cls, teacher: Teacher) -> "TeacherOut":
        return cls(id=teacher.id, email=teacher.email, name=teacher.name)


class CreateClassroom(BaseModel):
    name: Name


class UpdateClassroom(BaseModel):
    name: Name | None = None
    is_open: StrictBool | None = None  # JSON true or false only, as the schema says (not 0, 1 or "yes")


class ClassroomOut(BaseModel):
    id: str
    name: str
    join_code: str
    is_open: bool

    @classmethod
    def of(cls, classroom: Classroom) -> "ClassroomOut":
        return cls(id=classroom.id, name=classroom.name, join_code=classroom.join_code, is_open=classroom.is_open)


class ClassroomList(BaseModel):
    classrooms: list[ClassroomOut]


class ClassroomDetail(ClassroomOut):
    active_passage_id: str | None
    # Whether a replica already holds the active passage in its prefix cache (sent ahead of the pupils);
    # which replicas, operators see (/api/operator/classrooms/{id}).
    active_passage_warmed: bool
    passages: list[Passage]


class AddPassage(BaseModel):
    # Emptiness and length are judged by the token budget, with messages a teacher understands.
    title: Text
    text: Text


class PassageAdded(BaseModel):
    id: str
    title: str
    tokens: int
    max_tokens: int


class ChooseActivePassage(BaseModel):
    passage_id: str


class RecordView(BaseModel):
    """A view of a stored question: the fields of the record that the view names, and no others."""

    @classmethod
    def of(cls, record: QuestionRecord) -> Self:
        return cls.model_validate(record.model_dump(include=set(cls.model_fields)))


class TeacherQuestion(RecordView):
    """A question as the class's teacher sees it: who asked what, the answer, its usage and timings; not
    where it was routed (operators alone see replicas)."""

    id: str
    classroom_id: str
    passage_id: str
    pupil: str
    question: str
    status: QuestionStatus
    answer: str
    error: str | None
    finish_reason: str | None
    usage: Usage | None
    ttft_ms: float | None
    total_ms: float | None
    asked_at: datetime
    finished_at: datetime | None


class QuestionList(BaseModel):
    questions: list[TeacherQuestion]


# Pupils


class Join(BaseModel):
    join_code: str
    name: PupilName


class Joined(BaseModel):
    classroom_id: str
    classroom_name: str
    name: str


class PassageView(BaseModel):
    id: str
    title: str
    text: str


class PupilView(BaseModel):
    name: str
    classroom_id: str
    classroom_name: str
    is_open: bool
    passage: PassageView | None


class PupilQuestion(RecordView):
    """A question as the pupil who asked it sees it: what was asked and answered, never the stored internals
    (ids of pupils, the replica it went to, the backend's own words)."""

    id: str
    passage_id: str
    question: str
    status: QuestionStatus
    answer: str
    error: str | None
    asked_at: datetime
    finished_at: datetime | None


class PupilQuestionList(BaseModel):
    questions: list[PupilQuestion]


class AskQuestion(BaseModel):
    # Checked by the domain (empty, too many letters or tokens) with sentences a child understands.
    question: Text


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


# Health and operators


class Readiness(BaseModel):
    redis: str
    backend: str
    model: str
