"""Two real vLLM-CPU replicas behind the service: switching, affinity, failover, warm-up, metrics."""

import json
import re
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_sse import connect_sse
from typer.testing import CliRunner

from service.app import create_app
from service.backends.routing import rendezvous_order
from service.backends.vllm_metrics import VLLM_NAMES, parse_vllm_metrics, sum_samples
from service.cli import app
from service.settings import PROJECT_ROOT, RoutingSettings, Settings
from tests.backends import backends_file, replica_healthy, running
from tests.figures import report
from tests.helpers import (
    Join,
    add_passage,
    ask_json,
    ask_streaming,
    ask_then_stop,
    create_classroom,
    eventually,
    joined_pupil,
    metric_samples,
    operator_headers,
    passage_text,
    requests_asking_for,
    routed_questions,
    stored_questions,
    wait_until_warmed,
    warmup_burst_requests,
)
from tests.servers import ServerThread, Vllm, isolated, routing


@pytest.mark.slow  # a second vLLM (~35 s to start here), stopped and started
def test_switching_variants_while_pupils_ask_loses_no_question(
    settings: Settings, vllm: Vllm, second_vllm: Vllm, tmp_path: Path
) -> None:
    file = backends_file(tmp_path, {"original": [vllm.base_url], "fp8": [second_vllm.base_url]}, "original")
    own = isolated(settings, routing=routing(backends_file=file))
    with running(own) as (url, teacher, operator):
        classroom = create_classroom(teacher)
        add_passage(teacher, classroom["id"], passage_text(200))
        pupils = [joined_pupil(url, classroom["join_code"], f"pupil {i}") for i in range(6)]
        outcomes: list[int] = []

        def keep_asking(pupil: httpx.Client) -> None:
            for n in range(3):
                outcomes.append(ask_json(pupil, classroom["id"], f"Question {n}?").status_code)

        # One answer is streaming at the moment of the switch...
        in_flight = f"/api/classrooms/{classroom['id']}/questions"
        with connect_sse(pupils[0], "POST", in_flight, json={"question": "Streaming through the switch?"}) as source:
            events = source.iter_sse()
            assert next(events).event == "question"
            assert next(events).event == "token"
            # ...and five pupils keep asking while the operator switches.
            threads = [threading.Thread(target=keep_asking, args=(p,)) for p in pupils[1:]]
            for thread in threads:
                thread.start()
            eventually(lambda: len(outcomes) >= 3, "a few questions were answered before the switch")
            switched = operator.put("/api/operator/backends/active", json={"variant": "fp8"})
            assert switched.status_code == 200 and switched.json()["config"]["active"] == "fp8"
            rest = [e.event for e in events]
            assert rest[-1] == "done" and "error" not in rest
            for thread in threads:
                thread.join(120)

        assert outcomes == [200] * 15
        questions = routed_questions(operator, classroom["id"])
        assert len(questions) == 16 and all(q["status"] == "answered" for q in questions)
        assert all("replica" not in q for q in stored_questions(teacher, classroom["id"]))  # operators' alone
        streamed = next(q for q in questions if q["question"] == "Streaming through the switch?")
        assert (streamed["variant"], streamed["replica"]) == ("original", vllm.base_url)
        by_variant = {v: [q for q in questions if q["variant"] == v] for v in ("original", "fp8")}
        assert by_variant["original"] and by_variant["fp8"], "questions went to both sides of the switch"
        assert {q["replica"] for q in by_variant["fp8"]} == {second_vllm.base_url}
        for pupil in pupils:
            pupil.close()


