"""One pupil question, from arrival to stored answer, with no back-and-forth.

`Answering.ask` checks the question against the class as this process holds it (`ClassCache`), admits and
stores it in one atomic step in Redis before any model call (so nothing is lost; `Store.admit_question`),
and opens the stream on the replica the fleet plans for this passage before the HTTP response starts, so
a dead backend is still a plain 503 (the next replica is tried first). `AnswerStream.events` then turns
vLLM's raw stream into events and, on every way out (finished, failed, cut short because the pupil
left), stores the result and records the metrics.

This is the hot path: every token of every answer passes through `AnswerStream.events`, so it reads the
stream's bytes itself (`vllm_stream.StreamReader`) and passes on at once, as one piece, whatever text a
read brought (the first piece is never held back for the next).
"""

import asyncio
import functools
import itertools
import logging
import math
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import NoReturn

import aiohttp
import anyio
from redis.exceptions import RedisError

from service.accounts import Accounts
from service.classes import ClassCache
from service.errors import (
    WAITED_TOO_LONG,
    AnswerInProgress,
    BackendFailed,
    BackendUnavailable,
    ClassArchived,
    ClassClosed,
    LineFull,
    NoActivePassage,
    PassageGone,
    SessionExpired,
    TooManyQuestions,
    WrongClassroom,
)
from service.fleet import Fleet
from service.metrics import Metrics
from service.prompting import Prompts
from service.records import Passage, QuestionRecord, QuestionStatus, Usage, utcnow
from service.store import RateLimit, Store, TurnLine, new_id
from service.turns import TurnNotInTime, Turns
from service.upstream import ReplicaAnswered, ReplicaNotAnswering, ReplicaRefused, Upstream
from service.vllm_stream import StreamBroke, StreamReader

log = logging.getLogger(__name__)

MIDSTREAM_FAILURE = "The answer was cut short because the answering service stopped. Please ask again."
PUPIL_LEFT = "The pupil left before the answer finished."
NOT_STARTED = "The answer could not be started. Please ask again."
TOO_SLOW = "The answering service took too long to answer. Please ask again in a moment."
NOT_SAVED = (
    "This answer could not be saved: the service lost touch with its store for a moment. "
    "Please ask again in a few seconds."
)
# A class changed this often while one question was being admitted: give up rather than loop.
ADMISSION_ATTEMPTS = 5


@dataclass(frozen=True, slots=True)
class Token:
    text: str


@dataclass(frozen=True, slots=True)
class InLine:
    """The question waits for its turn: `place` questions (this one included) have theirs before it starts."""

    place: int


@dataclass(frozen=True, slots=True)
class Finished:
    record: QuestionRecord


@dataclass(frozen=True, slots=True)
class Failed:
    record: QuestionRecord
    message: str


AnswerEvent = InLine | Token | Finished | Failed


class NotStarted(Exception):
    """The answer could not be started; its record is stored failed already."""

    def __init__(self, record: QuestionRecord, failure: BackendFailed | BackendUnavailable) -> None:
        super().__init__(failure.message)
        self.record = record
        self.failure = failure


Opener = Callable[[QuestionRecord], Awaitable[tuple[QuestionRecord, aiohttp.ClientResponse]]]


@dataclass(slots=True)
class Waiting:
    """A question in line for its turn on `line`; `opener` starts it when the turn comes."""

    places: AsyncGenerator[int]
    opener: Opener


