"""Classrooms: each one, its join code, its teacher's list, the version every write to the class bumps (with
its passages, `passages.py`), and its deletion with all it holds."""

from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from service.errors import ClassroomNotFound
from service.records import Classroom, Passage, QuestionRecord
from service.store.base import StoreBase, text, texts
from service.store.ids import new_id, new_join_code, normalize_join_code
from service.store.keys import Keys
from service.store.scripts import CLASS_STATE

# A deleted class's version key outlives it this long, so that a process holding the class sees it changed.
DELETED_VERSION_S = 24 * 3600
# Records read at once when a class is deleted.
DELETE_BATCH = 500


@dataclass(frozen=True)
class ClassState:
    """A class as one atomic read found it, with the version that every write to it bumps."""

    version: int
    classroom: Classroom
    passage: Passage | None
    passage_ids: frozenset[str]


def class_changed(tx: Pipeline, classroom_id: str) -> None:
    """Every write to a class goes with this, in its transaction: the version that admissions check moves on,
    and every service process hears which class changed (its open pupils' pages are told)."""
    tx.incr(Keys.class_version(classroom_id))
    tx.publish(Keys.classes_changed(), classroom_id)


class ClassStore(StoreBase):
    def __init__(self, redis: Redis) -> None:
        super().__init__(redis)
        self._class_state = redis.register_script(CLASS_STATE)

    async def create_classroom(self, teacher_id: str, name: str) -> Classroom:
        classroom_id = new_id()
        while True:
            classroom = Classroom(id=classroom_id, teacher_id=teacher_id, name=name, join_code=new_join_code())
            async with self.redis.pipeline(transaction=True) as tx:
                # NX: a join code is never handed out twice; on a clash the next try rewrites the classroom.
                tx.set(Keys.join_code(classroom.join_code), classroom.id, nx=True)
                tx.set(Keys.classroom(classroom.id), classroom.model_dump_json())
                tx.zadd(Keys.teacher_classrooms(teacher_id), {classroom.id: classroom.created_at.timestamp()})
                tx.sadd(Keys.classrooms(), classroom.id)
                claimed, *_ = await tx.execute()
            if claimed:
                return classroom

    async def get_classroom(self, classroom_id: str) -> Classroom:
        raw = await self.redis.get(Keys.classroom(classroom_id))
        if raw is None:
            raise ClassroomNotFound(classroom_id)
        return Classroom.model_validate_json(raw)

    async def save_classroom(self, classroom: Classroom) -> None:
        async with self.redis.pipeline(transaction=True) as tx:
            tx.set(Keys.classroom(classroom.id), classroom.model_dump_json())
            class_changed(tx, classroom.id)
            await tx.execute()

    async def class_state(self, classroom_id: str) -> ClassState:
        keys = [
            Keys.class_version(classroom_id),
            Keys.classroom(classroom_id),
            Keys.active_passage(classroom_id),
            Keys.passages(classroom_id),
        ]
        version, classroom, passage, passage_ids = await self._class_state(keys=keys, args=[Keys.passage("")])
        if classroom is None:
            raise ClassroomNotFound(classroom_id)
        return ClassState(
            version=int(version),
            classroom=Classroom.model_validate_json(classroom),
            passage=None if passage is None else Passage.model_validate_json(passage),
            passage_ids=frozenset(texts(passage_ids)),
        )

    async def class_version(self, classroom_id: str) -> int:
        """The version every write to the class bumps (0 for a class never written), as `class_state` reads it."""
        return int(await self.redis.get(Keys.class_version(classroom_id)) or 0)

    def class_changes(self) -> AsyncIterator[str]:
        """Ids of classes as they change (`class_changed`), for every class, until the consumer stops."""
        return self._published(Keys.classes_changed(), text)

    async def classroom_by_join_code(self, code: str) -> Classroom | None:
        classroom_id = await self.redis.get(Keys.join_code(normalize_join_code(code)))
        return None if classroom_id is None else await self.get_classroom(text(classroom_id))

    async def teacher_classrooms(self, teacher_id: str) -> list[Classroom]:
        """Newest first."""
        ids = texts(await self.redis.zrevrange(Keys.teacher_classrooms(teacher_id), 0, -1))
        raws = await self.redis.mget([Keys.classroom(i) for i in ids]) if ids else []
        return [Classroom.model_validate_json(raw) for raw in raws if raw is not None]

    async def delete_classroom(self, classroom: Classroom) -> None:
        """Remove the class and all it holds: its join code, passages, questions and their indexes, its
        pupils' names and histories, and its place in the lists of classes. Pupils' sessions expire on
        their own (their class no longer answers). Watched, so a question asked meanwhile goes too."""
        cid = classroom.id

        async def delete(tx: Pipeline) -> None:
            question_ids = texts(await tx.zrange(Keys.questions(cid), 0, -1))
            passage_ids = texts(await tx.lrange(Keys.passages(cid), 0, -1))
            passage_ids += texts(await tx.lrange(Keys.former_passages(cid), 0, -1))
            names = texts(await tx.hkeys(Keys.pupils(cid)))
            doomed = {Keys.questions_by_name(cid, n.split(":", 1)[1], int(n.split(":", 1)[0])) for n in names}
            for start in range(0, len(question_ids), DELETE_BATCH):
                batch = question_ids[start : start + DELETE_BATCH]
                for raw in await tx.mget([Keys.question(i) for i in batch]):
                    if raw is not None:
                        record = QuestionRecord.model_validate_json(raw)
                        doomed.add(Keys.questions_by_name(cid, record.pupil, record.pupil_number))
                        doomed.add(Keys.pupil_questions(record.pupil_id))
                doomed.update(Keys.question(i) for i in batch)
            for passage_id in passage_ids:
                doomed.update((Keys.passage(passage_id), Keys.passage_questions(passage_id)))
                doomed.add(Keys.warmed(passage_id))
            doomed.update((Keys.classroom(cid), Keys.join_code(classroom.join_code), Keys.passages(cid)))
            doomed.update((Keys.former_passages(cid), Keys.active_passage(cid), Keys.questions(cid)))
            doomed.update((Keys.pupils(cid), Keys.pupil_numbers(cid)))
            tx.multi()  # type: ignore[no-untyped-call]
            tx.delete(*doomed)
            if question_ids:
                tx.zrem(Keys.recent_questions(), *question_ids)
                tx.zrem(Keys.answering(), *question_ids)
            tx.srem(Keys.classrooms(), cid)
            tx.zrem(Keys.teacher_classrooms(classroom.teacher_id), cid)
            class_changed(tx, cid)
            tx.expire(Keys.class_version(cid), DELETED_VERSION_S)
            await tx.execute()

        await self._watching(
            [Keys.questions(cid), Keys.passages(cid), Keys.former_passages(cid), Keys.pupils(cid)], delete
        )

    async def classrooms(self, classroom_ids: Iterable[str]) -> dict[str, Classroom]:
        """The classrooms of these ids that exist, in one round trip."""
        ids = sorted(set(classroom_ids))
        raws = await self.redis.mget([Keys.classroom(i) for i in ids]) if ids else []
        return {i: Classroom.model_validate_json(raw) for i, raw in zip(ids, raws, strict=True) if raw is not None}

    async def all_classrooms(self) -> list[Classroom]:
        ids = sorted(texts(await self.redis.smembers(Keys.classrooms())))
        raws = await self.redis.mget([Keys.classroom(i) for i in ids]) if ids else []
        return [Classroom.model_validate_json(raw) for raw in raws if raw is not None]

    async def active_passages_by_recency(self, limit: int) -> list[Passage]:
        """The open classes' active passages, the class used last first (its newest question, or the
        passage's own creation if newer): a class that asked this morning is likelier to ask again than one
        idle since last term. Three round trips to Redis, however many classes."""
        open_ids = [c.id for c in await self.all_classrooms() if c.is_open and c.archived_at is None]
        async with self.redis.pipeline(transaction=False) as batch:
            for cid in open_ids:
                batch.get(Keys.active_passage(cid))
                batch.zrevrange(Keys.questions(cid), 0, 0, withscores=True)
            replies = await batch.execute()
        asked: dict[str, float] = {}  # active passage id -> when its class last asked
        for passage_id, newest in zip(replies[::2], replies[1::2], strict=True):
            if passage_id is not None:
                asked[text(passage_id)] = float(newest[0][1]) if newest else 0.0
        raws = await self.redis.mget([Keys.passage(i) for i in asked]) if asked else []
        passages = [Passage.model_validate_json(raw) for raw in raws if raw is not None]
        passages.sort(key=lambda p: max(asked[p.id], p.created_at.timestamp()), reverse=True)
        return passages[:limit]
