"""Bad input gets a clear error and loses nothing."""

import csv
import io
import time
from contextlib import closing

import httpx

from service.app import create_app
from service.local.processes import free_port
from service.settings import Settings
from tests.helpers import (
    PASSWORD,
    Join,
    add_passage,
    ask_json,
    ask_streaming,
    create_classroom,
    error_of,
    new_teacher_account,
    operator_headers,
    passage_text,
    signed_in_teacher,
    stored_questions,
)
from tests.servers import ServerThread, instant_fake_vllm, isolated


def test_empty_question_is_refused_and_not_stored(teacher: httpx.Client, join: Join) -> None:
    classroom = create_classroom(teacher)
    add_passage(teacher, classroom["id"], passage_text(100))
    response = ask_json(join(classroom["join_code"], "Ada"), classroom["id"], "   ")
    assert response.status_code == 422
    assert error_of(response) == {"code": "invalid_input", "message": "Please type a question before you send it."}
    assert stored_questions(teacher, classroom["id"]) == []


def test_missing_field_is_named(teacher: httpx.Client) -> None:
    response = teacher.post("/api/classrooms", json={})
    assert response.status_code == 422
    assert "'name' is missing" in error_of(response)["message"]


def test_passage_over_the_budget_says_how_many_tokens_to_cut_and_keeps_the_old_one(
    teacher: httpx.Client, join: Join
) -> None:
    classroom = create_classroom(teacher)
    first = add_passage(teacher, classroom["id"], passage_text(200))
    response = teacher.post(
        f"/api/classrooms/{classroom['id']}/passages", json={"title": "Too long", "text": passage_text(5000)}
    )
    assert response.status_code == 422
    error = error_of(response)
    assert error["code"] == "passage_too_long"
    limit = first["max_tokens"]
    assert f"at most {limit:,} tokens" in error["message"]
    assert "Please cut at least" in error["message"]
    # The earlier passage is still the one pupils ask about.
    assert ask_json(join(classroom["join_code"], "Ada"), classroom["id"], "Still there?").status_code == 200
    assert [p["id"] for p in teacher.get(f"/api/classrooms/{classroom['id']}").json()["passages"]] == [first["id"]]


def test_unknown_classroom_is_404_with_a_sentence(teacher: httpx.Client) -> None:
    for response in (
        teacher.get("/api/classrooms/nope/questions"),
        teacher.post("/api/classrooms/nope/passages", json={"title": "T", "text": "x"}),
    ):
        assert response.status_code == 404
        assert error_of(response) == {
            "code": "classroom_not_found",
            "message": "There is no classroom with the id 'nope'. Check the link or ask your teacher.",
        }


def test_question_before_any_passage_is_409(teacher: httpx.Client, join: Join) -> None:
    classroom = create_classroom(teacher)
    response = ask_json(join(classroom["join_code"], "Ada"), classroom["id"], "Why?")
    assert response.status_code == 409
    assert "no passage yet" in error_of(response)["message"]