class AnswerStream:
    """An answer in flight, or waiting for its turn. Iterate `events()` once; the record is stored however the
    iteration ends."""

    def __init__(
        self,
        record: QuestionRecord,
        upstream: aiohttp.ClientResponse | Waiting,
        store: Store,
        metrics: Metrics,
        started: float,
        line: TurnLine | None,
    ) -> None:
        self.record = record
        self._upstream = upstream
        self._store = store
        self._metrics: Metrics | None = metrics
        self._started = started
        self._queue_wait_s = time.perf_counter() - started
        self._line = line

    def _elapsed_ms(self) -> float:
        return (time.perf_counter() - self._started) * 1000

    async def events(self) -> AsyncGenerator[AnswerEvent]:
        reader = StreamReader()
        parts: list[str] = []
        token_times: list[float] = []
        finish_reason: str | None = None
        usage: Usage | None = None
        outcome: tuple[QuestionStatus, str | None] | None = None
        try:
            if isinstance(self._upstream, Waiting):
                waiting = self._upstream
                try:
                    async with aclosing(waiting.places) as places:
                        async for place in places:
                            yield InLine(place)
                    self.record, self._upstream = await waiting.opener(self.record)
                except TurnNotInTime:
                    outcome = (QuestionStatus.FAILED, WAITED_TOO_LONG)
                    self.record = self._finish(outcome, parts, token_times, usage, finish_reason)
                    await self._store_end()
                    yield Failed(self.record, WAITED_TOO_LONG)
                    return
                except NotStarted as exc:  # stored and counted failed already
                    outcome = (QuestionStatus.FAILED, exc.failure.message)
                    self.record, self._metrics = exc.record, None
                    yield Failed(self.record, exc.failure.message)
                    return
                self._queue_wait_s = time.perf_counter() - self._started
            upstream = self._upstream
            try:
                async for data in upstream.content.iter_any():
                    piece = reader.feed(data)
                    if piece.tokens:  # the time to first token is the first chunk with tokens, text or not yet
                        token_times.extend(itertools.repeat(time.perf_counter(), piece.tokens))
                    finish_reason = piece.finish_reason or finish_reason
                    usage = piece.usage or usage
                    if piece.text:
                        parts.append(piece.text)
                        yield Token(piece.text)
                if not reader.done:
                    raise StreamBroke("the stream ended before [DONE]")
            except TimeoutError:  # nothing from vLLM for backend.read_timeout_s (aiohttp's sock_read)
                log.warning("answer %s timed out waiting for the backend", self.record.id)
                outcome = (QuestionStatus.INCOMPLETE, TOO_SLOW)
            except Exception:  # the stream broke: the connection cut, a protocol or server error mid-way
                log.warning("answer %s cut short by the backend", self.record.id, exc_info=True)
                outcome = (QuestionStatus.INCOMPLETE, MIDSTREAM_FAILURE)
            else:
                outcome = (QuestionStatus.ANSWERED, None)
            self.record = self._finish(outcome, parts, token_times, usage, finish_reason)
            if not await self._store_end():
                yield Failed(self.record, NOT_SAVED)
            elif outcome[1] is None:
                yield Finished(self.record)
            else:
                yield Failed(self.record, outcome[1])
        finally:
            with anyio.CancelScope(shield=True):
                if outcome is None:
                    # The consumer went away (the pupil closed the page): keep what was said so far.
                    started = not isinstance(self._upstream, Waiting)
                    outcome = (QuestionStatus.INCOMPLETE if started else QuestionStatus.FAILED, PUPIL_LEFT)
                    self.record = self._finish(outcome, parts, token_times, usage, finish_reason)
                    await self._store_end()
                if isinstance(self._upstream, Waiting):
                    pass  # it never started
                elif reader.done:
                    self._upstream.release()  # the connection goes back to the pool
                else:
                    self._upstream.close()  # vLLM aborts a request whose stream is closed
                if self._metrics is not None:
                    gaps = [later - earlier for earlier, later in zip(token_times, token_times[1:], strict=False)]
                    self._metrics.observe(self.record, gaps, self._queue_wait_s)

    async def _store_end(self) -> bool:
        """Store the final record; False if Redis stayed unreachable through the client's retries (the record
        stays "answering" until `service.abandoned` finishes it, its turn and the pupil's lock lapse)."""
        try:
            await self._store.finish_question(self.record, self._line)
        except RedisError as exc:
            log.warning("answer %s ended but could not be stored: %s", self.record.id, exc)
            return False
        return True

    def _finish(
        self,
        outcome: tuple[QuestionStatus, str | None],
        parts: list[str],
        token_times: list[float],
        usage: Usage | None,
        finish_reason: str | None,
    ) -> QuestionRecord:
        status, error = outcome
        return self.record.model_copy(
            update={
                "status": status,
                "error": error,
                "answer": "".join(parts),
                "ttft_ms": (token_times[0] - self._started) * 1000 if token_times else None,
                "total_ms": self._elapsed_ms(),
                "usage": usage,
                "finish_reason": finish_reason,
                "finished_at": utcnow(),
            }
        )

    async def collect(self) -> QuestionRecord:
        """Run the whole stream; for clients that want one JSON body."""
        async with aclosing(self.events()) as events:
            async for event in events:
                if isinstance(event, Failed):
                    raise BackendFailed(event.message)
        return self.record


