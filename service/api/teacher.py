"""Teachers: classrooms, their passages, and what their pupils asked."""

from fastapi import APIRouter, Query

from service.api.schemas import AddPassage, ClassroomCreated, CreateClassroom, PassageAdded, QuestionList
from service.deps import PromptsDep, StoreDep
from service.records import Passage
from service.store import new_id

router = APIRouter(prefix="/api/classrooms", tags=["teacher"])


@router.post("", status_code=201)
async def create_classroom(body: CreateClassroom, store: StoreDep) -> ClassroomCreated:
    classroom = await store.create_classroom(body.name)
    return ClassroomCreated(id=classroom.id, name=classroom.name, join_code=classroom.join_code)


@router.post("/{classroom_id}/passages", status_code=201)
async def add_passage(classroom_id: str, body: AddPassage, store: StoreDep, prompts: PromptsDep) -> PassageAdded:
    """Add a passage; the newest passage is the one pupils ask about."""
    await store.get_classroom(classroom_id)
    tokens = prompts.check_passage(body.title, body.text)
    passage = Passage(id=new_id(), classroom_id=classroom_id, title=body.title, text=body.text, tokens=tokens)
    await store.add_passage(passage)
    return PassageAdded(id=passage.id, tokens=tokens, max_tokens=prompts.passage_max_tokens)


@router.get("/{classroom_id}/questions")
async def list_questions(
    classroom_id: str,
    store: StoreDep,
    limit: int = Query(100, ge=1, le=1000),
    offset: int = Query(0, ge=0),
) -> QuestionList:
    """The classroom's questions with answers, usage and timings, newest first."""
    await store.get_classroom(classroom_id)
    return QuestionList(questions=await store.list_questions(classroom_id, limit, offset))
