"""What the restart tests share (test_redis_restarts.py, test_service_restarts.py): a Redis of the test's own that can
be SIGKILLed and started again on its append-only file; the service as deployed, `classroom serve` in a process of its
own, that can be stopped with a signal and started again on the same Redis and port; a class whose pupils stream
answers through the fault; and what the teacher's page and export show of the class before and after.
"""

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
from pathlib import Path
from typing import Any

import httpx
from httpx_sse import connect_sse

from service.local.processes import ManagedProcess, free_port
from service.local.redis_server import start_redis
from service.settings import AnswerSettings, Settings
from tests.helpers import (
    add_passage,
    answers_readyz,
    ask_json,
    create_classroom,
    error_of,
    joined_pupil,
    passage_text,
    signed_in_teacher,
    stored_questions,
)
from tests.servers import STATE

NAMES = ("Ada", "Ben", "Cy")
# Answers still streaming when the fault comes, just after each has begun (within half a second): three at
# once on the tiny stand-in share 3-50 tokens a second on this project's 2 shared cores, 2 s each at least.
ANSWER = AnswerSettings(max_tokens=32)
# The longest an answer may take here (settings.answer.longest_s).
LONGEST_S = 8


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
