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
import itertools
import logging
import math
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass

import aiohttp
import anyio
import orjson

from service.accounts import Accounts
from service.classes import ClassCache
from service.errors import (
    AnswerInProgress,
    BackendFailed,
    BackendUnavailable,
    ClassClosed,
    NoActivePassage,
    SessionExpired,
    TooManyQuestions,
    WrongClassroom,
)
from service.fleet import Fleet
from service.metrics import Metrics
from service.prompting import Prompts
from service.records import Passage, QuestionRecord, QuestionStatus, Usage, utcnow
from service.store import RateLimit, Store, new_id
from service.upstream import ReplicaAnswered, ReplicaNotAnswering, ReplicaRefused, Upstream
from service.vllm_stream import StreamBroke, StreamReader

log = logging.getLogger(__name__)

MIDSTREAM_FAILURE = "The answer was cut short because the answering service stopped. Please ask again."
PUPIL_LEFT = "The pupil left before the answer finished."
NOT_STARTED = "The answer could not be started. Please ask again."
TOO_SLOW = "The answering service took too long to answer. Please ask again in a moment."
# A class changed this often while one question was being admitted: give up rather than loop.
ADMISSION_ATTEMPTS = 5


@dataclass(frozen=True, slots=True)
class Token:
    text: str


@dataclass(frozen=True, slots=True)
class Finished:
    record: QuestionRecord


@dataclass(frozen=True, slots=True)
class Failed:
    record: QuestionRecord
    message: str


AnswerEvent = Token | Finished | Failed


class AnswerStream:
    """An answer in flight. Iterate `events()` once; the record is stored however the iteration ends."""

    def __init__(
        self,
        record: QuestionRecord,
        upstream: aiohttp.ClientResponse,
        store: Store,
        metrics: Metrics,
        started: float,
        queue_wait_s: float,
    ) -> None:
        self.record = record
        self._upstream = upstream
        self._store = store
        self._metrics = metrics
        self._started = started
        self._queue_wait_s = queue_wait_s

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
            try:
                async for data in self._upstream.content.iter_any():
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
            await self._store.finish_question(self.record)
            if outcome[1] is None:
                yield Finished(self.record)
            else:
                yield Failed(self.record, outcome[1])
        finally:
            with anyio.CancelScope(shield=True):
                if outcome is None:
                    # The consumer went away (the pupil closed the page): keep what was said so far.
                    outcome = (QuestionStatus.INCOMPLETE, PUPIL_LEFT)
                    self.record = self._finish(outcome, parts, token_times, usage, finish_reason)
                    await self._store.finish_question(self.record)
                if reader.done:
                    self._upstream.release()  # the connection goes back to the pool
                else:
                    self._upstream.close()  # vLLM aborts a request whose stream is closed
                gaps = [later - earlier for earlier, later in zip(token_times, token_times[1:], strict=False)]
                self._metrics.observe(self.record, gaps, self._queue_wait_s)

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
        self._model = model
        self._max_tokens = max_tokens
        self._temperature = temperature
        self._rate = rate
        self._longest_answer_s = longest_answer_s

    async def ask(self, session_token: str | None, classroom_id: str, question: str) -> AnswerStream:
        started = time.perf_counter()
        pupil = await self._accounts.asking_pupil(session_token)
        if pupil.classroom_id != classroom_id:
            raise WrongClassroom()
        for attempt in range(ADMISSION_ATTEMPTS):
            version, passage, system_message = await self._open_class(classroom_id, stale=attempt > 0)
            if attempt == 0:
                self._prompts.check_question(question)
            variant, replicas = self._fleet.plan(pupil.pupil_id, passage.id)
            record = QuestionRecord(
                id=new_id(),
                classroom_id=classroom_id,
                passage_id=passage.id,
                pupil_id=pupil.pupil_id,
                pupil=pupil.name,
                question=question,
                variant=variant,
                replica=replicas[0] if replicas else None,
            )
            admission = await self._store.admit_question(
                session_token or "", record, version, self._rate, self._longest_answer_s
            )
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
        body = orjson.dumps(
            {
                "model": self._model,
                "messages": self._prompts.chat(system_message, question),
                "max_tokens": self._max_tokens,
                "temperature": self._temperature,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
        )
        try:
            return await self._start(record, body, replicas, started)
        except (BackendFailed, BackendUnavailable):
            raise  # stored as failed already
        except BaseException as exc:  # cancelled (the pupil left before the answer began), or a bug
            with anyio.CancelScope(shield=True):
                await self._fail(record, PUPIL_LEFT if isinstance(exc, asyncio.CancelledError) else NOT_STARTED)
            raise

    async def _open_class(self, classroom_id: str, *, stale: bool) -> tuple[int, Passage, str]:
        """The class a question is asked in, open and with a passage: its version, the passage and its system
        message. What this process holds is enough to admit a question (the admission checks the version)
        but not to refuse one: it is read again first."""
        cached = await (self._classes.reload(classroom_id) if stale else self._classes.get(classroom_id))
        if not stale and (not cached.classroom.is_open or cached.system_message is None):
            cached = await self._classes.reload(classroom_id)
        if not cached.classroom.is_open:
            raise ClassClosed()
        if cached.passage is None or cached.system_message is None:
            raise NoActivePassage()
        return cached.version, cached.passage, cached.system_message

    async def _start(self, record: QuestionRecord, body: bytes, replicas: list[str], started: float) -> AnswerStream:
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
            record = record.model_copy(update={"replica": url})
            wait_s = time.perf_counter() - started
            return AnswerStream(record, upstream, self._store, self._metrics, started, wait_s)
        await self._fail(record.model_copy(update={"replica": tried}), failure.message)
        raise failure

    async def _fail(self, record: QuestionRecord, message: str) -> None:
        failed = record.model_copy(update={"status": QuestionStatus.FAILED, "error": message, "finished_at": utcnow()})
        await self._store.finish_question(failed)
        self._metrics.observe(failed)
