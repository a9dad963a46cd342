"""Teachers: sign in, classrooms, passages, and what their pupils asked (also live, and as CSV)."""

import asyncio
import functools
import time
from collections.abc import AsyncGenerator
from typing import Annotated

from fastapi import APIRouter, File, Form, Query, Request, Response, UploadFile
from fastapi.responses import StreamingResponse

from service.api.bodies import ApiRoute
from service.api.deps import (
    TEACHER_COOKIE,
    AccountsDep,
    CurrentTeacher,
    OwnClassroom,
    PassagesDep,
    PromptsDep,
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
    AddPassage,
    ChooseActivePassage,
    ClassroomDetail,
    ClassroomList,
    ClassroomOut,
    ClassroomSummary,
    CreateClassroom,
    EditPassage,
    FormerPassage,
    PassageAdded,
    PupilList,
    QuestionList,
    RosterPupil,
    SignIn,
    TeacherOut,
    TeacherQuestion,
    UpdateClassroom,
    errors,
)
from service.classroom import figures
from service.classroom.export import QuestionsCsv, attachment
from service.classroom.prompting import Prompts
from service.records import Classroom, Passage, QuestionRecord, pupil_label
from service.store import Store

router = APIRouter(tags=["teacher"], route_class=ApiRoute, responses=errors(*STORE))


class CsvResponse(StreamingResponse):
    media_type = "text/csv"


# Questions a piece of the CSV export holds: a few milliseconds of the event loop to read and write each.
EXPORT_PAGE = 200


# Every route of a class: not signed in (401), or no such class of this teacher (404).
CLASS = (401, 404, 422)


@router.post("/api/teacher/session", responses=errors(*JSON_BODY, 401, 429))
async def sign_in(
    body: SignIn, request: Request, accounts: AccountsDep, settings: SettingsDep, response: Response
) -> TeacherOut:
    token, teacher = await accounts.sign_in(body.email, body.password, client_of(request))
    auth = settings.auth
    set_session_cookie(response, TEACHER_COOKIE, token, auth.teacher_session_hours, auth.secure_cookies)
    return TeacherOut.of(teacher)


@router.delete("/api/teacher/session", status_code=204, responses=errors(*WRITE))
async def sign_out(request: Request, store: StoreDep, response: Response) -> None:
    await end_session(request, response, TEACHER_COOKIE, store.end_teacher_session)


@router.get("/api/teacher/me", responses=errors(401))
async def me(teacher: CurrentTeacher) -> TeacherOut:
    return TeacherOut.of(teacher)


@router.get("/api/classrooms", responses=errors(401))
async def my_classrooms(teacher: CurrentTeacher, store: StoreDep) -> ClassroomList:
    """The teacher's classrooms, newest first, each with how many questions it has (archived ones too)."""
    classrooms = await store.teacher_classrooms(teacher.id)
    counts = await store.question_counts([c.id for c in classrooms])
    return ClassroomList(
        classrooms=[
            ClassroomSummary(**ClassroomOut.of(c).model_dump(), questions=n)
            for c, n in zip(classrooms, counts, strict=True)
        ]
    )


@router.post("/api/classrooms", status_code=201, responses=errors(*JSON_BODY, 401))
async def create_classroom(body: CreateClassroom, teacher: CurrentTeacher, store: StoreDep) -> ClassroomOut:
    return ClassroomOut.of(await store.create_classroom(teacher.id, body.name))


async def _detail(store: Store, prompts: Prompts, classroom: Classroom) -> ClassroomDetail:
    active = await store.active_passage_id(classroom.id)
    former = await store.former_passages(classroom.id)
    return ClassroomDetail(
        **ClassroomOut.of(classroom).model_dump(),
        active_passage_id=active,
        active_passage_warmed=bool(await store.warmed(active)) if active else False,
        passages=await store.list_passages(classroom.id),
        former_passages=[FormerPassage(id=p.id, title=p.title, version=p.version) for p in former],
        passage_max_tokens=prompts.passage_max_tokens,
    )


@router.get("/api/classrooms/{classroom_id}", responses=errors(*CLASS))
async def classroom_detail(classroom: OwnClassroom, store: StoreDep, prompts: PromptsDep) -> ClassroomDetail:
    """The class, its passages (each with its text) and the one pupils see, and the passages its questions
    name that have left its list (edited or deleted)."""
    return await _detail(store, prompts, classroom)


