"""Passages of a classroom: added within the token budget, one of them active for the pupils."""

from service.errors import PassageNotFound
from service.prompting import Prompts
from service.records import Passage
from service.store import Store, new_id
from service.warmup import Warmup


class Passages:
    def __init__(self, store: Store, prompts: Prompts, warmup: Warmup | None) -> None:
        self._store = store
        self._prompts = prompts
        self._warmup = warmup

    async def add(self, classroom_id: str, title: str, text: str) -> Passage:
        """Store a passage that fits the budget and make it the one pupils ask about."""
        title, text = title.strip(), text.strip()
        tokens = self._prompts.check_passage(title, text)
        passage = Passage(id=new_id(), classroom_id=classroom_id, title=title, text=text, tokens=tokens)
        await self._store.add_passage(passage)
        self._activated(passage)
        return passage

    async def choose_active(self, classroom_id: str, passage_id: str) -> Passage:
        passage = await self._store.get_passage(passage_id)
        if passage is None or passage.classroom_id != classroom_id:
            raise PassageNotFound()
        await self._store.set_active_passage(classroom_id, passage_id)
        self._activated(passage)
        return passage

    def _activated(self, passage: Passage) -> None:
        if self._warmup is not None:
            self._warmup.passage_activated(passage)
