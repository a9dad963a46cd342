"""An answer being written: a task of this process's own (`AnswerStream.run`) that waits for the question's turn
if need be, reads vLLM's stream to its end whatever the pupil's connection does, and stores the result and
records the metrics on every way out (answered, cut by the backend, stopped by the pupil, interrupted by a
shutdown). The question was admitted and its stream opened before (`service.classroom.answering`).

This is the hot path: every token of every answer passes through `AnswerStream._write`, so it reads the
stream's bytes itself (`vllm_stream.StreamReader`) and hands on at once, as one piece, whatever text a read
brought (the first piece is never held back for the next).
"""

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass

from redis.exceptions import RedisError

from service.backends.replica_http import OpenStream
from service.backends.turns import TurnNotInTime
from service.backends.vllm_stream import StreamBroke, StreamReader
from service.classroom.live import INTERRUPTED, Ended, LiveAnswer, LiveAnswers
from service.errors import WAITED_TOO_LONG, BackendFailed, BackendUnavailable
from service.records import STOPPED, QuestionRecord, QuestionStatus, Usage, utcnow
from service.store import Store, TurnLine
from service.telemetry.prometheus import Metrics

log = logging.getLogger(__name__)

MIDSTREAM_FAILURE = "The answer was cut short because the answering service stopped. Please ask again."
TOO_SLOW = "The answering service took too long to answer. Please ask again in a moment."
NOT_SAVED = (
    "This answer could not be saved: the service lost touch with its store for a moment. "
    "Please ask again in a few seconds."
)


class NotStarted(Exception):
    """The answer could not be started; its record is stored failed already."""

    def __init__(self, record: QuestionRecord, failure: BackendFailed | BackendUnavailable) -> None:
        super().__init__(failure.message)
        self.record = record
        self.failure = failure


Opener = Callable[[QuestionRecord], Awaitable[tuple[QuestionRecord, OpenStream]]]


@dataclass(slots=True)
class Waiting:
    """A question in line for its turn on `line`; `opener` starts it when the turn comes."""

    places: AsyncGenerator[int]
    opener: Opener


