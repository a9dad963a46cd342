"""What retention reads and removes: a class's questions asked before a moment, oldest first, and those
questions taken out of the store with every index that lists them, once they are archived."""

from collections.abc import AsyncIterator

from service.records import QuestionRecord
from service.store.base import StoreBase, texts
from service.store.keys import Keys


class ArchiveStore(StoreBase):
    async def classroom_ids(self, batch: int = 500) -> AsyncIterator[str]:
        """Every classroom's id, `batch` at a time (SSCAN: Redis is never held by one long reply)."""
        async for raw in self.redis.sscan_iter(Keys.classrooms(), count=batch):
            yield raw.decode() if isinstance(raw, bytes) else str(raw)

    async def questions_asked_before(self, classroom_id: str, before: float, limit: int) -> list[QuestionRecord]:
        """The class's oldest questions asked before `before` (epoch s), at most `limit`, oldest first."""
        ids = texts(await self.redis.zrangebyscore(Keys.questions(classroom_id), "-inf", f"({before}", 0, limit))
        raws = await self.redis.mget([Keys.question(i) for i in ids]) if ids else []
        return [QuestionRecord.model_validate_json(raw) for raw in raws if raw is not None]

    async def remove_questions(self, records: list[QuestionRecord]) -> None:
        """Take the questions (archived) out of the store, their records and every index, in one transaction."""
        async with self.redis.pipeline(transaction=True) as tx:
            for r in records:
                tx.delete(Keys.question(r.id), Keys.answer_stop(r.id))
                for index in (
                    Keys.questions(r.classroom_id),
                    Keys.questions_by_name(r.classroom_id, r.pupil, r.pupil_number),
                    Keys.passage_questions(r.passage_id),
                    Keys.pupil_questions(r.pupil_id),
                    Keys.recent_questions(),
                    Keys.answering(),
                ):
                    tx.zrem(index, r.id)
            await tx.execute()

    async def claim_retention_sweep(self, seconds: float) -> bool:
        """True for the one process that sweeps for the next `seconds` (the others leave it to that one)."""
        return bool(await self.redis.set(Keys.retention_sweep(), "1", nx=True, px=max(1, int(seconds * 1000))))
