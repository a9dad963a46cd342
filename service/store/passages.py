"""Passages: each one, its class's list of them (and of those edited or deleted, kept for the questions
asked about them), and the one its pupils ask about. Every change is a write to the class (`class_changed`)."""

from redis.asyncio.client import Pipeline

from service.errors import PassageInUse, PassageNotFound
from service.records import Passage
from service.store.base import StoreBase, text, texts
from service.store.classes import class_changed
from service.store.keys import Keys


class PassageStore(StoreBase):
    async def add_passage(self, passage: Passage, *, publish: bool) -> None:
        """Store the passage in its class's list; `publish`: make it the one pupils see, in the same step."""
        async with self.redis.pipeline(transaction=True) as tx:
            tx.set(Keys.passage(passage.id), passage.model_dump_json())
            tx.rpush(Keys.passages(passage.classroom_id), passage.id)
            if publish:
                tx.set(Keys.active_passage(passage.classroom_id), passage.id)
            class_changed(tx, passage.classroom_id)
            await tx.execute()

    async def replace_passage(self, old: Passage, new: Passage) -> bool:
        """`new` takes `old`'s place in the class's list, and its place as the active one if `old` was it
        (then True); `old` stays stored, for the questions asked about it. PassageNotFound if `old` is no
        longer in the list (deleted or edited meanwhile)."""
        cid = old.classroom_id

        async def replace(tx: Pipeline) -> bool:
            ids = texts(await tx.lrange(Keys.passages(cid), 0, -1))
            active = await tx.get(Keys.active_passage(cid))
            if old.id not in ids:
                raise PassageNotFound()
            was_active = active is not None and text(active) == old.id
            tx.multi()  # type: ignore[no-untyped-call]
            tx.set(Keys.passage(new.id), new.model_dump_json())
            tx.lset(Keys.passages(cid), ids.index(old.id), new.id)
            tx.rpush(Keys.former_passages(cid), old.id)
            if was_active:
                tx.set(Keys.active_passage(cid), new.id)
            class_changed(tx, cid)
            await tx.execute()
            return was_active

        return await self._watching([Keys.passages(cid), Keys.active_passage(cid)], replace)

    async def remove_passage(self, classroom_id: str, passage_id: str) -> None:
        """Take a passage out of the class's list (it stays stored for its questions). Not the active one:
        PassageInUse."""

        async def remove(tx: Pipeline) -> None:
            ids = texts(await tx.lrange(Keys.passages(classroom_id), 0, -1))
            active = await tx.get(Keys.active_passage(classroom_id))
            if passage_id not in ids:
                raise PassageNotFound()
            if active is not None and text(active) == passage_id:
                raise PassageInUse()
            tx.multi()  # type: ignore[no-untyped-call]
            tx.lrem(Keys.passages(classroom_id), 0, passage_id)
            tx.rpush(Keys.former_passages(classroom_id), passage_id)
            class_changed(tx, classroom_id)
            await tx.execute()

        await self._watching([Keys.passages(classroom_id), Keys.active_passage(classroom_id)], remove)

    async def get_passage(self, passage_id: str) -> Passage | None:
        raw = await self.redis.get(Keys.passage(passage_id))
        return None if raw is None else Passage.model_validate_json(raw)

    async def set_active_passage(self, classroom_id: str, passage_id: str) -> None:
        """Publish a passage of the class's list (PassageNotFound if it is not there: edited or deleted)."""

        async def publish(tx: Pipeline) -> None:
            if await tx.lpos(Keys.passages(classroom_id), passage_id) is None:
                raise PassageNotFound()
            tx.multi()  # type: ignore[no-untyped-call]
            tx.set(Keys.active_passage(classroom_id), passage_id)
            class_changed(tx, classroom_id)
            await tx.execute()

        await self._watching([Keys.passages(classroom_id)], publish)

    async def active_passage_id(self, classroom_id: str) -> str | None:
        passage_id = await self.redis.get(Keys.active_passage(classroom_id))
        return None if passage_id is None else text(passage_id)

    async def active_passage(self, classroom_id: str) -> Passage | None:
        passage_id = await self.active_passage_id(classroom_id)
        return None if passage_id is None else await self.get_passage(passage_id)

    async def list_passages(self, classroom_id: str) -> list[Passage]:
        """The class's passages, oldest first."""
        return await self._passages(Keys.passages(classroom_id))

    async def former_passages(self, classroom_id: str) -> list[Passage]:
        """Passages edited (an older version) or deleted, in the order they left the list: still there for
        the questions asked about them."""
        return await self._passages(Keys.former_passages(classroom_id))

    async def _passages(self, key: str) -> list[Passage]:
        ids = texts(await self.redis.lrange(key, 0, -1))
        raws = await self.redis.mget([Keys.passage(i) for i in ids]) if ids else []
        return [Passage.model_validate_json(raw) for raw in raws if raw is not None]
