"""What signed-in answers tell caches, what an unknown address answers, and the operator's console API: a
switch to the variant already active is no change, and the figures name classes by code and teacher."""

import time
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

import httpx
from httpx_sse import connect_sse

from service.classroom.answer_stream import MIDSTREAM_FAILURE
from service.classroom.figures import figures
from service.records import STOPPED, QuestionRecord, QuestionStatus
from service.settings import PROJECT_ROOT, Settings
from tests.backends import backends_file, running
from tests.helpers import (
    Join,
    add_passage,
    ask_json,
    ask_then_stop,
    create_classroom,
    eventually,
    operator_headers,
    passage_text,
    requests_asking_for,
    signed_in_teacher,
    stored_questions,
    wait_until_warmed,
)
from tests.servers import Vllm, isolated, routing

BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"


def cache_controls(response: httpx.Response) -> list[str]:
    return response.headers.get_list("cache-control")


def test_signed_in_pages_and_api_answers_are_never_stored(
    settings: Settings, service: str, teacher: httpx.Client, join: Join
) -> None:
    classroom = create_classroom(teacher)
    cid = classroom["id"]
    add_passage(teacher, cid, passage_text(60))
    pupil = join(classroom["join_code"], "Ada")
    assert ask_json(pupil, cid, "Why?").status_code == 200
    operator = httpx.Client(base_url=service, headers=operator_headers(settings), timeout=30)
    answers = {
        # the signed-in pages
        "teacher's classes": teacher.get("/teacher"),
        "teacher's class": teacher.get(f"/teacher/classes/{cid}"),
        "pupil's class": pupil.get("/class"),
        "operator's console": operator.get("/operator"),
        # the teachers' API
        "GET /api/teacher/me": teacher.get("/api/teacher/me"),
        "GET /api/classrooms": teacher.get("/api/classrooms"),
        "GET /api/classrooms/{id}": teacher.get(f"/api/classrooms/{cid}"),
        "GET questions": teacher.get(f"/api/classrooms/{cid}/questions"),
        "GET questions.csv": teacher.get(f"/api/classrooms/{cid}/questions.csv"),
        "GET stats": teacher.get(f"/api/classrooms/{cid}/stats"),
        "POST /api/classrooms": teacher.post("/api/classrooms", json={"name": "Another"}),
        "PATCH /api/classrooms/{id}": teacher.patch(f"/api/classrooms/{cid}", json={"name": "Class 4B"}),
        # the pupils'
        "GET /api/pupil/me": pupil.get("/api/pupil/me"),
        "GET /api/pupil/questions": pupil.get("/api/pupil/questions"),
        # the operators'
        "GET backends": operator.get("/api/operator/backends"),
        "GET stats (operator)": operator.get("/api/operator/stats"),
        "GET status": operator.get("/api/operator/status"),
        "GET classrooms/{id}": operator.get(f"/api/operator/classrooms/{cid}"),
        # and their errors
        "401": httpx.get(f"{service}/api/classrooms"),
        "404": teacher.get("/api/classrooms/nothing-here"),
    }
    for what, response in answers.items():
        assert response.status_code < 500, (what, response.text)
        assert cache_controls(response) == ["no-store"], what

    # The streams keep their own no-store (once, not twice); the answer's passes the middleware untouched.
    with connect_sse(pupil, "POST", f"/api/classrooms/{cid}/questions", json={"question": "And?"}) as source:
        assert cache_controls(source.response) == ["no-store, no-transform"]
        assert [e.event for e in source.iter_sse()][-1] == "done"
    with teacher.stream("GET", f"/api/classrooms/{cid}/events") as feed:
        assert feed.status_code == 200 and cache_controls(feed) == ["no-store, no-transform"]

    # Our own scripts, styles and icon may be kept.
    for path in ("/static/style.css", "/static/operator.js", "/static/favicon.svg"):
        response = httpx.get(f"{service}{path}")
        assert response.status_code == 200 and "no-store" not in response.headers.get("cache-control", ""), path
    operator.close()


def test_unknown_addresses_answer_a_page_to_browsers_and_the_error_shape_to_the_rest(service: str) -> None:
    page = httpx.get(f"{service}/no/such/page", headers={"Accept": BROWSER_ACCEPT})
    assert page.status_code == 404
    assert page.headers["content-type"].startswith("text/html")
    assert "There is no page here" in page.text and 'href="/"' in page.text
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]  # a page like the others
    for path, accept in (
        ("/api/no/such/thing", BROWSER_ACCEPT),  # the API answers JSON, whoever asks
        ("/no/such/page", "application/json"),
        ("/no/such/page", "*/*"),  # curl
    ):
        response = httpx.get(f"{service}{path}", headers={"Accept": accept})
        assert response.status_code == 404, path
        assert response.json() == {"error": {"code": "not_found", "message": "There is nothing at this address."}}
    # A missing script is no page either.
    assert httpx.get(f"{service}/static/nothing.js", headers={"Accept": "*/*"}).json()["error"]["code"] == "not_found"


