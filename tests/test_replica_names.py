"""Replicas with an identity: the vLLM pods as the Kubernetes manifests name them (deploy/k8s/backends.yaml,
`<statefulset>-<ordinal>.<headless service>`), each its own replica for routing, warm-up, turns and health, across
service processes. The names resolve here as the cluster's DNS resolves them there: each service process runs
in a mount namespace of its own whose /etc/hosts names the pods (it takes root, as CI runs the tests)."""

import os
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, closing
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import yaml

from service.backends.routing import rendezvous_order
from service.settings import PROJECT_ROOT, Settings
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
from tests.servers import Vllm, isolated, service_process

BACKENDS = PROJECT_ROOT / "deploy" / "k8s" / "backends.yaml"
# Runs the rest of its command line with /etc/hosts replaced by the file it is given, for that process alone.
WITH_HOSTS = ["unshare", "--mount", "--propagation", "private", "sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"']


@pytest.mark.slow  # a second vLLM (~35 s to start here)
@pytest.mark.skipif(os.geteuid() != 0, reason="a mount namespace of its own takes root (CI runs as root)")
def test_two_vllm_replicas_by_their_pod_names_route_warm_take_turns_and_report_health_each(
    settings: Settings, vllm: Vllm, second_vllm: Vllm, tmp_path: Path
) -> None:
    declared = yaml.safe_load(BACKENDS.read_text())["variants"]["original"]["replicas"]
    names = [urlsplit(url).hostname or "" for url in declared]
    assert names == ["vllm-original-0.vllm-original-pods", "vllm-original-1.vllm-original-pods"]
    replicas = [vllm, second_vllm]
    # The manifests' URLs, each pod's port where this machine's replica listens.
    urls = [
        url.replace(":8000/", f":{urlsplit(replica.base_url).port}/")
        for url, replica in zip(declared, replicas, strict=True)
    ]
    hosts = tmp_path / "hosts"
    hosts.write_text(Path("/etc/hosts").read_text() + f"\n127.0.0.1 {' '.join(names)}\n")
    backends = tmp_path / "backends.yaml"
    backends.write_text(yaml.safe_dump({"active": "original", "variants": {"original": {"replicas": urls}}}))
    own = isolated(settings)
    # One question at a time on each pod: a second waits its turn on its class's pod, not on the other.
    env = {"CLASSROOM_ROUTING__BACKENDS_FILE": str(backends), "CLASSROOM_TURNS__MAX_IN_FLIGHT_PER_REPLICA": "1"}
    with ExitStack() as stack:
        services = [stack.enter_context(service_process(own, env=env, wrap=[*WITH_HOSTS, str(hosts)])) for _ in "ab"]
        teacher = stack.enter_context(closing(signed_in_teacher(own, services[0].url)))
        operator = stack.enter_context(httpx.Client(base_url=services[1].url, headers=operator_headers(own)))
        # Health per pod, by its name.
        health = {r["url"]: r["healthy"] for r in operator.get("/api/operator/backends").json()["replicas"]}
        assert health == dict.fromkeys(urls, True)
        classes: dict[int, dict[str, str]] = {}  # a class whose passage's home is each pod
        for tried in range(12):
            if len(classes) == 2:
                break
            classroom = create_classroom(teacher, f"Class {tried}")
            passage = add_passage(teacher, classroom["id"], passage_text(150, seed=tried))
            home = urls.index(rendezvous_order(passage["id"], urls)[0])
            if home in classes:
                continue
            classes[home] = classroom
            # Warmed on its pod alone, and asked through both service processes, answered there alone.
            assert wait_until_warmed(operator, classroom["id"]) == [urls[home]]
            before = [pupils_questions(r.metrics()) for r in replicas]
            for n, service in enumerate(services):
                with closing(joined_pupil(service.url, classroom["join_code"], f"Pupil {n}")) as pupil:
                    assert ask_streaming(pupil, classroom["id"], f"Question {n}?").done is not None
            answered = [pupils_questions(r.metrics()) - b for r, b in zip(replicas, before, strict=True)]
            assert answered[home] == 2 and answered[1 - home] == 0, answered
            assert {q["replica"] for q in routed_questions(operator, classroom["id"])} == {urls[home]}
        assert len(classes) == 2, "every passage hashed to one pod"

        # Turns per pod: two classes at once, one on each pod, both start at once; two pupils of one class at
        # once, on one pod, take turns.
        def ask(args: tuple[str, dict[str, str], str]) -> list[int]:
            url, classroom, name = args
            with closing(joined_pupil(url, classroom["join_code"], name)) as pupil:
                streamed = ask_streaming(pupil, classroom["id"], "What happened?")
                assert streamed.done is not None
                return streamed.places

        with ThreadPoolExecutor(2) as pool:
            apart = list(pool.map(ask, [(services[0].url, classes[0], "Ann"), (services[1].url, classes[1], "Bo")]))
            together = list(pool.map(ask, [(services[0].url, classes[0], "Cy"), (services[1].url, classes[0], "Di")]))
        assert apart == [[], []]
        assert sorted(bool(places) for places in together) == [False, True]
