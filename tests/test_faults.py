"""Faults as a school meets them, on the real parts: a vLLM server killed while answers stream."""

import threading
from pathlib import Path
from typing import Any

import pytest

from service.backends.routing import rendezvous_order
from service.settings import AnswerSettings, Settings
from tests.backends import backends_file, replica_healthy, running
from tests.helpers import (
    Streamed,
    add_passage,
    ask_streaming,
    create_classroom,
    eventually,
    joined_pupil,
    passage_text,
    routed_questions,
    stored_questions,
)
from tests.servers import Vllm, isolated, routing

MIDSTREAM = "The answer was cut short because the answering service stopped. Please ask again."


@pytest.mark.slow  # a second vLLM (~35 s to start here), killed and started again
def test_a_replica_killed_mid_answer_tells_each_pupil_keeps_what_was_said_and_the_other_serves_on(
    settings: Settings, vllm: Vllm, second_vllm: Vllm, tmp_path: Path
) -> None:
    replicas = [vllm.base_url, second_vllm.base_url]
    own = isolated(
        settings,
        # No warm-up burst: its requests running on the doomed replica would pass for the pupils' answers.
        routing=routing(backends_file=backends_file(tmp_path, {"original": replicas}, "original"), warmup_burst=0),
        answer=AnswerSettings(max_tokens=600),  # answers long enough to be mid-stream when the kill comes
    )
    with running(own) as (url, teacher, operator):
        # A class whose passage lives on the replica that will die.
        while True:
            classroom = create_classroom(teacher)
            passage = add_passage(teacher, classroom["id"], passage_text(200))
            if rendezvous_order(passage["id"], replicas)[0] == second_vllm.base_url:
                break
        pupils = [joined_pupil(url, classroom["join_code"], name) for name in ("Ada", "Ben", "Cy")]
        streamed: dict[str, Streamed] = {}

        def ask(pupil: Any, name: str) -> None:
            streamed[name] = ask_streaming(pupil, classroom["id"], f"{name} asks a long question?")

        threads = [threading.Thread(target=ask, args=(p, n)) for p, n in zip(pupils, ("Ada", "Ben", "Cy"), strict=True)]
        for thread in threads:
            thread.start()

        def decoding(n: int) -> bool:
            running_now = second_vllm.metrics().get("vllm:num_requests_running", [])
            generated = second_vllm.metrics().get("vllm:generation_tokens_total", [])
            return sum(v for _, v in running_now) >= n and sum(v for _, v in generated) > 3 * n

        try:
            eventually(lambda: decoding(3), "all three answers are being decoded on the doomed replica")
            second_vllm.kill()
            for thread in threads:
                thread.join(60)
            assert sorted(streamed) == ["Ada", "Ben", "Cy"]
            for name, answer in streamed.items():
                assert answer.done is None, name
                assert answer.error == {"question_id": answer.question_id, "message": MIDSTREAM}, name
            records = {q["pupil"]: q for q in stored_questions(teacher, classroom["id"])}
            for name, answer in streamed.items():
                assert records[name]["status"] == "incomplete"
                assert records[name]["answer"] == answer.text  # what the pupil saw is what was kept
                assert records[name]["error"] == MIDSTREAM
            assert any(answer.text for answer in streamed.values()), "some words had reached the pupils"

            # The class goes on: the next question goes to the living replica and is answered.
            again = pupils[0].post(
                f"/api/classrooms/{classroom['id']}/questions",
                json={"question": "Ada asks again?"},
                headers={"Accept": "application/json"},
                timeout=180,  # a whole answer of 600 tokens on 2 shared cores
            )
            assert again.status_code == 200 and again.json()["status"] == "answered"
            assert routed_questions(operator, classroom["id"])[0]["replica"] == vllm.base_url
            eventually(lambda: not replica_healthy(operator, second_vllm.base_url), "the probes saw it die")
            assert len(stored_questions(teacher, classroom["id"])) == 4  # nothing else lost, nothing doubled
        finally:
            for pupil in pupils:
                pupil.close()
