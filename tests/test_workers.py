"""The service as several worker processes behind one port (`classroom serve --workers 2`), on the real
Redis and vLLM: every worker answers pupils, and /metrics, whichever worker a scrape reaches, counts every
stored question once (service/telemetry/scrape.py)."""

import socket
from contextlib import ExitStack, closing
from pathlib import Path

import httpx
import pytest

from service.settings import Settings
from tests.helpers import (
    add_passage,
    ask_json,
    create_classroom,
    eventually,
    joined_pupil,
    metric_samples,
    passage_text,
    signed_in_teacher,
    stored_questions,
)
from tests.servers import instant_fake_vllm, isolated, service_process

pytestmark = pytest.mark.slow  # service processes of several workers


def worker_metrics(path: Path) -> str:
    """What one worker alone counted, as it tells its siblings."""
    with socket.socket(socket.AF_UNIX) as conn:
        conn.connect(str(path))
        chunks = []
        while data := conn.recv(65536):
            chunks.append(data)
    return b"".join(chunks).decode()


def answered(text: str, classroom_id: str) -> float:
    return metric_samples(text, classroom_id).get(("classroom_questions_total", "answered"), 0.0)


def test_two_workers_answer_pupils_and_their_metrics_add_up_to_the_records(vllm_settings: Settings) -> None:
    own = isolated(vllm_settings)
    with service_process(own, workers=2) as service, closing(signed_in_teacher(own, service.url)) as teacher:
        sockets = eventually(
            lambda: sorted(service.metrics_dir.glob("*.sock")),
            "both workers listened for their siblings",
            30,
            until=lambda found: len(found) >= 2,
        )
        assert len(sockets) == 2, "each worker listens for its siblings"
        classroom = create_classroom(teacher)
        add_passage(teacher, classroom["id"], passage_text(150))
        # Each pupil comes on a connection of their own, which either worker may take: ask until both have
        # answered some.
        for n in range(40):
            with closing(joined_pupil(service.url, classroom["join_code"], f"Pupil {n}")) as pupil:
                assert ask_json(pupil, classroom["id"], "Why do bees dance?").status_code == 200
            per_worker = [answered(worker_metrics(s), classroom["id"]) for s in sockets]
            if n >= 3 and all(per_worker):
                break
        assert all(per_worker), f"one worker took every question: {per_worker}"

        records = stored_questions(teacher, classroom["id"], limit="100")
        assert sum(per_worker) == len(records)
        for _ in range(6):  # a scrape may reach either worker: each gives the sum of both
            samples = metric_samples(httpx.get(f"{service.url}/metrics").text, classroom["id"])
            assert samples[("classroom_questions_total", "answered")] == len(records)
            assert samples[("classroom_completion_tokens_total", "")] == sum(
                q["usage"]["completion_tokens"] for q in records
            )
            assert samples[("classroom_time_to_first_token_seconds_count", "")] == len(records)


def in_flight(text: str) -> float:
    found = [line for line in text.splitlines() if line.startswith("classroom_answers_in_flight ")]
    assert len(found) == 1, text
    return float(found[0].split()[1])


def test_answers_in_flight_add_up_over_the_workers_while_they_stream(settings: Settings) -> None:
    """The autoscaler's metric: answers being written now, on every worker, whichever worker the scrape reaches."""
    with instant_fake_vllm() as replica:
        root = replica.removesuffix("/v1")
        httpx.post(f"{root}/fake/config", json={"tpot_ms": 100, "answer_tokens": 40}, timeout=5).raise_for_status()
        own = isolated(settings, backend=settings.backend.model_copy(update={"base_url": replica}))
        with (
            service_process(own, workers=2) as service,
            closing(signed_in_teacher(own, service.url)) as teacher,
        ):
            # Ready means one worker answers; on a loaded machine the second may not serve its figures yet.
            eventually(lambda: len(list(service.metrics_dir.glob("*.sock"))) == 2, "both workers serve their figures")
            classroom = create_classroom(teacher)
            add_passage(teacher, classroom["id"], passage_text(60))
            assert in_flight(httpx.get(f"{service.url}/metrics").text) == 0
            pupils = [joined_pupil(service.url, classroom["join_code"], f"Pupil {n}") for n in range(6)]
            url = f"/api/classrooms/{classroom['id']}/questions"
            with ExitStack() as streams:
                # Six answers of 4 s each, open at once on new connections: the workers take some each.
                for pupil in pupils:
                    response = streams.enter_context(pupil.stream("POST", url, json={"question": "Why?"}))
                    next(response.iter_lines())  # the question is stored and its answer under way
                counts = {in_flight(httpx.get(f"{service.url}/metrics").text) for _ in range(4)}
                shares = [in_flight(worker_metrics(sock)) for sock in service.metrics_dir.glob("*.sock")]
            assert counts == {6} and sum(shares) == 6 and len(shares) == 2
            for pupil in pupils:
                pupil.close()
