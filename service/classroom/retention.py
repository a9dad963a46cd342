"""Questions kept for a school's retention (`school.retention_days`, a school year by default), then archived
to a file the teacher can download (`archive.QuestionArchive`) and taken out of the store, so Redis' memory
is bounded by what a district asks within the retention, not by every question ever asked.

Each round (every `school.retention_check_s`) one process sweeps, the one that claims the round in Redis:
class by class, its questions asked before the cut-off, a batch at a time, are written to the archive and
then removed. An answer still being written is left for a later round.
"""

import asyncio
import logging
import time

from redis.exceptions import RedisError

from service.classroom.archive import QuestionArchive
from service.records import QuestionStatus
from service.store import Store
from service.tasks import every, stop_tasks

log = logging.getLogger(__name__)

DAY_S = 24 * 3600


class Retention:
    def __init__(
        self, store: Store, archive: QuestionArchive, *, retention_days: int, every_s: float, batch: int = 500
    ) -> None:
        self._store = store
        self._archive = archive
        self._retention_s = retention_days * DAY_S
        self._every_s = every_s
        self._batch = batch
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        # The next round tries again; nothing is removed unarchived.
        self._task = asyncio.create_task(
            every(self._every_s, self._round, log, "archiving questions past retention", (RedisError, OSError))
        )

    async def close(self) -> None:
        await stop_tasks(self._task)

    async def sweep(self, now: float | None = None) -> int:
        """Archive and remove every question asked before the retention's cut-off: how many."""
        before = (time.time() if now is None else now) - self._retention_s
        archived = 0
        async for classroom_id in self._store.classroom_ids():
            while True:
                found = await self._store.questions_asked_before(classroom_id, before, self._batch)
                done = [r for r in found if r.status != QuestionStatus.ANSWERING]
                if not done:
                    break
                # The file is written in a thread: a batch of a few hundred questions is milliseconds of
                # compression the event loop need not wait for.
                await asyncio.to_thread(self._archive.write, classroom_id, done)
                await self._store.remove_questions(done)
                archived += len(done)
                if len(found) < self._batch or len(done) < len(found):
                    break
        return archived

    async def _round(self) -> None:
        """One process's sweep a round: whichever claims it."""
        if await self._store.claim_retention_sweep(self._every_s) and (archived := await self.sweep()):
            log.info("archived %d questions past the school's retention", archived)