@pytest.mark.slow  # a second vLLM (~35 s to start here), stopped and started
def test_affinity_failover_and_return_with_two_replicas(
    settings: Settings, vllm: Vllm, second_vllm: Vllm, tmp_path: Path
) -> None:
    replicas = [vllm.base_url, second_vllm.base_url]
    own = isolated(
        settings,
        # As deployed, with the warm-up burst: a replica back from a restart gets one.
        routing=RoutingSettings(backends_file=backends_file(tmp_path, {"original": replicas}, "original")),
    )
    with running(own) as (url, teacher, operator):
        # Classes until both replicas own at least one passage (each passage id is random).
        classes: list[tuple[dict[str, Any], str]] = []
        while {home for _, home in classes} != set(replicas):
            classroom = create_classroom(teacher)
            passage = add_passage(teacher, classroom["id"], passage_text(300))
            classes.append((classroom, rendezvous_order(passage["id"], replicas)[0]))

        # Every question on a passage goes to the replica that owns it, already warmed for the first pupil.
        for classroom, home in classes:
            assert wait_until_warmed(operator, classroom["id"]) == [home]
            for name in ("Ada", "Ben", "Cy"):
                with closing(joined_pupil(url, classroom["join_code"], name)) as pupil:
                    answer = ask_json(pupil, classroom["id"], f"{name} asks?").json()
                    assert answer["usage"]["cached_tokens"] > 0
            assert {q["replica"] for q in routed_questions(operator, classroom["id"])} == {home}

        # The second replica stops: its classes' questions go to the first, and none fails.
        moved, home = next((c, h) for c, h in classes if h == second_vllm.base_url)
        second_vllm.stop()
        try:
            with closing(joined_pupil(url, moved["join_code"], "Di")) as pupil:
                answer = ask_json(pupil, moved["id"], "While it is down?")
                assert answer.status_code == 200
            assert routed_questions(operator, moved["id"])[0]["replica"] == vllm.base_url
            eventually(lambda: not replica_healthy(operator, home), "the probes saw the replica go")
        finally:
            restart_s = second_vllm.start()

        # It comes back: the probes see it, send it a new warm-up burst (a new run of the replica, its
        # counters from 0), warm its passages again, and its classes return to it.
        eventually(lambda: replica_healthy(operator, home), "the probes saw the replica come back")
        eventually(
            lambda: requests_asking_for(second_vllm.metrics(), 0, 1) > 0,  # for 1 token: a passage's warm-up
            "the passages were sent to the restarted replica ahead of the pupils",
        )
        burst = own.routing.warmup_burst
        eventually(
            lambda: warmup_burst_requests(second_vllm.metrics()) >= burst, "the restarted replica's burst was answered"
        )
        with closing(joined_pupil(url, moved["join_code"], "Ed")) as pupil:
            answer = ask_json(pupil, moved["id"], "Back again?").json()
        assert routed_questions(operator, moved["id"])[0]["replica"] == home
        assert answer["usage"]["cached_tokens"] > 0
        assert warmup_burst_requests(second_vllm.metrics()) == burst  # one burst since it came back, no more
        report("replica restart until ready (s)", round(restart_s, 1))


@pytest.mark.slow  # a second vLLM (~35 s to start here), stopped and started
def test_every_process_follows_a_switch_and_bad_changes_are_refused(
    settings: Settings, vllm: Vllm, second_vllm: Vllm, tmp_path: Path
) -> None:
    file = backends_file(tmp_path, {"original": [vllm.base_url], "fp8": [second_vllm.base_url]}, "original")
    own = isolated(settings, routing=routing(backends_file=file, warmup=False))
    with running(own) as (_, _, first), ServerThread(create_app(own)) as other:
        second = httpx.Client(base_url=other.url, headers=operator_headers(own), timeout=10)
        assert second.get("/api/operator/backends").json()["config"]["active"] == "original"
        began = time.monotonic()
        first.put("/api/operator/backends/canary", json={"variant": "fp8", "percent": 25})
        eventually(
            lambda: second.get("/api/operator/backends").json()["config"]["canary"] is not None,
            "the other process followed",
        )
        report("a change reached another service process after (s)", round(time.monotonic() - began, 2))
        config = second.get("/api/operator/backends").json()["config"]
        assert config["canary"] == {"variant": "fp8", "percent": 25} and config["version"] == 1

        for attempt, message in (
            (first.put("/api/operator/backends/active", json={"variant": "nope"}), "is not one of"),
            (first.put("/api/operator/backends/canary", json={"variant": "original", "percent": 5}), "another variant"),
            (first.put("/api/operator/backends/variants/x", json={"replicas": []}), "at least 1"),
        ):
            assert attempt.status_code == 422
            assert message in attempt.json()["error"]["message"]
        switched = first.put("/api/operator/backends/active", json={"variant": "fp8"}).json()["config"]
        assert switched["active"] == "fp8" and switched["canary"] is None  # the canary became the active one
        second.close()


