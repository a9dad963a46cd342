"""Questions: admitted (or refused) and indexed in one step, their answers' progress, stops and end, their
turns on a replica, those abandoned by a process that died, and the lists that read them back."""

import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

from redis.asyncio import Redis

from service.records import QuestionRecord, QuestionStatus
from service.store.base import text, texts
from service.store.ids import new_id
from service.store.keys import Keys
from service.store.pupils import PupilStore
from service.store.scripts import ABANDON, ADMIT, FINISH, PROGRESS, REFUSE, RENEW, TURN_PLACE
from service.store.stats import adding
from service.store.subscriptions import TooSlow

# How far back operators' figures reach: the recent-questions index keeps a day.
RECENT_S = 24 * 3600


@dataclass(frozen=True)
class RateLimit:
    """At most `most` questions admitted per pupil within any `window_s` seconds."""

    most: int
    window_s: int = 60


@dataclass(frozen=True)
class Admission:
    """What the admission of a question decided."""

    outcome: Literal["ok", "queued", "full", "no_session", "stale", "busy", "limited"]
    retry_after_s: float = 0.0
    # Queued: how many questions will have their turn before this one, plus one.
    place: int = 0


@dataclass(frozen=True, slots=True)
class TurnLine:
    """Where a question takes its turn: the replica's line, kept at most `bound` running."""

    replica: str
    bound: int
    most_waiting: int
    lapses_s: float

    def keys(self) -> list[str]:
        return [Keys.turns_running(self.replica), Keys.turns_classes(self.replica)]

    def args(self, classroom_id: str, now: float) -> list[str | float]:
        prefix = Keys.turns_waiting_prefix(self.replica)
        return [self.bound, prefix, classroom_id, now, now + self.lapses_s, Keys.turns_granted()]


