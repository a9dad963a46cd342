"""Passages of a classroom: added within the token budget, published (one of them active for the pupils),
edited as new versions and deleted; the questions asked about one keep it."""

from service.backends.warmup import Warmup
from service.classroom.prompting import Prompts
from service.errors import PassageNotFound
from service.records import Passage
from service.store import Store
from service.store.ids import new_id


class Passages:
    def __init__(self, store: Store, prompts: Prompts, warmup: Warmup | None) -> None:
        self._store = store
        self._prompts = prompts
        self._warmup = warmup

    async def add(self, classroom_id: str, title: str, text: str, *, publish: bool) -> Passage:
        """Store a passage that fits the budget; `publish`: make it the one pupils ask about, at once."""
        title, text = title.strip(), text.strip()
        tokens = self._prompts.check_passage(title, text)
        passage = Passage(id=new_id(), classroom_id=classroom_id, title=title, text=text, tokens=tokens)
        await self._store.add_passage(passage, publish=publish)
        if publish:
            self._activated(passage)
        return passage

    async def edit(self, classroom_id: str, passage_id: str, title: str, text: str) -> tuple[Passage, bool]:
        """A new version of a passage of the class's list, in its place (the old one stays stored for its
        questions); the one pupils see if the old one was. Returns it, and whether pupils see it."""
        old = await self._get(classroom_id, passage_id)
        title, text = title.strip(), text.strip()
        tokens = self._prompts.check_passage(title, text)
        new = Passage(
            id=new_id(),
            classroom_id=classroom_id,
            title=title,
            text=text,
            tokens=tokens,
            version=old.version + 1,
            previous_id=old.id,
        )
        published = await self._store.replace_passage(old, new)
        if published:
            self._activated(new)
        return new, published

    async def delete(self, classroom_id: str, passage_id: str) -> None:
        """Out of the class's list (not the one pupils see); stored still for the questions asked about it."""
        await self._get(classroom_id, passage_id)
        await self._store.remove_passage(classroom_id, passage_id)

    async def choose_active(self, classroom_id: str, passage_id: str) -> Passage:
        passage = await self._get(classroom_id, passage_id)
        await self._store.set_active_passage(classroom_id, passage_id)
        self._activated(passage)
        return passage

    async def _get(self, classroom_id: str, passage_id: str) -> Passage:
        passage = await self._store.get_passage(passage_id)
        if passage is None or passage.classroom_id != classroom_id:
            raise PassageNotFound()
        return passage

    def _activated(self, passage: Passage) -> None:
        if self._warmup is not None:
            self._warmup.passage_activated(passage)