@router.patch("/api/classrooms/{classroom_id}", responses=errors(*CLASS, *JSON_BODY))
async def update_classroom(body: UpdateClassroom, classroom: OwnClassroom, store: StoreDep) -> ClassroomOut:
    """Rename; close and reopen (a closed class takes no new pupils and no questions); archive and restore (an
    archived class is closed to pupils whatever `is_open` says, and listed apart)."""
    updated = classroom.changed(name=body.name, is_open=body.is_open, archived=body.archived)
    await store.save_classroom(updated)
    return ClassroomOut.of(updated)


@router.delete("/api/classrooms/{classroom_id}", status_code=204, responses=errors(*CLASS, *WRITE))
async def delete_classroom(classroom: OwnClassroom, store: StoreDep, services: ServicesDep) -> None:
    """Delete the class for good: its code, passages, questions and answers, and those archived past the
    school's retention. There is no undo (the page asks first); archiving keeps everything instead."""
    await store.delete_classroom(classroom)
    await asyncio.to_thread(services.archive.delete, classroom.id)


def _added(passage: Passage, prompts: Prompts, published: bool) -> PassageAdded:
    return PassageAdded(
        id=passage.id,
        title=passage.title,
        tokens=passage.tokens,
        max_tokens=prompts.passage_max_tokens,
        version=passage.version,
        published=published,
    )


@router.post("/api/classrooms/{classroom_id}/passages", status_code=201, responses=errors(*CLASS, *JSON_BODY))
async def add_passage(
    body: AddPassage, classroom: OwnClassroom, passages: PassagesDep, prompts: PromptsDep
) -> PassageAdded:
    """Add a pasted passage. Pupils see it once it is published: at once with `publish`, else later
    (`PUT .../active-passage`)."""
    added = await passages.add(classroom.id, body.title, body.text, publish=body.publish)
    return _added(added, prompts, body.publish)


@router.post("/api/classrooms/{classroom_id}/passages/upload", status_code=201, responses=errors(*CLASS, 400, 403, 413))
async def upload_passage(
    classroom: OwnClassroom,
    passages: PassagesDep,
    prompts: PromptsDep,
    file: Annotated[UploadFile, File(description=".txt, .md, .docx or .pdf")],
    title: Annotated[str, Form(description="else the document's own title, else the file's name")] = "",
    publish: Annotated[bool, Form(description="true: pupils see it at once")] = False,
) -> PassageAdded:
    """Add a passage from a file. Its title: the one given, else the document's own (a Word document's or
    PDF's title, a Markdown file's first `# ` heading), else the file's name without its extension."""
    added = await passages.add_upload(classroom.id, file.filename or "passage.txt", file.read, title, publish=publish)
    return _added(added, prompts, publish)


@router.put("/api/classrooms/{classroom_id}/passages/{passage_id}", responses=errors(*CLASS, *JSON_BODY))
async def edit_passage(
    passage_id: str, body: EditPassage, classroom: OwnClassroom, passages: PassagesDep, prompts: PromptsDep
) -> PassageAdded:
    """A new version of the passage (a new id) takes its place in the list, and pupils see it if they saw
    the old one; the old one is kept for the questions asked about it."""
    edited, published = await passages.edit(classroom.id, passage_id, body.title, body.text)
    return _added(edited, prompts, published)


@router.delete(
    "/api/classrooms/{classroom_id}/passages/{passage_id}", status_code=204, responses=errors(*CLASS, *WRITE, 409)
)
async def delete_passage(passage_id: str, classroom: OwnClassroom, passages: PassagesDep) -> None:
    """Take a passage out of the class's list; not the one pupils see (publish another first). The questions
    asked about it keep it."""
    await passages.delete(classroom.id, passage_id)


@router.put("/api/classrooms/{classroom_id}/active-passage", responses=errors(*CLASS, *JSON_BODY))
async def choose_active_passage(
    body: ChooseActivePassage, classroom: OwnClassroom, store: StoreDep, passages: PassagesDep, prompts: PromptsDep
) -> ClassroomDetail:
    """Publish a passage of the class's list: the one pupils see and ask about from now on."""
    await passages.choose_active(classroom.id, body.passage_id)
    return await _detail(store, prompts, classroom)


@router.get("/api/classrooms/{classroom_id}/pupils", responses=errors(*CLASS))
async def class_pupils(classroom: OwnClassroom, store: StoreDep) -> PupilList:
    """The names the class's pupils joined with, as teachers see them ("Ada (2)" for a second Ada), by name."""
    roster = sorted(await store.roster(classroom.id), key=lambda entry: (entry[0].lower(), entry[1]))
    return PupilList(pupils=[RosterPupil(name=n, number=k, label=pupil_label(n, k)) for n, k in roster])


# More than any class asks; Redis's ranges are 64-bit integers, which a larger offset would overflow.
MOST_QUESTIONS_SKIPPED = 10**9