def test_metrics_agree_with_the_stored_records(teacher: httpx.Client, join: Join, service: str) -> None:
    classroom = create_classroom(teacher)
    add_passage(teacher, classroom["id"], passage_text(150))
    for name in ("Ada", "Ben", "Cy"):
        assert ask_streaming(join(classroom["join_code"], name), classroom["id"], "Why?").done is not None
    ask_then_stop(join(classroom["join_code"], "Di"), classroom["id"], "Stopping early?")  # cut short
    eventually(
        lambda: stored_questions(teacher, classroom["id"])[0]["status"] == "incomplete",
        "the answer was stored as cut short",
    )

    records = stored_questions(teacher, classroom["id"])
    samples = metric_samples(httpx.get(f"{service}/metrics").text, classroom["id"])
    for outcome in ("answered", "incomplete"):
        assert samples[("classroom_questions_total", outcome)] == sum(q["status"] == outcome for q in records)
    for metric, field in (
        ("classroom_prompt_tokens_total", "prompt_tokens"),
        ("classroom_cached_prompt_tokens_total", "cached_tokens"),
        ("classroom_completion_tokens_total", "completion_tokens"),
    ):
        assert samples[(metric, "")] == sum(q["usage"][field] for q in records if q["usage"])
    answered_with_ttft = sum(q["ttft_ms"] is not None for q in records)
    assert samples[("classroom_time_to_first_token_seconds_count", "")] == answered_with_ttft
    assert samples[("classroom_request_duration_seconds_count", "")] == len(records)

    # The teacher's own figures for the last hour come from the same records.
    figures = teacher.get(f"/api/classrooms/{classroom['id']}/stats").json()
    assert figures["questions"] == len(records) and figures["answered"] == 3
    cached = sum(q["usage"]["cached_tokens"] for q in records if q["usage"])
    prompt = sum(q["usage"]["prompt_tokens"] for q in records if q["usage"])
    assert figures["cache_hit_ratio"] == cached / prompt
    ttfts = sorted(q["ttft_ms"] for q in records if q["ttft_ms"] is not None)
    assert ttfts[0] <= figures["ttft_p50_ms"] <= figures["ttft_p95_ms"] <= ttfts[-1]


def test_the_dashboard_shows_metrics_the_service_really_exports(
    teacher: httpx.Client, join: Join, service: str
) -> None:
    classroom = create_classroom(teacher)
    add_passage(teacher, classroom["id"], passage_text(60))
    assert ask_json(join(classroom["join_code"], "Ada"), classroom["id"], "Why?").status_code == 200
    exported = set(sum_samples(httpx.get(f"{service}/metrics").text))
    dashboard = json.loads((PROJECT_ROOT / "deploy" / "grafana" / "dashboards" / "classroom.json").read_text())
    shown = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\bclassroom_[a-z_]+", target["expr"])
    }
    assert len(shown) >= 8
    assert shown <= exported, f"the dashboard asks for what the service does not export: {shown - exported}"


@pytest.mark.slow  # a second vLLM (~35 s to start here), stopped and started
def test_an_operator_loads_a_new_backends_file_from_the_command_line(
    settings: Settings, vllm: Vllm, second_vllm: Vllm, tmp_path: Path
) -> None:
    own = isolated(settings, routing=routing(warmup=False))
    with running(own) as (_, _, operator):
        assert operator.get("/api/operator/backends").json()["config"]["variants"].keys() == {"original"}
        file = backends_file(tmp_path, {"original": [vllm.base_url], "fp8": [second_vllm.base_url]}, "fp8")
        loaded = CliRunner().invoke(app, ["backends", "load", str(file)], env={"CLASSROOM_REDIS__URL": own.redis.url})
        assert loaded.exit_code == 0, loaded.output
        assert "active fp8" in loaded.output
        eventually(
            lambda: operator.get("/api/operator/backends").json()["config"]["active"] == "fp8",
            "the service followed the file",
        )
        broken = tmp_path / "broken.yaml"
        broken.write_text("active: nowhere\nvariants: {}\n")
        refused = CliRunner().invoke(
            app, ["backends", "load", str(broken)], env={"CLASSROOM_REDIS__URL": own.redis.url}
        )
        assert refused.exit_code != 0 and "nowhere" in refused.output


def test_the_probe_reads_a_real_vllm_s_figures_from_its_own_lines_only(vllm: Vllm) -> None:
    """The probe parses only the lines it needs (the whole text stalls the event loop for milliseconds):
    what it reads must be what parsing all of the real server's /metrics says, after real traffic."""
    body = {"model": "Qwen/Qwen2.5-1.5B-Instruct", "prompt": "The tide came in over the flats", "max_tokens": 4}
    httpx.post(f"{vllm.base_url}/completions", json=body, timeout=60).raise_for_status()
    text = httpx.get(f"{vllm.root_url}/metrics").text
    everything = sum_samples(text)
    expected = {
        figure: next(everything[name] for name in names if name in everything)
        for figure, names in VLLM_NAMES.items()
        if any(name in everything for name in names)
    }
    assert expected["prefix_cache_queries"] > 0, "the request above should have counted"
    assert parse_vllm_metrics(text).model_dump() == {**parse_vllm_metrics("").model_dump(), **expected}
