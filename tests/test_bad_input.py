"""Bad input gets a clear error and loses nothing."""

import time
from pathlib import Path

import httpx

from service.app import create_app
from tests.conftest import ServerThread, free_port, service_settings
from tests.helpers import add_passage, ask_json, ask_streaming, create_classroom, passage_text, stored_questions


def error_of(response: httpx.Response) -> dict[str, str]:
    error: dict[str, str] = response.json()["error"]
    return error


def test_empty_question_is_refused_and_not_stored(api: httpx.Client) -> None:
    classroom = create_classroom(api)
    add_passage(api, classroom["id"], passage_text(100))
    response = ask_json(api, classroom["id"], "Ada", "   ")
    assert response.status_code == 422
    assert error_of(response) == {"code": "invalid_input", "message": "Please type a question before you send it."}
    assert stored_questions(api, classroom["id"]) == []


def test_missing_field_is_named(api: httpx.Client) -> None:
    classroom = create_classroom(api)
    response = api.post(f"/api/classrooms/{classroom['id']}/questions", json={"question": "Why?"})
    assert response.status_code == 422
    assert "'pupil' is missing" in error_of(response)["message"]


def test_passage_over_the_budget_says_how_many_tokens_to_cut_and_keeps_the_old_one(api: httpx.Client) -> None:
    classroom = create_classroom(api)
    first = add_passage(api, classroom["id"], passage_text(200))
    response = api.post(
        f"/api/classrooms/{classroom['id']}/passages", json={"title": "Too long", "text": passage_text(5000)}
    )
    assert response.status_code == 422
    error = error_of(response)
    assert error["code"] == "passage_too_long"
    limit = first["max_tokens"]
    assert f"at most {limit:,} tokens" in error["message"]
    assert "Please cut at least" in error["message"]
    # The earlier passage is still the one pupils ask about.
    assert ask_json(api, classroom["id"], "Ada", "Still there?").status_code == 200


def test_unknown_classroom_is_404_with_a_sentence(api: httpx.Client) -> None:
    for response in (
        ask_json(api, "nope", "Ada", "Why?"),
        api.get("/api/classrooms/nope/questions"),
        api.post("/api/classrooms/nope/passages", json={"title": "T", "text": "x"}),
    ):
        assert response.status_code == 404
        assert error_of(response) == {
            "code": "classroom_not_found",
            "message": "There is no classroom with the id 'nope'. Check the link or ask your teacher.",
        }


def test_question_before_any_passage_is_409(api: httpx.Client) -> None:
    classroom = create_classroom(api)
    response = ask_json(api, classroom["id"], "Ada", "Why?")
    assert response.status_code == 409
    assert "no passage yet" in error_of(response)["message"]


def test_dead_backend_is_a_503_within_2_seconds_and_nothing_stored_is_lost(
    api: httpx.Client, redis_url: str, model_dir: Path
) -> None:
    # Earlier work, through the healthy service.
    classroom = create_classroom(api)
    passage = add_passage(api, classroom["id"], passage_text(120))
    assert ask_json(api, classroom["id"], "Ada", "Before the outage?").status_code == 200

    # A second service process on the same Redis whose backend is a port nothing listens on.
    dead = service_settings(redis_url, f"http://127.0.0.1:{free_port()}/v1", model_dir)
    with ServerThread(create_app(dead)) as broken, httpx.Client(base_url=broken.url, timeout=10) as client:
        for ask in (ask_json, None):
            began = time.monotonic()
            if ask is None:
                response = client.post(
                    f"/api/classrooms/{classroom['id']}/questions", json={"pupil": "Ben", "question": "Streamed?"}
                )
            else:
                response = ask(client, classroom["id"], "Ben", "During the outage?")
            assert time.monotonic() - began < 2.0
            assert response.status_code == 503
            assert response.headers["retry-after"]
            assert error_of(response)["message"] == (
                "The answering service cannot be reached right now. Your question was saved; "
                "please try again in a minute."
            )
        assert client.get("/readyz").status_code == 503

    # Everything is still there, and the failed questions are recorded as such.
    questions = stored_questions(api, classroom["id"])
    assert [(q["question"], q["status"]) for q in questions] == [
        ("Streamed?", "failed"),
        ("During the outage?", "failed"),
        ("Before the outage?", "answered"),
    ]
    assert questions[2]["answer"]
    assert ask_streaming(api, classroom["id"], "Ada", "After the outage?").done is not None
    assert passage["id"] == stored_questions(api, classroom["id"])[0]["passage_id"]


def test_readyz_reports_redis_backend_and_model(api: httpx.Client) -> None:
    response = api.get("/readyz")
    assert response.status_code == 200
    body = response.json()
    assert body["redis"] == "ok" and body["backend"] == "ok"
    assert "OFFLINE STAND-IN" in body["model"]
    assert api.get("/healthz").json() == {"status": "ok"}
