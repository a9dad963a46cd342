"""What each audience receives, what another site can make a browser do, and what never reaches a log."""

import httpx
import pytest
from pydantic import ValidationError

from service.settings import AuthSettings, Settings
from tests.helpers import (
    PASSWORD,
    Join,
    add_passage,
    ask_json,
    create_classroom,
    error_of,
    joined_pupil,
    new_teacher_account,
    operator_headers,
    passage_text,
    routed_questions,
    stored_questions,
)
from tests.servers import service_process


def test_pages_forbid_framing_other_scripts_and_sniffing(service: str) -> None:
    for path in ("/", "/teacher/login", "/operator", "/static/common.js"):
        response = httpx.get(f"{service}{path}")
        assert response.status_code == 200, path
        policy = response.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in policy and "script-src 'self'" in policy
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["referrer-policy"] == "same-origin"


def test_another_site_cannot_write_with_a_teachers_or_pupils_cookie(teacher: httpx.Client, join: Join) -> None:
    classroom = create_classroom(teacher)
    add_passage(teacher, classroom["id"], passage_text(60))
    before = teacher.get("/api/classrooms").json()["classrooms"]
    for headers in ({"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"}):
        refused = teacher.post("/api/classrooms", json={"name": "Planted"}, headers=headers)
        assert refused.status_code == 403
        assert error_of(refused)["code"] == "cross_site_request"
        closed = teacher.patch(f"/api/classrooms/{classroom['id']}", json={"is_open": False}, headers=headers)
        assert closed.status_code == 403
    assert teacher.get("/api/classrooms").json()["classrooms"] == before

    ada = join(classroom["join_code"], "Ada")
    asked = ada.post(
        f"/api/classrooms/{classroom['id']}/questions",
        json={"question": "Why?"},
        headers={"Origin": "https://evil.example", "Accept": "application/json"},
    )
    assert asked.status_code == 403
    assert stored_questions(teacher, classroom["id"]) == []
    # The page's own origin writes as before.
    same = teacher.post("/api/classrooms", json={"name": "4C"}, headers={"Origin": str(teacher.base_url)})
    assert same.status_code in (200, 201)


def test_each_audience_sees_its_own_view_and_operators_alone_the_replicas(
    teacher: httpx.Client, join: Join, settings: Settings
) -> None:
    classroom = create_classroom(teacher)
    add_passage(teacher, classroom["id"], passage_text(60))
    ada = join(classroom["join_code"], "Ada")
    assert ask_json(ada, classroom["id"], "Why do bees dance?").status_code == 200
    [mine] = ada.get("/api/pupil/questions").json()["questions"]
    assert set(mine) == {"id", "passage_id", "question", "status", "answer", "error", "asked_at", "finished_at"}
    [theirs] = stored_questions(teacher, classroom["id"])
    assert {"pupil_id", "replica", "variant"}.isdisjoint(theirs) and theirs["pupil"] == "Ada"
    detail = teacher.get(f"/api/classrooms/{classroom['id']}").json()
    assert settings.backend.base_url not in str(detail)
    with httpx.Client(base_url=teacher.base_url, headers=operator_headers(settings)) as operator:
        [whole] = routed_questions(operator, classroom["id"])
        assert whole["pupil_id"] and whole["replica"] == settings.backend.base_url
        assert teacher.get(f"/api/operator/classrooms/{classroom['id']}").status_code in (401, 403)


def test_production_refuses_cookies_that_travel_without_https() -> None:
    token = AuthSettings(operator_token="a-real-operator-token-of-enough-length")
    with pytest.raises(ValidationError, match="CLASSROOM_AUTH__SECURE_COOKIES"):
        Settings(environment="production", auth=token)
    secure = token.model_copy(update={"secure_cookies": True})
    assert Settings(environment="production", auth=secure).auth.secure_cookies


def test_passwords_tokens_and_sessions_never_reach_the_log_or_metrics(vllm_settings: Settings) -> None:
    with service_process(vllm_settings) as running, httpx.Client(base_url=running.url) as teacher:
        email = new_teacher_account(vllm_settings)
        assert teacher.post("/api/teacher/session", json={"email": email, "password": PASSWORD}).status_code == 200
        assert teacher.post("/api/teacher/session", json={"email": email, "password": "wrong " + PASSWORD}).is_error
        classroom = create_classroom(teacher)
        add_passage(teacher, classroom["id"], passage_text(60))
        pupil = joined_pupil(running.url, classroom["join_code"], "Ada")
        try:
            assert ask_json(pupil, classroom["id"], "Why?").status_code == 200
            cookies = [*teacher.cookies.values(), *pupil.cookies.values()]
        finally:
            pupil.close()
        assert (
            httpx.get(f"{running.url}/api/operator/status", headers=operator_headers(vllm_settings)).status_code == 200
        )
        assert httpx.get(f"{running.url}/api/operator/status", headers={"Authorization": "Bearer nope-x"}).is_error
        metrics = httpx.get(f"{running.url}/metrics").text
    secrets = [PASSWORD, vllm_settings.auth.operator_token.get_secret_value(), "nope-x", *cookies]
    assert len(secrets) >= 5
    log = running.log.read_text()
    assert log, "the service wrote nothing to its log"
    assert [s for s in secrets if s in log or s in metrics] == []
