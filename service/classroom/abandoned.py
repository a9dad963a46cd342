"""Answers nobody will finish: their process was killed mid-answer, or Redis was down when it ended.

Every admitted question is indexed until its final record is stored (`Keys.answering`), by when its writer's
lease lapses: the process that writes it renews the lease every third of `answer.writer_lease_s`
(`LiveAnswers`). One whose lease lapsed is stored cut short, with what the pupil is told, so that no record
says "answering" forever and a pupil whose answer's process died may ask again within a lease.
Each process sweeps; the store's compare and set makes a record finished once, and leaves it alone if its
own process finished it after all.
"""

import asyncio
import logging
import time

from redis.exceptions import RedisError

from service.records import QuestionStatus, utcnow
from service.store import Store
from service.tasks import every, stop_tasks

log = logging.getLogger(__name__)

ABANDONED = "The answer was cut short because the service was interrupted while writing it. Please ask again."


class AbandonedAnswers:
    def __init__(self, store: Store, lease_s: float) -> None:
        self._store = store
        # As often as the leases are renewed: a record is finished within a third of a lease after it lapsed.
        self.every_s = lease_s / 3
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        # Redis down: the next sweep finds the same records.
        self._task = asyncio.create_task(
            every(self.every_s, self.sweep, log, "sweeping abandoned answers", (RedisError,))
        )

    async def close(self) -> None:
        await stop_tasks(self._task)

    async def sweep(self, now: float | None = None) -> int:
        """Finish every abandoned answer once; how many this call finished."""
        finished = 0
        for stored, record in await self._store.abandoned_answers(time.time() if now is None else now):
            cut = record.model_copy(
                update={"status": QuestionStatus.INCOMPLETE, "error": ABANDONED, "finished_at": utcnow()}
            )
            if await self._store.abandon_answer(stored, cut):
                log.warning("answer %s of class %s abandoned: stored cut short", record.id, record.classroom_id)
                finished += 1
        return finished