class AnswerStream:
    """An answer being written (or waiting for its turn) by a task of its own, `run`, whatever its pupil's
    connection does: its text goes to `live`, which the pupil's connections follow (`service.classroom.live`).
    Its record is stored, and the metrics recorded, however it ends: answered, cut by the backend or the read timeout,
    stopped by the pupil, or interrupted by the service shutting down."""

    def __init__(
        self,
        live: LiveAnswer,
        upstream: OpenStream | Waiting,
        store: Store,
        metrics: Metrics,
        started: float,
        line: TurnLine | None,
        answers: LiveAnswers,
        progress_s: float,
    ) -> None:
        self.live = live
        self.record = live.record
        self._upstream = upstream
        self._store = store
        self._metrics: Metrics | None = metrics
        self._started = started
        self._queue_wait_s = time.perf_counter() - started
        self._line = line
        self._answers = answers
        self._progress_s = progress_s
        self._reader = StreamReader()
        self._token_times: list[float] = []
        self._finish_reason: str | None = None
        self._usage: Usage | None = None
        self._stored = False  # the record is stored already (an answer that could not be started)
        self._progress: asyncio.Task[None] | None = None

    def start(self) -> LiveAnswer:
        """Run the answer in a task of this process's own, listed among its live answers."""
        self._answers.add(self.live)
        self.live.task = asyncio.create_task(self.run(), name=f"answer {self.record.id}")
        return self.live

    def _elapsed_ms(self) -> float:
        return (time.perf_counter() - self._started) * 1000

    async def run(self) -> None:
        live = self.live
        try:
            try:
                live.writing = True
                if live.cut_reason is not None:  # cut before this task ran
                    raise asyncio.CancelledError()
                outcome = await self._write()
            except asyncio.CancelledError:  # cut: stopped by the pupil, or the service shuts down
                task = asyncio.current_task()
                if task is not None:
                    task.uncancel()
                outcome = (QuestionStatus.INCOMPLETE, live.cut_reason or INTERRUPTED)
            except Exception:
                log.exception("answer %s failed", self.record.id)
                outcome = (QuestionStatus.INCOMPLETE, MIDSTREAM_FAILURE)
            live.writing, live.storing = False, True
            await self._end(outcome)
        finally:
            if live.end is None:  # never expected: the end could not be stored, followers are told so
                live.finish(Ended(self.record, NOT_SAVED))
            self._answers.remove(self.record.id)

    async def _write(self) -> tuple[QuestionStatus, str | None]:
        """Wait for the turn if need be, then read vLLM's stream to its end: how the answer ended."""
        live = self.live
        if isinstance(self._upstream, Waiting):
            waiting = self._upstream
            try:
                async with aclosing(waiting.places) as places:
                    async for place in places:
                        live.in_line(place)
                self.record, self._upstream = await waiting.opener(self.record)
            except TurnNotInTime:
                return QuestionStatus.FAILED, WAITED_TOO_LONG
            except NotStarted as exc:  # stored and counted failed already
                self.record, self._metrics, self._stored = exc.record, None, True
                return QuestionStatus.FAILED, exc.failure.message
            live.place = 0
            self._queue_wait_s = time.perf_counter() - self._started
        upstream = self._upstream
        reader = self._reader
        token_times = self._token_times
        add = live.add
        clock = time.perf_counter
        progress_s = self._progress_s
        next_progress = clock() + progress_s
        try:
            async for data in upstream.chunks():
                piece = reader.feed(data)
                if piece.finish_reason:
                    self._finish_reason = piece.finish_reason
                if piece.usage:
                    self._usage = piece.usage
                if piece.tokens:  # the time to first token is the first chunk with tokens, text or not yet
                    now = clock()
                    token_times.extend(itertools.repeat(now, piece.tokens))
                    if piece.text:
                        add(piece.text)
                    if now >= next_progress:
                        next_progress = now + progress_s
                        self._store_progress()
            if not reader.done:
                raise StreamBroke("the stream ended before [DONE]")
        except TimeoutError:  # nothing from vLLM for backend.read_timeout_s
            log.warning("answer %s timed out waiting for the backend", self.record.id)
            return QuestionStatus.INCOMPLETE, TOO_SLOW
        except Exception:  # the stream broke: the connection cut, a protocol or server error mid-way
            log.warning("answer %s cut short by the backend", self.record.id, exc_info=True)
            return QuestionStatus.INCOMPLETE, MIDSTREAM_FAILURE
        return QuestionStatus.ANSWERED, None

    def _store_progress(self) -> None:
        """The text so far into the record, beside the stream (at most one write at a time): a Redis outage
        must not hold the answer up."""
        if self._progress is None or self._progress.done():
            record = self.record.model_copy(update={"answer": self.live.text()})
            self._progress = asyncio.create_task(self._write_progress(record))

    async def _write_progress(self, record: QuestionRecord) -> None:
        try:
            if await self._store.store_progress(record):
                self.live.cut(STOPPED)  # the stop's message was missed: its key was not
        except RedisError as exc:
            log.warning("answer %s: its text so far could not be stored: %s", record.id, exc)

    async def _end(self, outcome: tuple[QuestionStatus, str | None]) -> None:
        """Close vLLM's stream (it aborts a request whose stream is closed), store the final record, tell the
        answer's followers, record the metrics."""
        upstream = self._upstream
        if not isinstance(upstream, Waiting):
            if self._reader.done:
                upstream.release()  # the connection goes back to the pool
            else:
                upstream.close()
        status, message = outcome
        if not self._stored:
            if status == QuestionStatus.INCOMPLETE and isinstance(upstream, Waiting):
                status = QuestionStatus.FAILED  # cut before it started: no answer at all
            self.record = self._finish((status, message))
            if self._progress is not None:
                await asyncio.gather(self._progress, return_exceptions=True)
            if not await self._store_end():
                message = NOT_SAVED
        self.live.finish(Ended(self.record, message))
        if self._metrics is not None:
            times = self._token_times
            gaps = [later - earlier for earlier, later in zip(times, times[1:], strict=False)]
            self._metrics.observe(self.record, gaps, self._queue_wait_s)

    async def _store_end(self) -> bool:
        """Store the final record; False if Redis stayed unreachable through the client's retries (the record
        stays "answering" until `service.classroom.abandoned` finishes it, its turn and the pupil's lock lapse)."""
        try:
            await self._store.finish_question(self.record, self._line)
        except RedisError as exc:
            log.warning("answer %s ended but could not be stored: %s", self.record.id, exc)
            return False
        return True

    def _finish(self, outcome: tuple[QuestionStatus, str | None]) -> QuestionRecord:
        status, error = outcome
        times = self._token_times
        return self.record.model_copy(
            update={
                "status": status,
                "error": error,
                "answer": self.live.text(),
                "ttft_ms": (times[0] - self._started) * 1000 if times else None,
                "total_ms": self._elapsed_ms(),
                "usage": self._usage,
                "finish_reason": self._finish_reason,
                "finished_at": utcnow(),
            }
        )
