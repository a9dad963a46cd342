"""Pupils: their sessions, and the names they joined a class with (numbered, so that two Adas differ)."""

from datetime import timedelta

from service.records import PupilSession, pupil_label
from service.store.base import StoreBase, text
from service.store.ids import new_token
from service.store.keys import Keys


class PupilStore(StoreBase):
    async def start_pupil_session(self, session: PupilSession, lifetime: timedelta) -> str:
        token = new_token()
        await self.redis.set(Keys.pupil_session(token), session.model_dump_json(), ex=lifetime)
        return token

    async def join_pupil(self, session: PupilSession, lifetime: timedelta) -> tuple[str, PupilSession]:
        """Start a pupil's session with their number among the class's pupils of the same name (any case):
        HINCRBY hands each number out once, however many join at the same moment."""
        name = session.name.strip().lower()
        number = int(await self.redis.hincrby(Keys.pupil_numbers(session.classroom_id), name, 1))
        session = session.model_copy(update={"pupil_number": number})
        token = new_token()
        async with self.redis.pipeline(transaction=True) as tx:
            tx.set(Keys.pupil_session(token), session.model_dump_json(), ex=lifetime)
            tx.hset(Keys.pupils(session.classroom_id), f"{number}:{name}", session.name)
            await tx.execute()
        return token, session

    async def roster(self, classroom_id: str) -> list[tuple[str, int]]:
        """The names the class's pupils joined with, each with its number: ("Ada", 1), ("ada", 2)."""
        entries = await self.redis.hgetall(Keys.pupils(classroom_id))
        return [(text(typed), int(text(field).split(":", 1)[0])) for field, typed in entries.items()]

    async def pupil_of_session(self, token: str) -> PupilSession | None:
        raw = await self.redis.get(Keys.pupil_session(token))
        return None if raw is None else PupilSession.model_validate_json(raw)

    async def end_pupil_session(self, token: str) -> None:
        await self.redis.delete(Keys.pupil_session(token))

    async def matching_pupils(self, classroom_id: str, typed: str) -> list[tuple[str, int]]:
        """The class's pupils `typed` names: the one (or ones) whose name as teachers see it ("Ada (2)") it
        is, any case; else every pupil whose name holds it."""
        wanted = typed.strip().lower()
        labelled = [(pupil_label(name, n).lower(), name, n) for name, n in await self.roster(classroom_id)]
        exact = [(name, n) for label, name, n in labelled if label == wanted]
        return exact or [(name, n) for label, name, n in labelled if wanted in label]
