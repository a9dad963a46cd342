"""Answers in flight in this process, and the pages that follow them.

An answer is written by a task of its own (`answer_stream.AnswerStream.run`), whatever its pupil's connection
does: each read of vLLM's stream appends its text to the answer's `LiveAnswer` and wakes whoever waits for
more. A pupil's connection (the question's own stream, or a page that came back) only follows it: `follow`
sends what was said after a character offset, then each piece as it comes, then the end. Closing the
connection ends the following, never the answer.

Across processes: the writing task stores the text so far in the question's record every
`answer.progress_s`, so a page that comes back to another process follows the stored record instead
(`follow_stored`), and a pupil's Stop reaches the process that writes the answer through a channel every
process listens to (`LiveAnswers`), with a key its progress writes check should a message be missed.

The hot path: per read of the stream, `LiveAnswer.add` is an append, an addition and, when a follower waits,
one future set; no lock, no task, no Redis call.
"""

import asyncio
import logging
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from redis.exceptions import RedisError

from service.records import STOPPED, QuestionRecord, QuestionStatus
from service.store import Store
from service.tasks import every, stop_tasks

log = logging.getLogger(__name__)

# The service process shut down while the answer was being written (its text so far is kept).
INTERRUPTED = "The answer was cut short because the service restarted. Please ask again."
# The record says the answer was cut short but not why (never expected: every way out stores a sentence).
CUT_SHORT = "The answer was cut short. Please ask again."


@dataclass(frozen=True, slots=True)
class Queued:
    """The question waits for its turn: `place` questions (this one included) have theirs before it starts."""

    place: int


@dataclass(frozen=True, slots=True)
class Said:
    """`text` more of the answer; `offset` is the answer's length in characters after it."""

    text: str
    offset: int


@dataclass(frozen=True, slots=True)
class Ended:
    """The answer's final record; `message` is None if it was answered, else what the pupil is told."""

    record: QuestionRecord
    message: str | None


Followed = Queued | Said | Ended


