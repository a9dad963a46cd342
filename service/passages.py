"""Passages of a classroom: added within the token budget, one of them active for the pupils."""

from service.errors import PassageNotFound
from service.prompting import Prompts
from service.records import Passage
from service.store import Store, new_id


async def add_passage(store: Store, prompts: Prompts, classroom_id: str, title: str, text: str) -> Passage:
    """Store a passage that fits the budget and make it the one pupils ask about."""
    title, text = title.strip(), text.strip()
    tokens = prompts.check_passage(title, text)
    passage = Passage(id=new_id(), classroom_id=classroom_id, title=title, text=text, tokens=tokens)
    await store.add_passage(passage)
    return passage


async def choose_active(store: Store, classroom_id: str, passage_id: str) -> Passage:
    passage = await store.get_passage(passage_id)
    if passage is None or passage.classroom_id != classroom_id:
        raise PassageNotFound()
    await store.set_active_passage(classroom_id, passage_id)
    return passage
