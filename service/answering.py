"""One pupil question, from arrival to stored answer, with no back-and-forth.

`Answering.ask` checks the question, stores it before any model call (so nothing is lost), builds the
messages, and opens the stream to vLLM before the HTTP response starts, so a dead backend is still a
plain 503. `AnswerStream.events` then turns the model's stream into events and stores the result on
every path out: finished, failed, or cut short because the pupil left.
"""

import logging
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from datetime import timedelta

import anyio
from openai import APIConnectionError, APIError, AsyncOpenAI, AsyncStream
from openai.types.chat import ChatCompletionChunk
from openai.types.completion_usage import CompletionUsage

from service.errors import (
    AnswerInProgress,
    BackendFailed,
    BackendUnavailable,
    ClassClosed,
    NoActivePassage,
    WrongClassroom,
)
from service.prompting import Prompts
from service.ratelimit import QuestionRateLimit
from service.records import Passage, PupilSession, QuestionRecord, QuestionStatus, Usage, utcnow
from service.store import Store, new_id

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
        started: float,
    ) -> None:
        self.record = record
        self._upstream = upstream
        self._store = store
        self._started = started

    def _elapsed_ms(self) -> float:
        return (time.perf_counter() - self._started) * 1000

    async def events(self) -> AsyncGenerator[AnswerEvent]:
        parts: list[str] = []
        ttft_ms: float | None = None
        finish_reason: str | None = None
        usage: Usage | None = None
        stored = False
        try:
            try:
                async for chunk in self._upstream:
                    usage = _usage(chunk.usage) or usage
                    for choice in chunk.choices:
                        finish_reason = choice.finish_reason or finish_reason
                        if choice.delta.content:
                            if ttft_ms is None:
                                ttft_ms = self._elapsed_ms()
                            parts.append(choice.delta.content)
                            yield Token(choice.delta.content)
            except Exception:  # the stream broke: the connection cut, a protocol or server error mid-way
                log.warning("answer %s cut short by the backend", self.record.id, exc_info=True)
                self.record = self._finish(QuestionStatus.INCOMPLETE, parts, ttft_ms, usage, finish_reason)
                self.record.error = MIDSTREAM_FAILURE
                await self._store.save_question(self.record)
                stored = True
                yield Failed(self.record, MIDSTREAM_FAILURE)
                return
            self.record = self._finish(QuestionStatus.ANSWERED, parts, ttft_ms, usage, finish_reason)
            await self._store.save_question(self.record)
            stored = True
            yield Finished(self.record)
        finally:
            if not stored:
                # The consumer went away (the pupil closed the page): keep what was said so far.
                self.record = self._finish(QuestionStatus.INCOMPLETE, parts, ttft_ms, usage, finish_reason)
                self.record.error = PUPIL_LEFT
                with anyio.CancelScope(shield=True):
                    await self._store.save_question(self.record)
            with anyio.CancelScope(shield=True):
                await self._upstream.close()  # vLLM aborts a request whose stream is closed
                await self._store.release_answering(self.record.pupil_id)

    def _finish(
        self,
        status: QuestionStatus,
        parts: list[str],
        ttft_ms: float | None,
        usage: Usage | None,
        finish_reason: str | None,
    ) -> QuestionRecord:
        return self.record.model_copy(
            update={
                "status": status,
                "answer": "".join(parts),
                "ttft_ms": ttft_ms,
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
        client: AsyncOpenAI,
        rate_limit: QuestionRateLimit,
        *,
        model: str,
        max_tokens: int,
        temperature: float,
        longest_answer: timedelta,
    ) -> None:
        self._store = store
        self._prompts = prompts
        self._client = client
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
        record = QuestionRecord(
            id=new_id(),
            classroom_id=passage.classroom_id,
            passage_id=passage.id,
            pupil_id=pupil.pupil_id,
            pupil=pupil.name,
            question=question,
        )
        await self._store.add_question(record)

        messages = self._prompts.messages(passage.title, passage.text, question)
        try:
            upstream = await self._client.chat.completions.create(
                model=self._model,
                messages=messages,
                max_tokens=self._max_tokens,
                temperature=self._temperature,
                stream=True,
                stream_options={"include_usage": True},
            )
        except APIConnectionError as exc:
            await self._fail(record, BackendUnavailable().message)
            raise BackendUnavailable() from exc
        except APIError as exc:
            message = f"The answering service refused the question ({exc.message})."
            await self._fail(record, message)
            raise BackendFailed(message) from exc
        return AnswerStream(record, upstream, self._store, started)

    async def _fail(self, record: QuestionRecord, message: str) -> None:
        failed = record.model_copy(update={"status": QuestionStatus.FAILED, "error": message, "finished_at": utcnow()})
        await self._store.save_question(failed)
