"""What a pupil's stream says of an answer being written in this process (`sse_events(follow(live))`), in the
fast tier: no server, no Redis, no vLLM; the answer's writer is played by the test through `LiveAnswer`."""

import asyncio
from collections.abc import AsyncGenerator

import orjson

from service.api.pupil import sse_events
from service.classroom.live import Ended, LiveAnswer, follow
from service.records import STOPPED, QuestionRecord, QuestionStatus


def record(**update: object) -> QuestionRecord:
    base = QuestionRecord(id="q1", classroom_id="c", passage_id="p", pupil_id="u", pupil="Ada", question="Why?")
    return base.model_copy(update=update)


def parsed(event: bytes) -> tuple[str, str | None, dict[str, object]]:
    """An SSE event's name, id and JSON data."""
    fields = dict(line.split(": ", 1) for line in event.decode().strip().split("\n"))
    return fields["event"], fields.get("id"), orjson.loads(fields["data"])


async def collect(events: AsyncGenerator[bytes], into: list[tuple[str, str | None, dict[str, object]]]) -> None:
    async for event in events:
        into.append(parsed(event))


def test_a_follower_gets_the_question_its_place_the_words_as_they_come_then_done() -> None:
    async def scene() -> list[tuple[str, str | None, dict[str, object]]]:
        live = LiveAnswer(record())
        seen: list[tuple[str, str | None, dict[str, object]]] = []
        reader = asyncio.create_task(collect(sse_events(follow(live), "q1"), seen))
        await asyncio.sleep(0)
        live.in_line(2)
        await asyncio.sleep(0)
        live.in_line(0)  # its turn: no event, the words say it
        live.add("Bees ")
        await asyncio.sleep(0)
        live.add("make ")
        live.add("honey.")  # two pieces while the follower was away: one event
        await asyncio.sleep(0)
        answered = record(status=QuestionStatus.ANSWERED, answer="Bees make honey.", finish_reason="stop")
        live.finish(Ended(answered, None))
        await asyncio.wait_for(reader, 5)
        return seen

    seen = asyncio.run(scene())
    assert [name for name, _, _ in seen] == ["question", "queued", "token", "token", "done"]
    assert seen[0][2] == {"question_id": "q1"} and seen[1][2] == {"place": 2}
    assert [(i, d["text"]) for _, i, d in seen[2:4]] == [("5", "Bees "), ("16", "make honey.")]
    assert seen[4][2]["answer"] == "Bees make honey." and seen[4][2]["status"] == "answered"


def test_a_page_that_comes_back_gets_what_it_missed_once_then_the_end_as_an_error() -> None:
    async def scene() -> list[tuple[str, str | None, dict[str, object]]]:
        live = LiveAnswer(record())
        live.add("Bees make ")
        live.add("honey from nectar.")
        stopped = record(status=QuestionStatus.INCOMPLETE, answer="Bees make honey from nectar.", error=STOPPED)
        live.finish(Ended(stopped, STOPPED))
        seen: list[tuple[str, str | None, dict[str, object]]] = []
        await collect(sse_events(follow(live, after=5)), seen)  # Last-Event-ID 5: "Bees " was read
        return seen

    seen = asyncio.run(scene())
    assert [name for name, _, _ in seen] == ["token", "error"]
    assert seen[0][1] == "28" and seen[0][2] == {"text": "make honey from nectar."}
    assert seen[1][2] == {"question_id": "q1", "message": STOPPED}


def test_a_follower_that_leaves_ends_its_following_not_the_answer() -> None:
    async def scene() -> tuple[bool, bool, int]:
        live = LiveAnswer(record())
        events = sse_events(follow(live), "q1")
        assert parsed(await anext(events))[0] == "question"
        live.add("Bees ")
        assert parsed(await anext(events))[0] == "token"
        waiting = asyncio.create_task(anext(events))
        await asyncio.sleep(0)
        waiting.cancel()  # the pupil's connection closed while it waited for more
        await asyncio.gather(waiting, return_exceptions=True)
        await events.aclose()
        live.add("make honey.")  # the writer goes on
        return live.end is None, live.cut_reason is None, len(live.parts)

    assert asyncio.run(scene()) == (True, True, 2)  # not ended, not cut: it wrote on
