"""The classes as this service process last read them, for the questions' hot path.

A question needs its class (is it open?), the active passage and that passage's system message. Reading
them from Redis for every question would cost a round trip and the parsing of a whole passage; this cache
keeps them with the version that every write to a class bumps (`store.Keys.class_version`), and a
question's admission refuses a stale version (`Admission("stale")`), so what a question is asked against
is never out of date: a stale entry costs one more read, never a wrong answer.
"""

from dataclasses import dataclass

from service.prompting import Prompts
from service.records import Classroom, Passage
from service.store import ClassState, Store

# Classes a process keeps (a school district's worth); the oldest read go first.
REMEMBERED_CLASSES = 5_000


@dataclass(frozen=True)
class CachedClass:
    version: int
    classroom: Classroom
    passage: Passage | None
    # The active passage's system message, rendered once: byte-identical for every pupil of the class.
    system_message: str | None


class ClassCache:
    def __init__(self, store: Store, prompts: Prompts) -> None:
        self._store = store
        self._prompts = prompts
        self._entries: dict[str, CachedClass] = {}

    async def get(self, classroom_id: str) -> CachedClass:
        cached = self._entries.get(classroom_id)
        return cached if cached is not None else await self.reload(classroom_id)

    async def reload(self, classroom_id: str) -> CachedClass:
        cached = self._cached(await self._store.class_state(classroom_id))
        self._entries.pop(classroom_id, None)
        if len(self._entries) >= REMEMBERED_CLASSES:
            del self._entries[next(iter(self._entries))]
        self._entries[classroom_id] = cached
        return cached

    def _cached(self, state: ClassState) -> CachedClass:
        passage = state.passage
        system = None if passage is None else self._prompts.system_message(passage.title, passage.text)
        return CachedClass(state.version, state.classroom, passage, system)
