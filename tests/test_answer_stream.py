"""An answer's writer (`AnswerStream`) on a real Redis, its replica played through the HTTP seam by a fake
transport (tests/fakes.py): however the stream ends (whole, cut mid-way, silent past the read timeout, stopped
by the pupil), the record is stored with the text so far and the message the pupil reads, and vLLM's stream is
given back or dropped. The fast tier: no server, no vLLM."""

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest
from prometheus_client import CollectorRegistry

from service.classroom.answer_stream import MIDSTREAM_FAILURE, TOO_SLOW, AnswerStream
from service.classroom.live import LiveAnswer, LiveAnswers
from service.records import STOPPED, QuestionRecord, QuestionStatus
from service.store import Keys, Store, open_store
from service.telemetry.prometheus import Metrics
from tests.fakes import HANG, FakeStream, fake_answer, sse_chunk
from tests.helpers import admitted
from tests.servers import own_database_url

BEGUN = [sse_chunk(role=True), sse_chunk("Bees "), sse_chunk("dance ")]  # an answer two tokens in


async def _write(
    redis_url: str, stream: FakeStream, during: Callable[[LiveAnswer], Awaitable[None]] | None = None
) -> tuple[QuestionRecord, str | None, Store]:
    """One admitted question answered from `stream` (`during` runs beside it): its stored record and the message
    its pupil was told."""
    async with open_store(own_database_url(redis_url)) as store:
        (question,) = await admitted(store, ["Ada"], lease_s=60)
        answers = LiveAnswers(store, lease_s=60)
        live = AnswerStream(
            LiveAnswer(question),
            stream,
            store,
            Metrics(CollectorRegistry()),
            started=time.perf_counter(),
            line=None,
            answers=answers,
            progress_s=60.0,
        ).start()
        if during is not None:
            await during(live)
        end = await asyncio.wait_for(live.ended(), 10)
        assert len(answers) == 0, "an ended answer is still listed among those being written"
        stored = await store.get_question(question.id)
        assert stored is not None
        assert stored == end.record
        assert not await store.redis.exists(Keys.pupil_answering(question.pupil_id)), "its pupil may not ask again"
        return stored, end.message, store


def test_a_whole_answer_is_stored_and_its_connection_given_back(redis_url: str) -> None:
    stream = FakeStream(fake_answer(["Bees ", "dance."]))
    record, message, _ = asyncio.run(_write(redis_url, stream))
    assert (record.status, record.answer, message) == (QuestionStatus.ANSWERED, "Bees dance.", None)
    assert record.finish_reason == "stop"
    assert record.ttft_ms is not None and record.total_ms is not None and record.ttft_ms <= record.total_ms
    assert stream.released and not stream.closed


@pytest.mark.parametrize(
    ("cut", "told"),
    [(ConnectionResetError("vLLM died"), MIDSTREAM_FAILURE), (TimeoutError(), TOO_SLOW)],
    ids=["the connection cut mid-stream", "silent past the read timeout"],
)
def test_a_stream_that_breaks_keeps_its_text_and_says_why(redis_url: str, cut: BaseException, told: str) -> None:
    stream = FakeStream(BEGUN, then=cut)
    record, message, _ = asyncio.run(_write(redis_url, stream))
    assert (record.status, record.answer, record.error, message) == (
        QuestionStatus.INCOMPLETE, "Bees dance ", told, told,
    )  # fmt: skip
    assert stream.closed and not stream.released, "a broken connection went back to the pool"


def test_a_stream_that_ends_before_done_is_cut_short(redis_url: str) -> None:
    stream = FakeStream(BEGUN)  # the body ends, no [DONE]: vLLM's process went away between two chunks
    record, message, _ = asyncio.run(_write(redis_url, stream))
    assert (record.status, record.answer, message) == (QuestionStatus.INCOMPLETE, "Bees dance ", MIDSTREAM_FAILURE)
    assert stream.closed


def test_stop_ends_a_silent_stream_at_once_and_stores_its_text(redis_url: str) -> None:
    stream = FakeStream(BEGUN, then=HANG)

    async def stop_when_begun(live: LiveAnswer) -> None:
        while live.text() != "Bees dance ":
            await live.changed()
        assert live.cut(STOPPED)

    record, message, _ = asyncio.run(_write(redis_url, stream, stop_when_begun))
    assert (record.status, record.answer, record.error, message) == (
        QuestionStatus.INCOMPLETE, "Bees dance ", STOPPED, STOPPED,
    )  # fmt: skip
    assert stream.closed, "vLLM's stream was left open: the request runs on, unread"
    assert stream.sent == len(BEGUN)