class Answering:
    def __init__(
        self,
        store: Store,
        prompts: Prompts,
        classes: ClassCache,
        accounts: Accounts,
        fleet: Fleet,
        upstream: Upstream,
        metrics: Metrics,
        turns: Turns,
        *,
        model: str,
        max_tokens: int,
        temperature: float,
        rate: RateLimit,
        longest_answer_s: int,
    ) -> None:
        self._store = store
        self._prompts = prompts
        self._classes = classes
        self._accounts = accounts
        self._fleet = fleet
        self._upstream = upstream
        self._metrics = metrics
        self._turns = turns
        self._model = model
        self._max_tokens = max_tokens
        self._temperature = temperature
        self._rate = rate
        self._longest_answer_s = longest_answer_s

    async def ask(
        self, session_token: str | None, classroom_id: str, question: str, passage_id: str | None = None
    ) -> AnswerStream:
        """Admit, store and start a question about `passage_id` (the passage the pupil was reading; None: the
        active one)."""
        started = time.perf_counter()
        pupil = await self._accounts.asking_pupil(session_token)
        if pupil.classroom_id != classroom_id:
            raise WrongClassroom()
        for attempt in range(ADMISSION_ATTEMPTS):
            version, passage, system_message = await self._open_class(classroom_id, passage_id, stale=attempt > 0)
            if attempt == 0:
                self._prompts.check_question(question)
            variant, replicas = self._fleet.plan(pupil.pupil_id, passage.id)
            record = QuestionRecord(
                id=new_id(),
                classroom_id=classroom_id,
                passage_id=passage.id,
                pupil_id=pupil.pupil_id,
                pupil=pupil.name,
                pupil_number=pupil.pupil_number,
                question=question,
                variant=variant,
                replica=replicas[0] if replicas else None,
            )
            # The turn is taken on the replica planned first, and kept should the question go to the next.
            line = self._turns.line(replicas[0]) if replicas and self._turns.enabled else None
            if line:
                self._turns.expect(record.id)
            admission = await self._store.admit_question(
                session_token or "", record, version, self._rate, self._longest_answer_s, line
            )
            if admission.outcome != "queued":
                self._turns.forget(record.id)
            if admission.outcome != "stale":  # else a teacher changed the class: ask about what it is now
                break
        else:
            raise RuntimeError(f"class {classroom_id} changed {ADMISSION_ATTEMPTS} times while a question waited")
        if admission.outcome == "no_session":
            self._accounts.forget_pupil(session_token or "")
            raise SessionExpired(pupil=True)
        if admission.outcome == "busy":
            raise AnswerInProgress()
        if admission.outcome == "limited":
            raise TooManyQuestions(self._rate.most, max(1, math.ceil(admission.retry_after_s)))
        if admission.outcome == "full":
            await self._refuse(record)
        body = self._prompts.request_body(
            system_message, question, model=self._model, max_tokens=self._max_tokens, temperature=self._temperature
        )
        if admission.outcome == "queued":
            assert line is not None
            places = self._turns.wait(line, classroom_id, record.id, admission.place)
            waiting = Waiting(places, functools.partial(self._start, body=body, replicas=replicas, line=line))
            return AnswerStream(record, waiting, self._store, self._metrics, started, line)
        try:
            record, upstream = await self._start(record, body=body, replicas=replicas, line=line)
        except NotStarted as exc:
            raise exc.failure from None  # stored as failed already
        except BaseException as exc:  # cancelled (the pupil left before the answer began), or a bug
            with anyio.CancelScope(shield=True):
                message = PUPIL_LEFT if isinstance(exc, asyncio.CancelledError) else NOT_STARTED
                await self._fail(record, message, line)
            raise
        return AnswerStream(record, upstream, self._store, self._metrics, started, line)

    async def _open_class(self, classroom_id: str, passage_id: str | None, *, stale: bool) -> tuple[int, Passage, str]:
        """The class a question is asked in, open and with a passage: its version, the passage asked about (the
        pupil's, else the active one) and its system message. What this process holds is enough to admit a
        question (the admission checks the version) but not to refuse one: it is read again first."""
        cached = await (self._classes.reload(classroom_id) if stale else self._classes.get(classroom_id))
        closed = not cached.classroom.is_open or cached.classroom.archived_at is not None
        if not stale and (
            closed or cached.system_message is None or (passage_id is not None and passage_id not in cached.passage_ids)
        ):
            cached = await self._classes.reload(classroom_id)
        if cached.classroom.archived_at is not None:
            raise ClassArchived()
        if not cached.classroom.is_open:
            raise ClassClosed()
        if cached.passage is None or cached.system_message is None:
            raise NoActivePassage()
        found = await self._classes.passage(cached, passage_id or cached.passage.id)
        if found is None:
            raise PassageGone()
        passage, system_message = found
        return cached.version, passage, system_message

    async def _start(
        self, record: QuestionRecord, *, body: bytes, replicas: list[str], line: TurnLine | None
    ) -> tuple[QuestionRecord, aiohttp.ClientResponse]:
        """The first replica of `replicas` that takes the question, and its response once the headers are in;
        else the record is stored failed (`NotStarted`)."""
        failure: BackendFailed | BackendUnavailable = BackendUnavailable()
        tried: str | None = None
        for url in replicas:
            try:
                upstream = await self._upstream.open(url, body)
            except ReplicaNotAnswering as exc:
                # Its health is the prober's call, not one question's (this process may have been late to see
                # the connection): try the next replica.
                log.warning("replica %s did not answer a question (%s); trying the next", url, exc)
                continue
            except ReplicaRefused as exc:  # nothing listens there
                self._fleet.mark_down(url, str(exc))
                continue
            except ReplicaAnswered as exc:
                # vLLM's own words are for operators (the log), not for the pupil who sees the record.
                log.warning("replica %s refused a question of class %s: %s", url, record.classroom_id, exc.message)
                failure, tried = BackendFailed("The answering service refused the question. Please try again."), url
                break
            return record.model_copy(update={"replica": url}), upstream
        failed = await self._fail(record.model_copy(update={"replica": tried}), failure.message, line)
        raise NotStarted(failed, failure)

    async def _fail(self, record: QuestionRecord, message: str, line: TurnLine | None) -> QuestionRecord:
        failed = record.model_copy(update={"status": QuestionStatus.FAILED, "error": message, "finished_at": utcnow()})
        await self._store.finish_question(failed, line)
        self._metrics.observe(failed)
        return failed

    async def _refuse(self, record: QuestionRecord) -> NoReturn:
        """The line was full: the question is stored refused, and the pupil told when to ask again."""
        error = LineFull(self._turns.retry_after_s)
        refused = record.model_copy(
            update={"status": QuestionStatus.REFUSED, "error": error.message, "finished_at": utcnow()}
        )
        await self._store.refuse_question(refused)
        self._metrics.observe(refused)
        raise error
