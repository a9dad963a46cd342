"""The rules of a class, each with a 4xx and a sentence a child or teacher understands."""

import time
from contextlib import closing

import httpx
from httpx_sse import connect_sse

from service.api.deps import PUPIL_COOKIE
from service.app import create_app
from service.settings import AuthSettings, LimitSettings, Settings
from tests.helpers import (
    Join,
    add_passage,
    ask_json,
    create_classroom,
    error_of,
    joined_pupil,
    passage_text,
    signed_in_teacher,
)
from tests.servers import ServerThread


def test_a_wrong_join_code_is_refused_and_a_right_one_is_read_kindly(teacher: httpx.Client, service: str) -> None:
    classroom = create_classroom(teacher)
    response = httpx.post(f"{service}/api/join", json={"join_code": "ZZZZ-9999", "name": "Ada"})
    assert response.status_code == 404
    assert (
        error_of(response)["message"]
        == "There is no class with the code 'ZZZZ-9999'. Check the code with your teacher."
    )
    typed = " " + classroom["join_code"].replace("-", "").lower() + " "
    response = httpx.post(f"{service}/api/join", json={"join_code": typed, "name": "Ada"})
    assert response.status_code == 201
    assert response.json()["classroom_id"] == classroom["id"]


def test_a_closed_class_takes_no_pupils_and_no_questions_until_reopened(teacher: httpx.Client, join: Join) -> None:
    classroom = create_classroom(teacher)
    add_passage(teacher, classroom["id"], passage_text(80))
    ada = join(classroom["join_code"], "Ada")
    assert teacher.patch(f"/api/classrooms/{classroom['id']}", json={"is_open": False}).json()["is_open"] is False

    refused = httpx.post(f"{teacher.base_url}/api/join", json={"join_code": classroom["join_code"], "name": "Ben"})
    asked = ask_json(ada, classroom["id"], "Still open?")
    for response in (refused, asked):
        assert response.status_code == 403
        assert error_of(response)["message"] == "This class is closed right now. Your teacher can open it again."
    assert ada.get("/api/pupil/me").json()["is_open"] is False

    teacher.patch(f"/api/classrooms/{classroom['id']}", json={"is_open": True})
    assert ask_json(ada, classroom["id"], "Open again?").status_code == 200


def test_an_expired_pupil_session_is_told_to_join_again(settings: Settings) -> None:
    short = settings.model_copy(update={"auth": AuthSettings(pupil_session_hours=1 / 3600)})
    with ServerThread(create_app(short)) as service, closing(signed_in_teacher(short, service.url)) as teacher:
        classroom = create_classroom(teacher)
        joined = httpx.post(f"{service.url}/api/join", json={"join_code": classroom["join_code"], "name": "Ada"})
        token = joined.cookies[PUPIL_COOKIE]
        assert httpx.get(f"{service.url}/api/pupil/me", cookies={PUPIL_COOKIE: token}).status_code == 200
        time.sleep(1.5)
        response = httpx.get(f"{service.url}/api/pupil/me", cookies={PUPIL_COOKIE: token})
        assert response.status_code == 401
        assert error_of(response)["message"] == "Your session has ended. Please join again with your class code."
        response = httpx.get(f"{service.url}/api/pupil/me")
        assert response.status_code == 401
        assert error_of(response)["code"] == "not_joined"


def test_a_pupil_waits_for_one_answer_before_asking_the_next(teacher: httpx.Client, join: Join) -> None:
    classroom = create_classroom(teacher)
    add_passage(teacher, classroom["id"], passage_text(80))
    ada = join(classroom["join_code"], "Ada")
    url = f"/api/classrooms/{classroom['id']}/questions"
    with connect_sse(ada, "POST", url, json={"question": "A long answer, please?"}) as source:
        events = source.iter_sse()
        assert next(events).event == "question"
        response = ask_json(ada, classroom["id"], "And another?")
        assert response.status_code == 409
        assert error_of(response)["message"] == (
            "Please wait until your answer has finished before you ask another question."
        )
        assert [e.event for e in events][-1] == "done"
    # Other pupils were never held up, and Ada may ask again now.
    assert ask_json(join(classroom["join_code"], "Ben"), classroom["id"], "Mine?").status_code == 200
    assert ask_json(ada, classroom["id"], "Now?").status_code == 200


def test_too_many_questions_a_minute_get_a_429_with_retry_after(vllm_settings: Settings) -> None:
    strict = vllm_settings.model_copy(update={"limits": LimitSettings(questions_per_minute=2)})
    with ServerThread(create_app(strict)) as service, closing(signed_in_teacher(strict, service.url)) as teacher:
        classroom = create_classroom(teacher)
        add_passage(teacher, classroom["id"], passage_text(80))
        with closing(joined_pupil(service.url, classroom["join_code"], "Ada")) as ada:
            assert ask_json(ada, classroom["id"], "One?").status_code == 200
            assert ask_json(ada, classroom["id"], "Two?").status_code == 200
            response = ask_json(ada, classroom["id"], "Three?")
            assert response.status_code == 429
            assert 1 <= int(response.headers["retry-after"]) <= 60
            assert "You have asked 2 questions in the last minute" in error_of(response)["message"]
            # Refused questions are not stored: the teacher sees the two that were answered.
            questions = teacher.get(f"/api/classrooms/{classroom['id']}/questions").json()["questions"]
            assert [q["question"] for q in questions] == ["Two?", "One?"]
