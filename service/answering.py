"""One pupil question, from arrival to stored answer, with no back-and-forth.

`Answering.ask` checks the question, stores it before any model call (so nothing is lost), builds the
messages, and opens the stream on the replica the fleet plans for this passage before the HTTP response
starts, so a dead backend is still a plain 503 (the next replica is tried first). `AnswerStream.events`
then turns the model's stream into events and, on every way out (finished, failed, cut short because
the pupil left), stores the result and records the metrics.
"""

import logging
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from datetime import timedelta

import anyio
from openai import APIConnectionError, APIError, AsyncStream
from openai.types.chat import ChatCompletionChunk, ChatCompletionMessageParam
from openai.types.completion_usage import CompletionUsage

from service.errors import (
    AnswerInProgress,
    BackendFailed,
    BackendUnavailable,
    ClassClosed,
    NoActivePassage,
    WrongClassroom,
)
from service.fleet import Fleet
from service.metrics import Metrics
from service.prompting import Prompts
from service.ratelimit import QuestionRateLimit
from service.records import Passage, PupilSession, QuestionRecord, QuestionStatus, Usage, utcnow
from service.store import Store, new_id
from service.vllm_stream import brings_tokens

log = logging.getLogger(__name__)

MIDSTREAM_FAILURE = "The answer was cut short because the answering service stopped. Please ask again."
PUPIL_LEFT = "The pupil left before the answer finished."


@dataclass(frozen=True)
class Token:
    text: str


@dataclass(frozen=True)
class Finished:
    record: QuestionRecord


@dataclass(frozen=True)
class Failed:
    record: QuestionRecord
    message: str


AnswerEvent = Token | Finished | Failed


def _usage(usage: CompletionUsage | None) -> Usage | None:
    if usage is None:
        return None
    details = usage.prompt_tokens_details
    return Usage(
        prompt_tokens=usage.prompt_tokens,
        cached_tokens=(details.cached_tokens or 0) if details is not None else 0,
        completion_tokens=usage.completion_tokens,
    )


class AnswerStream:
    """An answer in flight. Iterate `events()` once; the record is stored however the iteration ends."""

    def __init__(
        self,
        record: QuestionRecord,
        upstream: AsyncStream[ChatCompletionChunk],
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
        parts: list[str] = []
        token_times: list[float] = []
        finish_reason: str | None = None
        usage: Usage | None = None
        outcome: tuple[QuestionStatus, str | None] | None = None
        try:
            try:
                async for chunk in self._upstream:
                    usage = _usage(chunk.usage) or usage
                    for choice in chunk.choices:
                        finish_reason = choice.finish_reason or finish_reason
                        # The time to first token is the first chunk with tokens, text or not yet.
                        if brings_tokens(choice.delta.role, choice.delta.content):
                            token_times.append(time.perf_counter())
                        if choice.delta.content:
                            parts.append(choice.delta.content)
                            yield Token(choice.delta.content)
            except Exception:  # the stream broke: the connection cut, a protocol or server error mid-way
                log.warning("answer %s cut short by the backend", self.record.id, exc_info=True)
                outcome = (QuestionStatus.INCOMPLETE, MIDSTREAM_FAILURE)
            else:
                outcome = (QuestionStatus.ANSWERED, None)
            self.record = self._finish(outcome, parts, token_times, usage, finish_reason)
            await self._store.save_question(self.record)
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
                    await self._store.save_question(self.record)
                gaps = [later - earlier for earlier, later in zip(token_times, token_times[1:], strict=False)]
                self._metrics.observe(self.record, gaps, self._queue_wait_s)
                await self._upstream.close()  # vLLM aborts a request whose stream is closed
                await self._store.release_answering(self.record.pupil_id)

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
        fleet: Fleet,
        metrics: Metrics,
        rate_limit: QuestionRateLimit,
        *,
        model: str,
        max_tokens: int,
        temperature: float,
        longest_answer: timedelta,
    ) -> None:
        self._store = store
        self._prompts = prompts
        self._fleet = fleet
        self._metrics = metrics
        self._rate_limit = rate_limit
        self._model = model
        self._max_tokens = max_tokens
        self._temperature = temperature
        self._longest_answer = longest_answer

    async def ask(self, pupil: PupilSession, classroom_id: str, question: str) -> AnswerStream:
        started = time.perf_counter()
        if pupil.classroom_id != classroom_id:
            raise WrongClassroom()
        classroom = await self._store.get_classroom(classroom_id)
        if not classroom.is_open:
            raise ClassClosed()
        passage = await self._store.active_passage(classroom_id)
        if passage is None:
            raise NoActivePassage()
        self._prompts.check_question(question)
        await self._rate_limit.hit(pupil.pupil_id)
        if not await self._store.claim_answering(pupil.pupil_id, self._longest_answer):
            raise AnswerInProgress()
        try:
            return await self._start(pupil, passage, question, started)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._store.release_answering(pupil.pupil_id)
            raise

    async def _start(self, pupil: PupilSession, passage: Passage, question: str, started: float) -> AnswerStream:
        variant, replicas = self._fleet.plan(pupil.pupil_id, passage.id)
        record = QuestionRecord(
            id=new_id(),
            classroom_id=passage.classroom_id,
            passage_id=passage.id,
            pupil_id=pupil.pupil_id,
            pupil=pupil.name,
            question=question,
            variant=variant,
            replica=replicas[0] if replicas else None,
        )
        await self._store.add_question(record)
        messages = self._prompts.messages(passage.title, passage.text, question)
        for url in replicas:
            try:
                upstream = await self._open(url, messages)
            except APIConnectionError as exc:
                self._fleet.mark_down(url, str(exc))  # and try the next replica in the plan
                continue
            except APIError as exc:
                message = f"The answering service refused the question ({exc.message})."
                await self._fail(record.model_copy(update={"replica": url}), message)
                raise BackendFailed(message) from exc
            record = record.model_copy(update={"replica": url})
            return AnswerStream(record, upstream, self._store, self._metrics, started, time.perf_counter() - started)
        await self._fail(record.model_copy(update={"replica": None}), BackendUnavailable().message)
        raise BackendUnavailable()

    async def _open(self, url: str, messages: list[ChatCompletionMessageParam]) -> AsyncStream[ChatCompletionChunk]:
        return await self._fleet.client(url).chat.completions.create(
            model=self._model,
            messages=messages,
            max_tokens=self._max_tokens,
            temperature=self._temperature,
            stream=True,
            stream_options={"include_usage": True},
        )

    async def _fail(self, record: QuestionRecord, message: str) -> None:
        failed = record.model_copy(update={"status": QuestionStatus.FAILED, "error": message, "finished_at": utcnow()})
        await self._store.save_question(failed)
        self._metrics.observe(failed)
