"""Open pupil pages told when their class changes: a passage published, the class closed or reopened.

Every write to a class publishes its id on one channel (`store.Keys.classes_changed`). Each service process
listens to it once for all of its open pupil pages; on a change of a class that some of them watch, it reads
the class again once (which also brings the questions' path its new version) and wakes those pages.
"""

import asyncio
import logging
from collections.abc import AsyncGenerator

from service.classroom.class_cache import CachedClass, ClassCache
from service.errors import ClassroomNotFound
from service.store import Store
from service.tasks import stop_tasks

log = logging.getLogger(__name__)


class ClassNotices:
    def __init__(self, store: Store, classes: ClassCache) -> None:
        self._store = store
        self._classes = classes
        self._watchers: dict[str, set[asyncio.Event]] = {}
        self._listener: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._listener = asyncio.create_task(self._listen())

    async def close(self) -> None:
        await stop_tasks(self._listener)

    async def watch(self, classroom_id: str) -> AsyncGenerator[CachedClass | None]:
        """The class as it is now, then again after each change, until the consumer stops; None, and the end,
        once the class is gone."""
        woken = asyncio.Event()
        self._watchers.setdefault(classroom_id, set()).add(woken)
        try:
            try:
                cached = await self._classes.reload(classroom_id)
                while True:
                    yield cached
                    await woken.wait()
                    woken.clear()
                    cached = await self._classes.get(classroom_id)  # read again once by `_changed`
            except ClassroomNotFound:
                yield None
        finally:
            watchers = self._watchers.get(classroom_id)
            if watchers is not None:
                watchers.discard(woken)
                if not watchers:
                    del self._watchers[classroom_id]

    async def _changed(self, classroom_id: str) -> None:
        if classroom_id not in self._watchers:
            return
        try:
            await self._classes.reload(classroom_id)
        except ClassroomNotFound:
            pass  # each watcher finds it gone
        for woken in self._watchers.get(classroom_id, ()):
            woken.set()

    async def _listen(self) -> None:
        missed = False
        while True:
            try:
                if missed:  # changes while the channel was lost went unheard: look at every watched class
                    for classroom_id in list(self._watchers):
                        await self._changed(classroom_id)
                async for classroom_id in self._store.class_changes():
                    await self._changed(classroom_id)
            except Exception as exc:  # Redis went away
                log.warning("lost the classes' channel (%s); listening again in a second", exc)
                missed = True
                await asyncio.sleep(1.0)
