"""Request and response bodies of the HTTP API. Stored records (service.records) are reused where they fit."""

import re
import unicodedata
from datetime import datetime
from typing import Annotated, Any, Self

from pydantic import AfterValidator, BaseModel, Field, StrictBool, StringConstraints, computed_field

from service.records import Classroom, Passage, QuestionRecord, QuestionStatus, Teacher, Usage, pupil_label


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


# Unicode's control characters (category Cc) but line breaks and tabs: a regular expression, since a pasted
# passage may be a megabyte and a loop over its characters would hold the event loop for a tenth of a second.
CONTROL_CHARACTERS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def _printable(text: str) -> str:
    """Text people typed or pasted (questions, passages, titles): lines and tabs, but no NUL or other
    control characters, which no page shows and some tokenizers and spreadsheets choke on."""
    if CONTROL_CHARACTERS.search(text):
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
    403: (
        "Not allowed here (another class, a closed or archived class, not the operator), or sent by another website",
        {},
    ),
    404: ("No such classroom, passage, class code or question of the pupil's", {}),
    409: (
        "The class has no passage yet, the pupil's answer has not finished or has (nothing to stop), the passage "
        "the pupil read was taken away, or the passage is the one pupils see",
        {},
    ),
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
    507: ("The service's store is full (nothing was taken, nothing stored was lost)", {}),
}
# Any route with a JSON body: unreadable, sent by another site with our cookie, too large, not JSON, refused.
JSON_BODY = (403, 413, 415, 422, 507)
# Any other write: another site may have sent it with our cookie; the store may be full.
WRITE = (403, 507)


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
    archived: StrictBool | None = Field(
        default=None, description="true: put the class away (closed to pupils, listed apart); false: restore it"
    )


class ClassroomOut(BaseModel):
    id: str
    name: str
    join_code: str
    is_open: bool
    created_at: datetime
    archived_at: datetime | None

    @classmethod
    def of(cls, classroom: Classroom) -> "ClassroomOut":
        return cls.model_validate(classroom.model_dump(include=set(cls.model_fields)))


class ClassroomSummary(ClassroomOut):
    questions: int = Field(description="how many questions its pupils have asked")


class ClassroomList(BaseModel):
    classrooms: list[ClassroomSummary]


class FormerPassage(BaseModel):
    """A passage edited (an older version) or deleted: out of the class's list, kept for its questions."""

    id: str
    title: str
    version: int


class ClassroomDetail(ClassroomOut):
    active_passage_id: str | None
    # Whether a replica already holds the active passage in its prefix cache (sent ahead of the pupils);
    # which replicas, operators see (/api/operator/classrooms/{id}).
    active_passage_warmed: bool
    passages: list[Passage]
    former_passages: list[FormerPassage]
    passage_max_tokens: int = Field(description="the most tokens a passage (title and text) may have")


class AddPassage(BaseModel):
    # Emptiness and length are judged by the token budget, with messages a teacher understands.
    title: Text
    text: Text
    publish: StrictBool = Field(default=False, description="true: pupils see it at once (else: publish it later)")


class EditPassage(BaseModel):
    title: Text
    text: Text


class PassageAdded(BaseModel):
    id: str
    title: str
    tokens: int
    max_tokens: int
    version: int
    published: bool = Field(description="whether pupils see it now")


class RosterPupil(BaseModel):
    """A pupil as teachers see them: the name typed, numbered when another pupil of the class typed it too."""

    name: str
    number: int
    label: str = Field(description="'Ada', or 'Ada (2)' for the second pupil who typed that name")


class PupilList(BaseModel):
    pupils: list[RosterPupil]


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
    pupil_number: int
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

    @computed_field(description="the pupil as teachers see them: 'Ada', or 'Ada (2)' for a second Ada")  # type: ignore[prop-decorator]
    @property
    def pupil_label(self) -> str:
        return pupil_label(self.pupil, self.pupil_number)


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

    @classmethod
    def of(cls, passage: Passage) -> "PassageView":
        return cls(id=passage.id, title=passage.title, text=passage.text)


class PupilView(BaseModel):
    name: str
    classroom_id: str
    classroom_name: str
    is_open: bool
    passage: PassageView | None


class ClassNotice(BaseModel):
    """What a pupil's page shows of the class: sent when the page connects and whenever it changes."""

    is_open: bool
    passage: PassageView | None = Field(description="the passage pupils read now; null: none yet")

    @classmethod
    def of(cls, classroom: Classroom | None, passage: Passage | None) -> "ClassNotice":
        if classroom is None:  # the class was removed: nothing to read or ask any more
            return cls(is_open=False, passage=None)
        is_open = classroom.is_open and classroom.archived_at is None
        return cls(is_open=is_open, passage=PassageView.of(passage) if passage else None)


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
    passage_id: str | None = Field(
        default=None,
        max_length=64,
        description="The passage the pupil is reading (from `GET /api/pupil/me` or the class's events); "
        "the question is answered about it while it is one of the class's passages, else refused (409). "
        "Without it, the passage pupils see now.",
    )


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