def test_dead_backend_is_a_503_within_2_seconds_and_nothing_stored_is_lost(
    teacher: httpx.Client, join: Join, service: str, settings: Settings
) -> None:
    # Earlier work, through the healthy backend.
    classroom = create_classroom(teacher)
    passage = add_passage(teacher, classroom["id"], passage_text(120))
    ada, ben = join(classroom["join_code"], "Ada"), join(classroom["join_code"], "Ben")
    assert ask_json(ada, classroom["id"], "Before the outage?").status_code == 200

    # A switch, or a canary, to a variant whose only replica is a port nothing listens on is refused, and changes
    # nothing: the class is still answered.
    operator = httpx.Client(base_url=service, headers=operator_headers(settings), timeout=10)
    dead = f"http://127.0.0.1:{free_port()}/v1"
    assert operator.put("/api/operator/backends/variants/down", json={"replicas": [dead]}).status_code == 200
    before = operator.get("/api/operator/backends").json()["config"]
    for path, body in (("active", {"variant": "down"}), ("canary", {"variant": "down", "percent": 10})):
        refused = operator.put(f"/api/operator/backends/{path}", json=body)
        assert refused.status_code == 409, refused.text
        assert error_of(refused)["message"].startswith(
            f"Nothing was changed: no replica of the variant 'down' answers ({dead}: "
        )
        assert "pupils stay where they are" in error_of(refused)["message"]
    assert operator.get("/api/operator/backends").json()["config"] == before
    assert httpx.get(f"{service}/readyz").status_code == 200
    assert ask_json(ada, classroom["id"], "Still answered?").status_code == 200

    # The variant's replica answers when the operator switches, and falls over after.
    with instant_fake_vllm() as falls_over:
        assert operator.put("/api/operator/backends/variants/down", json={"replicas": [falls_over]}).status_code == 200
        assert operator.put("/api/operator/backends/active", json={"variant": "down"}).status_code == 200
    try:
        for streaming in (False, True):
            began = time.monotonic()
            if streaming:
                response = ben.post(f"/api/classrooms/{classroom['id']}/questions", json={"question": "Streamed?"})
            else:
                response = ask_json(ben, classroom["id"], "During the outage?")
            assert time.monotonic() - began < 2.0
            assert response.status_code == 503
            assert response.headers["retry-after"]
            assert error_of(response)["message"] == (
                "The answering service cannot be reached right now. Your question was saved; "
                "please try again in a minute."
            )
        # Said, per question and on /readyz, but no pod leaves the ingress for it: pages and the console stay up.
        ready, answering = httpx.get(f"{service}/readyz"), httpx.get(f"{service}/readyz?answering=true")
        assert (ready.status_code, answering.status_code) == (200, 503)
        assert ready.json() == answering.json()
        assert "no healthy replica of the active variant 'down'" in ready.json()["backend"]
        assert httpx.get(f"{service}/").status_code == 200
    finally:
        assert operator.put("/api/operator/backends/active", json={"variant": "original"}).status_code == 200
        assert operator.delete("/api/operator/backends/variants/down").status_code == 200
        operator.close()

    # Everything is still there, and the failed questions are recorded as such.
    questions = stored_questions(teacher, classroom["id"])
    assert [(q["question"], q["status"]) for q in questions] == [
        ("Streamed?", "failed"),
        ("During the outage?", "failed"),
        ("Still answered?", "answered"),
        ("Before the outage?", "answered"),
    ]
    assert questions[3]["answer"]
    assert ask_streaming(ada, classroom["id"], "After?").done is not None
    assert stored_questions(teacher, classroom["id"])[0]["passage_id"] == passage["id"]


def test_readyz_reports_redis_backend_and_model(service: str) -> None:
    response = httpx.get(f"{service}/readyz?answering=true")
    assert response.status_code == 200
    body = response.json()
    assert body["redis"] == "ok" and body["backend"] == "ok"
    assert "OFFLINE STAND-IN" in body["model"]
    assert httpx.get(f"{service}/healthz").json() == {"status": "ok"}


def test_wrong_password_and_unknown_email_get_the_same_answer(settings: Settings, service: str) -> None:
    with closing(signed_in_teacher(settings, service)) as teacher:
        email = teacher.get("/api/teacher/me").json()["email"]
    for login in ({"email": email, "password": "wrong password"}, {"email": "no@one.example", "password": "x"}):
        response = httpx.post(f"{service}/api/teacher/session", json=login)
        assert response.status_code == 401
        assert error_of(response)["message"] == (
            "That email and password do not match an account. Check them and try again."
        )


