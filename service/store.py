"""All state, in Redis. This module owns every key name; values are JSON of the models in `records`.

Keys:
    cls:{id}                  Classroom
    joincode:{code}           classroom id
    cls:{id}:passages         list of passage ids, oldest first
    cls:{id}:active_passage   passage id that pupils ask about
    passage:{id}              Passage
    q:{id}                    QuestionRecord
    cls:{id}:questions        sorted set of question ids, scored by time asked
"""

import secrets
import uuid
from collections.abc import Iterable
from typing import Any

from redis.asyncio import Redis

from service.errors import ClassroomNotFound
from service.records import Classroom, Passage, QuestionRecord

# Easy to read aloud: no 0/O, 1/I/L. 31^8 codes, so guessing one is hopeless.
JOIN_CODE_ALPHABET = "23456789ABCDEFGHJKMNPQRSTUVWXYZ"
JOIN_CODE_LENGTH = 8


class Keys:
    @staticmethod
    def classroom(classroom_id: str) -> str:
        return f"cls:{classroom_id}"

    @staticmethod
    def join_code(code: str) -> str:
        return f"joincode:{code}"

    @staticmethod
    def passages(classroom_id: str) -> str:
        return f"cls:{classroom_id}:passages"

    @staticmethod
    def active_passage(classroom_id: str) -> str:
        return f"cls:{classroom_id}:active_passage"

    @staticmethod
    def passage(passage_id: str) -> str:
        return f"passage:{passage_id}"

    @staticmethod
    def question(question_id: str) -> str:
        return f"q:{question_id}"

    @staticmethod
    def questions(classroom_id: str) -> str:
        return f"cls:{classroom_id}:questions"


def _text(value: Any) -> str:
    """Redis replies are bytes; ids and keys are ASCII text."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _texts(values: Iterable[Any]) -> list[str]:
    return [_text(v) for v in values]


def new_id() -> str:
    return uuid.uuid4().hex


def new_join_code() -> str:
    code = "".join(secrets.choice(JOIN_CODE_ALPHABET) for _ in range(JOIN_CODE_LENGTH))
    return f"{code[:4]}-{code[4:]}"


class Store:
    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    async def create_classroom(self, name: str) -> Classroom:
        classroom_id = new_id()
        while True:
            classroom = Classroom(id=classroom_id, name=name, join_code=new_join_code())
            async with self.redis.pipeline(transaction=True) as tx:
                # NX: a join code is never handed out twice; on a clash the next try rewrites the classroom.
                tx.set(Keys.join_code(classroom.join_code), classroom.id, nx=True)
                tx.set(Keys.classroom(classroom.id), classroom.model_dump_json())
                claimed, _ = await tx.execute()
            if claimed:
                return classroom

    async def get_classroom(self, classroom_id: str) -> Classroom:
        raw = await self.redis.get(Keys.classroom(classroom_id))
        if raw is None:
            raise ClassroomNotFound(classroom_id)
        return Classroom.model_validate_json(raw)

    async def add_passage(self, passage: Passage) -> None:
        """Store the passage and make it the classroom's active one."""
        async with self.redis.pipeline(transaction=True) as tx:
            tx.set(Keys.passage(passage.id), passage.model_dump_json())
            tx.rpush(Keys.passages(passage.classroom_id), passage.id)
            tx.set(Keys.active_passage(passage.classroom_id), passage.id)
            await tx.execute()

    async def get_passage(self, passage_id: str) -> Passage | None:
        raw = await self.redis.get(Keys.passage(passage_id))
        return None if raw is None else Passage.model_validate_json(raw)

    async def active_passage(self, classroom_id: str) -> Passage | None:
        passage_id = await self.redis.get(Keys.active_passage(classroom_id))
        return None if passage_id is None else await self.get_passage(_text(passage_id))

    async def list_passages(self, classroom_id: str) -> list[Passage]:
        ids = _texts(await self.redis.lrange(Keys.passages(classroom_id), 0, -1))
        if not ids:
            return []
        raws = await self.redis.mget([Keys.passage(i) for i in ids])
        return [Passage.model_validate_json(raw) for raw in raws if raw is not None]

    async def add_question(self, record: QuestionRecord) -> None:
        async with self.redis.pipeline(transaction=True) as tx:
            tx.set(Keys.question(record.id), record.model_dump_json())
            tx.zadd(Keys.questions(record.classroom_id), {record.id: record.asked_at.timestamp()})
            await tx.execute()

    async def save_question(self, record: QuestionRecord) -> None:
        await self.redis.set(Keys.question(record.id), record.model_dump_json())

    async def get_question(self, question_id: str) -> QuestionRecord | None:
        raw = await self.redis.get(Keys.question(question_id))
        return None if raw is None else QuestionRecord.model_validate_json(raw)

    async def list_questions(self, classroom_id: str, limit: int, offset: int = 0) -> list[QuestionRecord]:
        """Newest first."""
        ids = _texts(await self.redis.zrevrange(Keys.questions(classroom_id), offset, offset + limit - 1))
        if not ids:
            return []
        raws = await self.redis.mget([Keys.question(i) for i in ids])
        return [QuestionRecord.model_validate_json(raw) for raw in raws if raw is not None]
