"""Every request is authorised: pupils stay in their class, teachers in theirs, operators alone on theirs."""

import httpx
import pytest
from pydantic import ValidationError

from service.settings import Settings
from tests.helpers import Join, add_passage, ask_json, create_classroom, error_of, passage_text, signed_in_teacher


def test_a_pupil_of_class_a_can_neither_post_to_nor_read_class_b(
    teacher: httpx.Client, join: Join, settings: Settings, service: str
) -> None:
    class_a = create_classroom(teacher, "A")
    add_passage(teacher, class_a["id"], passage_text(80))
    other_teacher = signed_in_teacher(settings, service)
    class_b = create_classroom(other_teacher, "B")
    add_passage(other_teacher, class_b["id"], passage_text(80))
    ada = join(class_a["join_code"], "Ada")
    bea = join(class_b["join_code"], "Bea")
    assert ask_json(bea, class_b["id"], "A question in B?").status_code == 200

    response = ask_json(ada, class_b["id"], "Can I post to B?")
    assert response.status_code == 403
    assert error_of(response)["code"] == "wrong_classroom"
    for path in (f"/api/classrooms/{class_b['id']}/questions", f"/api/classrooms/{class_b['id']}"):
        assert ada.get(path).status_code == 401  # a pupil's session is no teacher's
    assert ada.get("/api/pupil/questions").json()["questions"] == []
    assert ada.get("/api/pupil/me").json()["classroom_id"] == class_a["id"]
    other_teacher.close()


def test_a_pupil_sees_only_their_own_questions(teacher: httpx.Client, join: Join) -> None:
    classroom = create_classroom(teacher)
    add_passage(teacher, classroom["id"], passage_text(80))
    ada, ben = join(classroom["join_code"], "Ada"), join(classroom["join_code"], "Ben")
    assert ask_json(ada, classroom["id"], "Ada's question?").status_code == 200
    assert ask_json(ben, classroom["id"], "Ben's question?").status_code == 200
    assert [q["question"] for q in ada.get("/api/pupil/questions").json()["questions"]] == ["Ada's question?"]
    assert [q["question"] for q in ben.get("/api/pupil/questions").json()["questions"]] == ["Ben's question?"]


def test_a_teacher_cannot_open_another_teachers_class(teacher: httpx.Client, settings: Settings, service: str) -> None:
    theirs = signed_in_teacher(settings, service)
    classroom = create_classroom(theirs)
    cid = classroom["id"]
    attempts = [
        teacher.get(f"/api/classrooms/{cid}"),
        teacher.get(f"/api/classrooms/{cid}/questions"),
        teacher.get(f"/api/classrooms/{cid}/questions.csv"),
        teacher.get(f"/api/classrooms/{cid}/events"),
        teacher.post(f"/api/classrooms/{cid}/passages", json={"title": "Mine", "text": "Not yours."}),
        teacher.patch(f"/api/classrooms/{cid}", json={"is_open": False}),
        teacher.put(f"/api/classrooms/{cid}/active-passage", json={"passage_id": "x"}),
    ]
    for response in attempts:
        assert response.status_code == 404, response.request.url
        assert error_of(response)["code"] == "classroom_not_found"
    assert cid not in [c["id"] for c in teacher.get("/api/classrooms").json()["classrooms"]]
    assert theirs.get(f"/api/classrooms/{cid}").json()["is_open"] is True
    theirs.close()


def test_teacher_routes_refuse_anyone_not_signed_in(service: str) -> None:
    response = httpx.post(f"{service}/api/classrooms", json={"name": "Sneaky"})
    assert response.status_code == 401
    assert error_of(response)["message"] == "Please sign in as a teacher first."
    response = httpx.get(f"{service}/api/classrooms", headers={"Authorization": "Bearer forged"})
    assert response.status_code == 401
    assert error_of(response)["code"] == "session_expired"


def test_operator_routes_refuse_everyone_else(teacher: httpx.Client, join: Join, settings: Settings) -> None:
    classroom = create_classroom(teacher)
    pupil = join(classroom["join_code"], "Ada")
    token = settings.auth.operator_token.get_secret_value()
    base = str(teacher.base_url)
    refusals = [
        httpx.get(f"{base}/api/operator/status"),
        httpx.get(f"{base}/api/operator/status", headers={"Authorization": "Bearer not-the-token"}),
        httpx.get(f"{base}/api/operator/status", headers={"Authorization": token}),  # no scheme
        teacher.get("/api/operator/status"),
        pupil.get("/api/operator/status"),
    ]
    for response in refusals:
        assert response.status_code == 403
        assert error_of(response)["code"] == "operator_only"
    allowed = httpx.get(f"{base}/api/operator/status", headers={"Authorization": f"Bearer {token}"})
    assert allowed.status_code == 200
    assert allowed.json()["served_model_name"] == settings.served_name()


def test_placeholder_operator_token_is_refused_in_production() -> None:
    with pytest.raises(ValidationError, match="CLASSROOM_AUTH__OPERATOR_TOKEN"):
        Settings(environment="production")