def test_a_class_named_outside_latin_1_exports_its_questions(teacher: httpx.Client, join: Join) -> None:
    classroom = create_classroom(teacher, "Year 5 🌋 五年级")
    add_passage(teacher, classroom["id"], passage_text(60))
    assert ask_json(join(classroom["join_code"], "Ada"), classroom["id"], "Why?").status_code == 200
    response = teacher.get(f"/api/classrooms/{classroom['id']}/questions.csv")
    assert response.status_code == 200
    disposition = response.headers["content-disposition"]
    assert disposition.startswith('attachment; filename="Year 5 _ ___-questions.csv"')  # what old clients see
    assert "filename*=UTF-8''Year%205%20%F0%9F%8C%8B%20%E4%BA%94%E5%B9%B4%E7%BA%A7-questions.csv" in disposition
    assert len(list(csv.reader(io.StringIO(response.text)))) == 2  # the header row and the one question


def test_names_with_control_characters_are_refused_and_not_stored(teacher: httpx.Client) -> None:
    before = teacher.get("/api/classrooms").json()["classrooms"]
    for name in ("Class\r4B", "Class \x02", "\x1aClass", "Class\n4B"):
        response = teacher.post("/api/classrooms", json={"name": name})
        assert response.status_code == 422, name
        assert error_of(response)["code"] == "invalid_request"
        assert "control characters" in error_of(response)["message"]
    assert teacher.get("/api/classrooms").json()["classrooms"] == before
    classroom = create_classroom(teacher)
    renamed = teacher.patch(f"/api/classrooms/{classroom['id']}", json={"name": "4B\r\nSet-Cookie: x=y"})
    assert renamed.status_code == 422
    assert teacher.get(f"/api/classrooms/{classroom['id']}").json()["name"] == classroom["name"]
    refused = httpx.post(f"{teacher.base_url}/api/join", json={"join_code": classroom["join_code"], "name": "A\tda"})
    assert refused.status_code == 422


def test_unknown_routes_and_wrong_methods_answer_in_the_one_error_shape(service: str) -> None:
    missing = httpx.get(f"{service}/api/no-such-thing")
    assert missing.status_code == 404
    assert error_of(missing) == {"code": "not_found", "message": "There is nothing at this address."}
    wrong = httpx.delete(f"{service}/api/join")
    assert wrong.status_code == 405
    assert error_of(wrong)["code"] == "method_not_allowed"
    assert wrong.headers["allow"] == "POST"


def test_guessing_class_codes_or_passwords_is_stopped_per_client(settings: Settings) -> None:
    own = isolated(settings, auth=settings.auth.model_copy(update={"failed_attempts_per_client": 3}))
    email = new_teacher_account(own)
    with ServerThread(create_app(own)) as running, httpx.Client(base_url=running.url) as client:
        teacher = httpx.Client(base_url=running.url)
        assert teacher.post("/api/teacher/session", json={"email": email, "password": PASSWORD}).status_code == 200
        code = create_classroom(teacher)["join_code"]
        for i, guess in enumerate(("AAAA-AAAA", "BBBB-BBBB", "CCCC-CCCC")):
            assert client.post("/api/join", json={"join_code": guess, "name": f"Name {i}"}).status_code == 404
        stopped = client.post("/api/join", json={"join_code": code, "name": "Ada"})  # even the right code, now
        assert stopped.status_code == 429
        assert error_of(stopped)["code"] == "too_many_attempts"
        assert "wrong class codes" in error_of(stopped)["message"]
        assert 0 < int(stopped.headers["retry-after"]) <= own.auth.failed_attempts_window_s
        assert "set-cookie" not in stopped.headers

        for _ in range(3):
            wrong = client.post("/api/teacher/session", json={"email": email, "password": "not " + PASSWORD})
            assert wrong.status_code == 401
        refused = client.post("/api/teacher/session", json={"email": email, "password": PASSWORD})
        assert refused.status_code == 429 and "wrong passwords" in error_of(refused)["message"]
        # A teacher already signed in is not locked out of their class by someone else's guesses.
        assert teacher.get("/api/classrooms").status_code == 200
        teacher.close()
