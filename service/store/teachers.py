"""Teachers, their sessions, and the failed attempts to sign in or join that slow a client down."""

from collections.abc import Iterable
from datetime import timedelta

from service.records import Teacher
from service.store.base import StoreBase, text
from service.store.ids import new_token
from service.store.keys import Keys


class AccountStore(StoreBase):
    # Teachers and their sessions

    async def add_teacher(self, teacher: Teacher) -> bool:
        """False if a teacher with that email exists already."""
        if not await self.redis.set(Keys.teacher_email(teacher.email), teacher.id, nx=True):
            return False
        await self.redis.set(Keys.teacher(teacher.id), teacher.model_dump_json())
        return True

    async def teacher_by_email(self, email: str) -> Teacher | None:
        teacher_id = await self.redis.get(Keys.teacher_email(email))
        return None if teacher_id is None else await self.get_teacher(text(teacher_id))

    async def get_teacher(self, teacher_id: str) -> Teacher | None:
        raw = await self.redis.get(Keys.teacher(teacher_id))
        return None if raw is None else Teacher.model_validate_json(raw)

    async def teachers(self, teacher_ids: Iterable[str]) -> dict[str, Teacher]:
        """The teachers of these ids that exist, in one round trip."""
        ids = sorted(set(teacher_ids))
        raws = await self.redis.mget([Keys.teacher(i) for i in ids]) if ids else []
        return {i: Teacher.model_validate_json(raw) for i, raw in zip(ids, raws, strict=True) if raw is not None}

    async def start_teacher_session(self, teacher_id: str, lifetime: timedelta) -> str:
        token = new_token()
        await self.redis.set(Keys.teacher_session(token), teacher_id, ex=lifetime)
        return token

    async def teacher_of_session(self, token: str) -> Teacher | None:
        teacher_id = await self.redis.get(Keys.teacher_session(token))
        return None if teacher_id is None else await self.get_teacher(text(teacher_id))

    async def end_teacher_session(self, token: str) -> None:
        await self.redis.delete(Keys.teacher_session(token))

    # Failed attempts, counted per client in Redis so that every service process counts alike

    async def failed_attempts(self, kind: str, client: str) -> tuple[int, int]:
        """How many `kind` attempts (join, sign_in) of a client failed in its current window, and the
        seconds left of that window."""
        key = Keys.failed_attempts(kind, client)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.get(key)
            pipe.ttl(key)
            count, ttl = await pipe.execute()
        return int(count or 0), max(int(ttl), 1)

    async def add_failed_attempt(self, kind: str, client: str, window_s: int) -> None:
        """One more failure; the window starts with the first (a fixed window, kept in Redis so that every
        service process counts the same client alike)."""
        key = Keys.failed_attempts(kind, client)
        async with self.redis.pipeline(transaction=True) as tx:
            tx.incr(key)
            tx.expire(key, window_s, nx=True)
            await tx.execute()