@router.get("/api/classrooms/{classroom_id}/questions", responses=errors(*CLASS))
async def list_questions(
    classroom: OwnClassroom,
    store: StoreDep,
    pupil: Annotated[
        str | None,
        Query(
            description="a pupil as teachers see them ('Ada (2)'), or part of a name: every pupil whose name holds "
            "it, any case"
        ),
    ] = None,
    passage_id: Annotated[str | None, Query(description="only questions about this passage")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=MOST_QUESTIONS_SKIPPED)] = 0,
) -> QuestionList:
    """The classroom's questions with answers, usage and timings, newest first."""
    questions = await store.list_questions(
        classroom.id, limit=limit, offset=offset, pupil_name=pupil, passage_id=passage_id
    )
    return QuestionList(questions=[TeacherQuestion.of(q) for q in questions])


@router.get("/api/classrooms/{classroom_id}/stats", responses=errors(*CLASS))
async def classroom_stats(
    classroom: OwnClassroom,
    store: StoreDep,
    window_s: Annotated[int, Query(ge=60, le=7 * 24 * 3600, description="seconds back from now")] = 3600,
) -> figures.Figures:
    """The class's time to first token (p50, p95) and cache hit ratio over the window (default: an hour)."""
    until = time.time()
    return figures.figures(await store.questions_between(until - window_s, until, classroom.id))


@router.get(
    "/api/classrooms/{classroom_id}/questions.csv",
    response_class=CsvResponse,
    responses={
        200: {"description": "UTF-8 with a byte-order mark: a header row, then one row a question"},
        **errors(*CLASS, json_route=False),
    },
)
async def export_questions(classroom: OwnClassroom, store: StoreDep, settings: SettingsDep) -> CsvResponse:
    """Every question of the classroom kept in the store (those past the school's retention are in
    `archive.csv`), newest first, for a spreadsheet: UTF-8 with a byte-order mark (for Excel), times in the
    school's time zone and in UTC."""
    file = QuestionsCsv(await _passages_by_id(store, classroom.id), settings.school.zone)
    return CsvResponse(
        file.pieces(store.question_pages(classroom.id, EXPORT_PAGE)),
        headers={"Content-Disposition": attachment(f"{classroom.name or 'class'}-questions.csv")},
    )


@router.get(
    "/api/classrooms/{classroom_id}/archive.csv",
    response_class=CsvResponse,
    responses={
        200: {"description": "as questions.csv: a header row, then one row an archived question"},
        **errors(*CLASS, json_route=False),
    },
)
async def export_archive(classroom: OwnClassroom, store: StoreDep, services: ServicesDep) -> CsvResponse:
    """The class's questions archived past the school's retention (`school.retention_days`) and no longer in
    its list, newest first, in the columns of `questions.csv` (a header alone if none were archived)."""
    file = QuestionsCsv(await _passages_by_id(store, classroom.id), services.settings.school.zone)
    return CsvResponse(
        file.pieces(services.archive.pages(classroom.id, EXPORT_PAGE)),
        headers={"Content-Disposition": attachment(f"{classroom.name or 'class'}-archived-questions.csv")},
    )


@functools.lru_cache(maxsize=256)
def _question_event(published: bytes) -> bytes:
    """A question's event as every open page of its class sends it, made once for them all: the pages of a
    process share each published message, and 200 open pages must not read and write it 200 times."""
    record = QuestionRecord.model_validate_json(published)
    return sse_event(b"question", TeacherQuestion.of(record).model_dump_json().encode())


async def _passages_by_id(store: Store, classroom_id: str) -> dict[str, Passage]:
    """Every passage the class's questions may name: those in its list and those edited or deleted."""
    return {p.id: p for p in [*await store.former_passages(classroom_id), *await store.list_passages(classroom_id)]}


@router.get(
    "/api/classrooms/{classroom_id}/events",
    response_class=EventStream,
    status_code=200,
    responses={
        200: event_stream_documented(
            "`event: question`, the question as the teacher sees it, when asked and when answered"
        ),
        **errors(*STORE, *CLASS, json_route=False),
    },
)
async def live_questions(classroom: OwnClassroom, store: StoreDep, services: ServicesDep) -> EventStream:
    """Server-Sent Events: each question as it is asked, and again when its answer ends."""

    async def events() -> AsyncGenerator[bytes]:
        async for published in store.classroom_events(classroom.id):
            yield _question_event(published)

    answer = services.settings.answer
    return EventStream(
        events(),
        keepalive_s=answer.keepalive_s,
        draining=services.draining,
        opening=page_retry(answer.page_reconnect_max_s),
    )
