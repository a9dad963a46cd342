"""The classes as this service process last read them, for the questions' hot path.

A question needs its class (is it open?), the passage it is asked about and that passage's system message.
Reading them from Redis for every question would cost a round trip and the parsing of a whole passage; this
cache keeps them with the version that every write to a class bumps (`store.Keys.class_version`), and a
question's admission refuses a stale version (`Admission("stale")`), so what a question is asked against
is never out of date: a stale entry costs one more read, never a wrong answer.

A question is asked about the active passage, or about another passage of the class that the pupil was
still reading when the teacher published a new one. Passages never change once stored (an edit is a new
passage), so their system messages are kept by passage id.
"""

from dataclasses import dataclass
from typing import TypeVar

from service.classroom.prompting import Prompts
from service.records import Classroom, Passage
from service.store import ClassState, Store

# Classes a process keeps (a school district's worth); the oldest read go first.
REMEMBERED_CLASSES = 5_000
# Passages other than the active ones kept with their system messages (pupils who read the one before).
REMEMBERED_PASSAGES = 1_000

V = TypeVar("V")


@dataclass(frozen=True)
class CachedClass:
    version: int
    classroom: Classroom
    passage: Passage | None
    # The active passage's system message, rendered once: byte-identical for every pupil of the class.
    system_message: str | None
    # Every passage of the class at this version (the active one among them).
    passage_ids: frozenset[str]


class ClassCache:
    def __init__(self, store: Store, prompts: Prompts) -> None:
        self._store = store
        self._prompts = prompts
        self._entries: dict[str, CachedClass] = {}
        self._passages: dict[str, tuple[Passage, str]] = {}

    async def get(self, classroom_id: str) -> CachedClass:
        cached = self._entries.get(classroom_id)
        return cached if cached is not None else await self.reload(classroom_id)

    async def fresh(self, classroom_id: str) -> CachedClass:
        """The class as stored now: what is kept if its version is still the stored one (one small read), else
        read again."""
        cached = self._entries.get(classroom_id)
        if cached is not None and cached.version == await self._store.class_version(classroom_id):
            return cached
        return await self.reload(classroom_id)

    async def reload(self, classroom_id: str) -> CachedClass:
        cached = self._cached(await self._store.class_state(classroom_id))
        _remember(self._entries, classroom_id, cached, REMEMBERED_CLASSES)
        return cached

    async def passage(self, cached: CachedClass, passage_id: str) -> tuple[Passage, str] | None:
        """A passage of the class as `cached` holds it, with its system message; None if it is not one of the
        class's passages (any more)."""
        if cached.passage is not None and cached.system_message is not None and passage_id == cached.passage.id:
            return cached.passage, cached.system_message
        if passage_id not in cached.passage_ids:
            return None
        found = self._passages.get(passage_id)
        if found is None:
            passage = await self._store.get_passage(passage_id)
            if passage is None:
                return None
            found = passage, self._prompts.system_message(passage.title, passage.text)
            _remember(self._passages, passage_id, found, REMEMBERED_PASSAGES)
        return found

    def _cached(self, state: ClassState) -> CachedClass:
        passage = state.passage
        system = None if passage is None else self._prompts.system_message(passage.title, passage.text)
        return CachedClass(state.version, state.classroom, passage, system, state.passage_ids)


def _remember(entries: dict[str, V], key: str, value: V, most: int) -> None:
    """Keep `value` as the newest entry; the oldest goes once there are `most`."""
    entries.pop(key, None)
    if len(entries) >= most:
        del entries[next(iter(entries))]
    entries[key] = value