class LiveAnswer:
    """One answer being written in this process: its text so far, its place in line while it waits, its end."""

    __slots__ = (
        "_ended",
        "_loop",
        "_waiters",
        "cut_reason",
        "end",
        "parts",
        "place",
        "record",
        "storing",
        "task",
        "writing",
    )

    def __init__(self, record: QuestionRecord) -> None:
        self.record = record
        self.parts: list[str] = []
        self.place = 0
        self.end: Ended | None = None
        self.cut_reason: str | None = None
        # The writing task, and whether it is writing (it may be cancelled: not before it runs, nor once it
        # stores the end).
        self.task: asyncio.Task[None] | None = None
        self.writing = False
        self.storing = False
        self._loop = asyncio.get_running_loop()
        self._waiters: list[asyncio.Future[None]] = []
        self._ended: asyncio.Future[Ended] = self._loop.create_future()

    # The writer's side

    def add(self, text: str) -> None:
        """More text: once per read of vLLM's stream."""
        self.parts.append(text)
        if self._waiters:
            self._wake()

    def in_line(self, place: int) -> None:
        self.place = place
        self._wake()

    def finish(self, end: Ended) -> None:
        self.end = end
        self.place = 0
        if not self._ended.done():
            self._ended.set_result(end)
        self._wake()

    def _wake(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()

    # Anyone's side

    def text(self) -> str:
        return "".join(self.parts)

    def changed(self) -> asyncio.Future[None]:
        """Resolved at the next change (more text, a new place in line, the end). A follower that goes away
        while it waits cancels its own future only."""
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._waiters.append(waiter)
        return waiter

    async def ended(self) -> Ended:
        return await asyncio.shield(self._ended)

    def cut(self, reason: str) -> bool:
        """End the answer now (`reason`: what the pupil is told): its writer closes vLLM's stream, which aborts
        the request, and stores the text so far. False if it has ended, is storing its end, or is being cut."""
        if self.end is not None or self.cut_reason is not None or self.storing:
            return False
        self.cut_reason = reason
        if self.task is not None and self.writing:
            self.task.cancel()
        return True


async def follow(live: LiveAnswer, after: int = 0) -> AsyncGenerator[Followed]:
    """What `live` says after `after` characters: at once all of it said so far (one `Said`), then each piece
    as it comes (or all that came while the follower was still sending the last), then its `Ended`."""
    parts = live.parts
    place = 0
    sent = 0  # parts passed on
    total = 0  # their characters
    while True:
        if len(parts) > sent:
            text = parts[sent] if len(parts) == sent + 1 else "".join(parts[sent:])
            sent = len(parts)
            total += len(text)
            if total > after:
                if total - len(text) < after:
                    text = text[len(text) - (total - after) :]
                after = total
                yield Said(text, total)
            continue
        if live.end is not None:
            yield live.end
            return
        if live.place != place:
            place = live.place
            if place:
                yield Queued(place)
            continue
        await live.changed()


def stored_end(record: QuestionRecord) -> Ended:
    """The end of an answer as its stored record tells it."""
    if record.status == QuestionStatus.ANSWERED:
        return Ended(record, None)
    return Ended(record, record.error or CUT_SHORT)


async def follow_stored(store: Store, record: QuestionRecord, after: int, poll_s: float) -> AsyncGenerator[Followed]:
    """An answer another process writes (or one that ended), followed through its stored record: the text
    after `after` characters, then what its writer stores every `answer.progress_s`, then its end."""
    said = after
    while True:
        text = record.answer
        if len(text) > said:
            yield Said(text[said:], len(text))
            said = len(text)
        if record.status != QuestionStatus.ANSWERING:
            yield stored_end(record)
            return
        await asyncio.sleep(poll_s)
        found = await store.get_question(record.id)
        if found is None:  # deleted meanwhile: never by the service itself
            yield Ended(record, CUT_SHORT)
            return
        record = found


class LiveAnswers:
    """The answers this process writes, by question id, the channel on which a Stop reaches them, and their
    writers' heartbeat: every third of `lease_s`, one round trip renews the lease of each (`Store.renew_leases`),
    which keeps it from being swept as abandoned and holds its pupil's one-at-a-time claim."""

    def __init__(self, store: Store, lease_s: int) -> None:
        self._store = store
        self._lease_s = lease_s
        self._answers: dict[str, LiveAnswer] = {}
        self.begun = 0  # answers added since start-up: a burst that came and went between two looks is seen
        self._listener: asyncio.Task[None] | None = None
        self._heartbeat: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._answers)

    def get(self, question_id: str) -> LiveAnswer | None:
        return self._answers.get(question_id)

    def add(self, live: LiveAnswer) -> None:
        self._answers[live.record.id] = live
        self.begun += 1

    def remove(self, question_id: str) -> None:
        self._answers.pop(question_id, None)

    async def start(self) -> None:
        self._listener = asyncio.create_task(self._listen())
        # Redis down: the next beat renews; a lease outlasts a restart of Redis.
        self._heartbeat = asyncio.create_task(
            every(self._lease_s / 3, self.renew, log, "renewing the answers' leases", (RedisError,))
        )

    async def close(self) -> None:
        """At shutdown: every answer still being written ends now, stored cut short with its text so far."""
        await stop_tasks(self._listener, self._heartbeat)
        answers = list(self._answers.values())
        for live in answers:
            live.cut(INTERRUPTED)
        await asyncio.gather(*(live.task for live in answers if live.task is not None), return_exceptions=True)

    async def renew(self) -> int:
        """One beat: the lease of every answer this process writes renewed; how many were still being written."""
        answers = [(live.record.id, live.record.pupil_id) for live in self._answers.values()]
        return await self._store.renew_leases(answers, self._lease_s)

    async def _listen(self) -> None:
        while True:
            try:
                async for question_id in self._store.answer_stops():
                    live = self._answers.get(question_id)
                    if live is not None:
                        live.cut(STOPPED)
            except Exception as exc:  # Redis went away: the answers' progress writes see a stop meanwhile
                log.warning("lost the stops' channel (%s); listening again in a second", exc)
                await asyncio.sleep(1.0)