def test_the_favicon_is_linked_and_answers_at_favicon_ico(service: str) -> None:
    icon = (PROJECT_ROOT / "frontend" / "static" / "favicon.svg").read_bytes()
    link = f'<link rel="icon" href="{service}/static/favicon.svg" type="image/svg+xml">'
    assert link in httpx.get(f"{service}/").text
    for path in ("/favicon.ico", "/static/favicon.svg"):
        response = httpx.get(f"{service}{path}")
        assert response.status_code == 200, path
        assert response.headers["content-type"].startswith("image/svg+xml") and response.content == icon


def test_choosing_the_active_variant_again_keeps_the_version_and_warms_nothing(
    settings: Settings, vllm: Vllm, tmp_path: Path
) -> None:
    # Two variants on the one real replica: a real switch warms the passage there, so its absence is measured.
    file = backends_file(tmp_path, {"original": [vllm.base_url], "copy": [vllm.base_url]}, "original")
    own = isolated(settings, routing=routing(backends_file=file))
    with running(own) as (_, teacher, operator):
        classroom = create_classroom(teacher)
        add_passage(teacher, classroom["id"], passage_text(200))
        assert wait_until_warmed(operator, classroom["id"]) == [vllm.base_url]

        def warmups() -> float:  # requests for one token: passages' warm-ups
            return requests_asking_for(vllm.metrics(), 0, 1)

        settled = [warmups()]

        def a_second_later() -> list[float]:
            time.sleep(1)
            settled.append(warmups())
            return settled

        # The same count a second apart.
        eventually(
            a_second_later, "vLLM's counters settled", 30, until=lambda counts: counts[-1] == counts[-2], every_s=0
        )
        before = operator.get("/api/operator/backends").json()["config"]
        for again in (
            operator.put("/api/operator/backends/active", json={"variant": "original"}),
            operator.put("/api/operator/backends/variants/copy", json={"replicas": [vllm.base_url]}),
        ):
            assert again.status_code == 200, again.text
            assert again.json()["config"] == before  # the same version: nothing changed
        time.sleep(4 * own.routing.config_poll_s + 1)  # time for a re-warm, had one been sent
        assert warmups() == settled[-1]
        assert operator.get("/api/operator/backends").json()["config"] == before

        # The control: a real switch is a new version and warms the passage on the variant switched to.
        switched = operator.put("/api/operator/backends/active", json={"variant": "copy"}).json()["config"]
        assert switched["active"] == "copy" and switched["version"] == before["version"] + 1
        eventually(lambda: warmups() > settled[-1], "the switch warmed the passage")


def test_operator_figures_name_each_class_by_code_and_teacher_and_count_errors(
    settings: Settings, service: str, join: Join
) -> None:
    with closing(signed_in_teacher(settings, service, name="Mr Okafor")) as teacher:
        classroom = create_classroom(teacher, "Class 4B")
        add_passage(teacher, classroom["id"], passage_text(60))
        assert ask_json(join(classroom["join_code"], "Ada"), classroom["id"], "Why?").status_code == 200
        ask_then_stop(join(classroom["join_code"], "Ben"), classroom["id"], "Gone?")
        eventually(
            lambda: stored_questions(teacher, classroom["id"])[0]["status"] == "incomplete",
            "the cut-short answer was stored",
            30,
        )
    with httpx.Client(base_url=service, headers=operator_headers(settings), timeout=30) as operator:
        body = operator.get("/api/operator/stats").json()
    assert body["classrooms"][classroom["id"]] == {
        "name": "Class 4B",
        "join_code": classroom["join_code"],
        "teacher": "Mr Okafor",
    }
    mine = body["by_classroom"][classroom["id"]]
    assert (mine["questions"], mine["answered"], mine["errors"]) == (2, 1, 0)  # a pupil stopping is no error
    points = body["series"]["original"]
    assert len(points) >= 60 and sum(p["questions"] for p in points) == body["by_variant"]["original"]["questions"]
    assert sum(p["errors"] for p in points) == body["by_variant"]["original"]["errors"]


def test_errors_are_questions_left_unanswered_on_our_side() -> None:
    def record(status: QuestionStatus, error: str | None = None) -> QuestionRecord:
        return QuestionRecord(
            id="q", classroom_id="c", passage_id="p", pupil_id="u", pupil="Ada", question="?", status=status,
            error=error, asked_at=datetime.now(UTC),
        )  # fmt: skip

    counted = figures(
        [
            record(QuestionStatus.ANSWERED),
            record(QuestionStatus.INCOMPLETE, MIDSTREAM_FAILURE),  # the backend stopped
            record(QuestionStatus.FAILED, "The answering service cannot be reached."),
            record(QuestionStatus.REFUSED, "Many pupils are asking."),
            record(QuestionStatus.INCOMPLETE, STOPPED),  # the pupil stopped it: not ours
            record(QuestionStatus.FAILED, STOPPED),  # stopped while waiting in line
            record(QuestionStatus.ANSWERING),
        ]
    )
    assert (counted.questions, counted.answered, counted.errors) == (7, 1, 3)
