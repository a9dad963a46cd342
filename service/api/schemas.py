"""Request and response bodies of the HTTP API. Stored records (service.records) are reused where they fit."""

import unicodedata
from datetime import datetime
from typing import Annotated, Self

from pydantic import AfterValidator, BaseModel, StringConstraints

from service.records import Classroom, Passage, QuestionRecord, QuestionStatus, Teacher, Usage


def _one_line(name: str) -> str:
    """Names show on pages, in CSV file names and headers: no line breaks, tabs or other control characters."""
    if any(unicodedata.category(c) == "Cc" for c in name):
        raise ValueError("a name cannot hold line breaks, tabs or other control characters")
    return name


Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=100), AfterValidator(_one_line)]
PupilName = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=40), AfterValidator(_one_line)
]


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
    is_open: bool | None = None


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
    title: str
    text: str


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


# Health and operators


class Readiness(BaseModel):
    redis: str
    backend: str
    model: str