class QuestionStore(PupilStore):
    """Built on `PupilStore`: a list narrowed to a pupil finds them by the names of the class's roster."""

    def __init__(self, redis: Redis) -> None:
        super().__init__(redis)
        self._admit = redis.register_script(ADMIT)
        self._finish = redis.register_script(FINISH)
        self._refuse = redis.register_script(REFUSE)
        self._turn_place = redis.register_script(TURN_PLACE)
        self._abandon = redis.register_script(ABANDON)
        self._progress = redis.register_script(PROGRESS)
        self._renew = redis.register_script(RENEW)

    async def admit_question(
        self,
        session_token: str,
        record: QuestionRecord,
        class_version: int,
        rate: RateLimit,
        lease_s: int,
        line: TurnLine | None = None,
    ) -> Admission:
        """Admit and store a pupil's question in one atomic step (ADMIT says what it checks); its writer's
        lease (`renew_leases`) lasts `lease_s` from now."""
        asked = record.asked_at.timestamp()
        keys = [
            Keys.pupil_session(session_token),
            Keys.class_version(record.classroom_id),
            Keys.pupil_answering(record.pupil_id),
            Keys.pupil_asked(record.pupil_id),
            *self._record_keys(record),
            *(line.keys() if line else Keys.no_turns()),
            Keys.answering(),
        ]
        args: list[str | float] = [class_version, asked, rate.window_s, rate.most, lease_s]
        args += [record.model_dump_json(), record.id, asked, asked - RECENT_S]
        if line:
            args += [line.bound, line.most_waiting, asked + line.lapses_s, Keys.turns_waiting_prefix(line.replica)]
            args += [record.classroom_id, Keys.turns_granted()]
        else:
            args += [0, 0, 0, "", "", ""]
        outcome, *rest = await self._admit(keys=keys, args=args)
        decided = text(outcome)
        if decided == "limited":
            return Admission("limited", retry_after_s=float(rest[0]) + rate.window_s - asked)
        if decided == "queued":
            return Admission("queued", place=int(rest[0]))
        return Admission(decided)  # type: ignore[arg-type]  # the script answers only the outcomes named

    async def refuse_question(self, record: QuestionRecord) -> None:
        """Store a question that was not taken, where the class's questions are, and count it in the operators'
        figures (once: not if it was stored already)."""
        asked = record.asked_at.timestamp()
        stats_keys, stats_args = adding(record)
        args: list[str | float] = [record.model_dump_json(), record.id, asked, asked - RECENT_S, *stats_args]
        await self._refuse(keys=[*self._record_keys(record), *stats_keys], args=args)

    async def finish_question(self, record: QuestionRecord, line: TurnLine | None = None) -> None:
        """Store a question's final record, tell the teacher's page, let the pupil ask again, and give its turn
        on `line` (taken or waited for) to the next in line; count it in the operators' figures if its stored record
        was still being answered (once, however many times this runs)."""
        keys = [Keys.question(record.id), Keys.events(record.classroom_id), Keys.pupil_answering(record.pupil_id)]
        args: list[str | float] = [record.model_dump_json(), record.id]
        stats_keys, stats_args = adding(record)
        turns = line.keys() if line else Keys.no_turns()
        args += line.args(record.classroom_id, time.time()) if line else [0, "", "", 0, 0, ""]
        await self._finish(keys=[*keys, *turns, Keys.answering(), *stats_keys], args=[*args, *stats_args])

    async def renew_leases(self, answers: list[tuple[str, str]], lease_s: int) -> int:
        """The heartbeat of a process's writers: the lease of each answer (question id, pupil id) renewed for
        `lease_s` from now, in one round trip; how many were still being written."""
        if not answers:
            return 0
        args: list[str | float] = [time.time() + lease_s, lease_s]
        for question_id, pupil_id in answers:
            args += [question_id, Keys.pupil_answering(pupil_id)]
        return int(await self._renew(keys=[Keys.answering()], args=args))

    async def abandoned_answers(self, now: float, limit: int = 100) -> list[tuple[str, QuestionRecord]]:
        """Questions still being written after they must have ended: each record as stored (the exact JSON,
        for `abandon_answer`'s compare and set) and read, oldest first."""
        ids = texts(await self.redis.zrangebyscore(Keys.answering(), "-inf", now, start=0, num=limit))
        raws = await self.redis.mget([Keys.question(i) for i in ids]) if ids else []
        found = [(text(raw), QuestionRecord.model_validate_json(raw)) for raw in raws if raw is not None]
        writing = [(raw, record) for raw, record in found if record.status == QuestionStatus.ANSWERING]
        if done := set(ids) - {record.id for _, record in writing}:  # deleted, or finished after all
            await self.redis.zrem(Keys.answering(), *done)
        return writing

    async def abandon_answer(self, stored: str, finished: QuestionRecord) -> bool:
        """Store `finished` in place of the record stored as `stored`, if that is still what is stored (its
        own process may have finished it after all), and count it in the operators' figures; False if it changed."""
        stats_keys, stats_args = adding(finished)
        keys = [Keys.question(finished.id), Keys.events(finished.classroom_id), Keys.answering(), *stats_keys]
        args = [stored, finished.model_dump_json(), finished.id, *stats_args]
        return bool(await self._abandon(keys=keys, args=args))

    async def store_progress(self, record: QuestionRecord) -> bool:
        """Store an answer's text so far (`record`, still answering), unless it has ended meanwhile; True if
        its pupil asked to stop it."""
        keys = [Keys.question(record.id), Keys.answer_stop(record.id)]
        return bool(await self._progress(keys=keys, args=[record.model_dump_json()]))

    async def request_stop(self, question_id: str, keep_s: int) -> None:
        """Ask whichever process writes the answer to stop it: at once through the channel, and through a key
        its next progress write finds, should the message be missed."""
        async with self.redis.pipeline(transaction=True) as tx:
            tx.set(Keys.answer_stop(question_id), "1", ex=keep_s)
            tx.publish(Keys.answer_stops(), question_id)
            await tx.execute()

    def answer_stops(self) -> AsyncIterator[str]:
        """Ids of questions whose pupil asked to stop the answer, as they ask, until the consumer stops."""
        return self._published(Keys.answer_stops(), text)

    async def turn_place(self, line: TurnLine, classroom_id: str, question_id: str) -> int:
        """0 once the question's turn has come (or it waits in no line), else its place in line."""
        now = time.time()
        prefix, channel = Keys.turns_waiting_prefix(line.replica), Keys.turns_granted()
        args: list[str | float] = [question_id, prefix, classroom_id, line.bound, now, now + line.lapses_s, channel]
        return int(await self._turn_place(keys=line.keys(), args=args))

    def turns_granted(self) -> AsyncIterator[str]:
        """Ids of questions whose turn has come, as turns are given, until the consumer stops."""
        return self._published(Keys.turns_granted(), text)

    @staticmethod
    def _record_keys(record: QuestionRecord) -> list[str]:
        return [
            Keys.question(record.id),
            Keys.questions(record.classroom_id),
            Keys.questions_by_name(record.classroom_id, record.pupil, record.pupil_number),
            Keys.passage_questions(record.passage_id),
            Keys.pupil_questions(record.pupil_id),
            Keys.recent_questions(),
            Keys.events(record.classroom_id),
        ]

    async def get_question(self, question_id: str) -> QuestionRecord | None:
        raw = await self.redis.get(Keys.question(question_id))
        return None if raw is None else QuestionRecord.model_validate_json(raw)

    async def list_questions(
        self,
        classroom_id: str,
        *,
        limit: int,
        offset: int = 0,
        pupil_name: str | None = None,
        passage_id: str | None = None,
    ) -> list[QuestionRecord]:
        """Newest first; narrowed to the pupils `pupil_name` names (`matching_pupils`) and/or one passage."""
        indexes = [Keys.questions(classroom_id)]
        if passage_id:
            indexes.append(Keys.passage_questions(passage_id))
        names: list[str] = []
        if pupil_name and pupil_name.strip():  # spaces alone name no one in particular: no filter
            names = [Keys.questions_by_name(classroom_id, pupil_name)]  # also a name joined before numbering
            names += [
                Keys.questions_by_name(classroom_id, n, k)
                for n, k in await self.matching_pupils(classroom_id, pupil_name)
            ]
        if len(indexes) == 1 and not names:
            ids = await self.redis.zrevrange(indexes[0], offset, offset + limit - 1)
        else:
            ids = await self._combined(indexes, sorted(set(names)), offset, limit)
        return await self._questions(texts(ids))

    async def _combined(self, indexes: list[str], names: list[str], offset: int, limit: int) -> list[Any]:
        # The pupils' indexes united, then intersected with the others: sorted-set operations keep the time
        # order; the result lives for this one transaction.
        scratch = Keys.scratch(new_id())
        async with self.redis.pipeline(transaction=True) as tx:
            if names:
                tx.zunionstore(scratch, names, aggregate="MAX")
                tx.zinterstore(scratch, [scratch, *indexes], aggregate="MAX")
            else:
                tx.zinterstore(scratch, indexes, aggregate="MAX")
            tx.zrevrange(scratch, offset, offset + limit - 1)
            tx.delete(scratch)
            *_, ids, _ = await tx.execute()
        return list(ids)

    async def question_pages(self, classroom_id: str, page: int) -> AsyncIterator[list[QuestionRecord]]:
        """Every question of the class, newest first, `page` at a time (a round trip each): a class's whole
        history is never read at once. Ranks are counted from the oldest, so the questions asked meanwhile (at
        the top) move none of those still to read: each is read once, and the new ones not at all."""
        index = Keys.questions(classroom_id)
        end = int(await self.redis.zcard(index))
        while end > 0:
            start = max(0, end - page)
            ids = texts(await self.redis.zrange(index, start, end - 1))
            yield (await self._questions(ids))[::-1]
            end = start

    async def pupil_questions(self, pupil_id: str, limit: int) -> list[QuestionRecord]:
        """One pupil's own questions, newest first."""
        return await self._questions(texts(await self.redis.zrevrange(Keys.pupil_questions(pupil_id), 0, limit - 1)))

    async def _questions(self, ids: list[str]) -> list[QuestionRecord]:
        raws = await self.redis.mget([Keys.question(i) for i in ids]) if ids else []
        return [QuestionRecord.model_validate_json(raw) for raw in raws if raw is not None]

    async def classroom_events(self, classroom_id: str) -> AsyncIterator[bytes]:
        """Questions of the classroom as they are asked and answered (each record's JSON as published: the same
        object for every page of the process, which reads it once), until the consumer stops; they end early
        should the consumer fall behind (a page whose client stopped reading), which then reads the list again."""
        with contextlib.suppress(TooSlow):
            async for published in self.subscriptions.messages(Keys.events(classroom_id)):
                yield published

    async def questions_between(
        self, since: float, until: float, classroom_id: str | None = None
    ) -> list[QuestionRecord]:
        """Questions asked in [since, until] (epoch seconds), oldest first: of one classroom, or of all
        in the last day."""
        index = Keys.questions(classroom_id) if classroom_id else Keys.recent_questions()
        return await self._questions(texts(await self.redis.zrangebyscore(index, since, until)))

    async def question_counts(self, classroom_ids: list[str]) -> list[int]:
        """How many questions each class has, in one round trip (the indexes' sizes; no record is read)."""
        async with self.redis.pipeline(transaction=False) as batch:
            for classroom_id in classroom_ids:
                batch.zcard(Keys.questions(classroom_id))
            return [int(n) for n in await batch.execute()]
