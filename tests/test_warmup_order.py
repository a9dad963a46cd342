"""Which passages a fleet change re-warms when there are more classes than the cap: those used last, on
the real Redis (a database of this test's own, so other tests' classrooms do not count)."""

import asyncio
from datetime import timedelta

from service.records import Passage, PupilSession, QuestionRecord, utcnow
from service.store import RateLimit, Store, open_store
from service.store.ids import new_id
from tests.servers import own_database_url


async def _passage(store: Store, classroom_id: str, age: timedelta) -> None:
    await store.add_passage(
        Passage(id=new_id(), classroom_id=classroom_id, title="t", text="x", tokens=2, created_at=utcnow() - age),
        publish=True,
    )


async def _question(store: Store, classroom_id: str, age: timedelta) -> None:
    state = await store.class_state(classroom_id)
    assert state.passage is not None
    pupil = PupilSession(pupil_id=new_id(), classroom_id=classroom_id, name="Ada")
    token = await store.start_pupil_session(pupil, timedelta(hours=1))
    record = QuestionRecord(
        id=new_id(),
        classroom_id=classroom_id,
        passage_id=state.passage.id,
        pupil_id=pupil.pupil_id,
        pupil=pupil.name,
        question="Why?",
        asked_at=utcnow() - age,
    )
    admitted = await store.admit_question(token, record, state.version, RateLimit(most=10), lease_s=60)
    assert admitted.outcome == "ok"


async def _order(redis_url: str) -> tuple[list[str], list[str], dict[str, str]]:
    async with open_store(own_database_url(redis_url)) as store:
        await store.redis.flushdb()
        names = ["asked today", "passage yesterday", "passage last week", "closed", "no passage"]
        made = {name: (await store.create_classroom("teacher", name)).id for name in names}
        # A passage from last month, asked about this morning: used more recently than yesterday's.
        await _passage(store, made["asked today"], timedelta(days=30))
        await _question(store, made["asked today"], timedelta(hours=3))
        await _passage(store, made["passage yesterday"], timedelta(days=1))
        await _passage(store, made["passage last week"], timedelta(days=7))
        await _question(store, made["passage last week"], timedelta(days=6))
        await _passage(store, made["closed"], timedelta(0))
        closed = await store.get_classroom(made["closed"])
        await store.save_classroom(closed.model_copy(update={"is_open": False}))

        every = [p.classroom_id for p in await store.active_passages_by_recency(10)]
        capped = [p.classroom_id for p in await store.active_passages_by_recency(2)]
        await store.redis.flushdb()
        return every, capped, {cid: name for name, cid in made.items()}


def test_a_fleet_change_rewarms_the_classes_used_last_first(redis_url: str) -> None:
    every, capped, name = asyncio.run(_order(redis_url))
    assert [name[c] for c in every] == ["asked today", "passage yesterday", "passage last week"]
    assert [name[c] for c in capped] == ["asked today", "passage yesterday"]
