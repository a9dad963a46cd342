"""Open pupil pages told when their class changes: a passage published, the class closed or reopened.

Every write to a class publishes its id on one channel (`store.Keys.classes_changed`). Each service process
listens to it once for all of its open pupil pages; on a change of a class that some of them watch, it reads
the class again once (which also brings the questions' path its new version) and wakes those pages. A page that
opens reads only the class's version (the cached class serves it if that is current), and what a page is sent is
made once for all of the process's pages of the class: an open page holds no copy of its class.
"""

import asyncio
import logging
from collections.abc import AsyncGenerator, Callable

from service.classroom.class_cache import CachedClass, ClassCache
from service.errors import ClassroomNotFound
from service.store import Store
from service.tasks import stop_tasks

log = logging.getLogger(__name__)


class _Watched:
    """A class some of the process's pages watch: how many, the event its next change sets (one for all of them),
    and what they were last sent."""

    __slots__ = ("changed", "pages", "rendered")

    def __init__(self) -> None:
        self.pages = 0
        self.changed = asyncio.Event()
        self.rendered: tuple[CachedClass | None, bytes] | None = None


class ClassNotices:
    def __init__(self, store: Store, classes: ClassCache) -> None:
        self._store = store
        self._classes = classes
        self._watched: dict[str, _Watched] = {}
        self._listener: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._listener = asyncio.create_task(self._listen())

    async def close(self) -> None:
        await stop_tasks(self._listener)

    async def rendered(self, classroom_id: str, render: Callable[[CachedClass | None], bytes]) -> AsyncGenerator[bytes]:
        """The class as `render` makes it, now and after each change, until the consumer stops; `render(None)`,
        and the end, once the class is gone. Made once for all of the process's pages of the class (one call and
        one copy a change), and sent again only when that changed."""
        watched = self._watched.get(classroom_id)
        if watched is None:
            watched = self._watched[classroom_id] = _Watched()
        watched.pages += 1
        shown: bytes | None = None
        try:
            changed = watched.changed  # taken before the class is read: a change while it is read wakes it again
            try:
                cached: CachedClass | None = await self._classes.fresh(classroom_id)
            except ClassroomNotFound:
                cached = None
            while True:
                made = watched.rendered
                if made is None or made[0] is not cached:
                    made = watched.rendered = (cached, render(cached))
                if made[1] != shown:
                    shown = made[1]
                    yield shown
                if cached is None:
                    return
                await changed.wait()
                changed = watched.changed
                try:
                    cached = await self._classes.get(classroom_id)  # read again once by `_changed`
                except ClassroomNotFound:
                    cached = None
        finally:
            watched.pages -= 1
            if watched.pages == 0 and self._watched.get(classroom_id) is watched:
                del self._watched[classroom_id]

    async def _changed(self, classroom_id: str) -> None:
        watched = self._watched.get(classroom_id)
        if watched is None:
            return
        try:
            await self._classes.reload(classroom_id)
        except ClassroomNotFound:
            pass  # each watcher finds it gone
        woken, watched.changed = watched.changed, asyncio.Event()
        woken.set()

    async def _listen(self) -> None:
        missed = False
        while True:
            try:
                if missed:  # changes while the channel was lost went unheard: look at every watched class
                    for classroom_id in list(self._watched):
                        await self._changed(classroom_id)
                async for classroom_id in self._store.class_changes():
                    await self._changed(classroom_id)
            except Exception as exc:  # Redis went away
                log.warning("lost the classes' channel (%s); listening again in a second", exc)
                missed = True
                await asyncio.sleep(1.0)
