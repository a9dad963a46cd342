"""One prober for the fleet: of many service processes, the one holding the lease in Redis probes the replicas
and the others read what it found; when it is killed, another takes over."""

import os
import signal
import time
from contextlib import ExitStack

import httpx
import pytest
import redis

from service.settings import Settings
from service.store import Keys
from service.store.base import text
from tests.helpers import eventually
from tests.servers import RunningService, instant_fake_vllm, isolated, service_process

pytestmark = pytest.mark.slow  # service processes of their own, one of them killed

INTERVAL_S = 0.5
LEASE_S = 1.5


def models_asked(base_url: str) -> float:
    """The replica's own count of GET /v1/models (one per probe), from its /metrics."""
    text = httpx.get(base_url.removesuffix("/v1") + "/metrics", timeout=5).text
    line = next(line for line in text.splitlines() if line.startswith('http_requests_total{handler="/v1/models"'))
    return float(line.rsplit(" ", 1)[1])


def probes_a_second(base_url: str, seconds: float = 3.0) -> float:
    before = models_asked(base_url)
    time.sleep(seconds)
    return (models_asked(base_url) - before) / seconds


def prober_pid(client: redis.Redis) -> int | None:
    """The process holding the prober's lease (the id names host, pid and a random part)."""
    holder = client.get(Keys.prober())
    return None if holder is None else int(text(holder).split(":")[1])


def ready(service: RunningService) -> int:
    return httpx.get(f"{service.url}/readyz?answering=true", timeout=5).status_code


def test_one_process_probes_for_all_and_another_takes_over_when_it_is_killed(settings: Settings) -> None:
    env = {"CLASSROOM_ROUTING__PROBE_INTERVAL_S": str(INTERVAL_S), "CLASSROOM_ROUTING__PROBER_LEASE_S": str(LEASE_S)}
    with ExitStack() as stack:
        replica = stack.enter_context(instant_fake_vllm())
        own = isolated(settings, backend=settings.backend.model_copy(update={"base_url": replica}))
        services = [stack.enter_context(service_process(own, env=env)) for _ in range(3)]
        client = stack.enter_context(redis.Redis.from_url(own.redis.url))
        pids = {service.pid: service for service in services}
        # Three processes, one probing: one probe per interval on the replica, not three.
        rate = probes_a_second(replica)
        assert 0.5 / INTERVAL_S <= rate <= 1.5 / INTERVAL_S, rate
        holder = prober_pid(client)
        assert holder in pids
        os.kill(holder, signal.SIGKILL)
        # Its lease lapses and another process takes it, and probes alone again.
        eventually(
            lambda: prober_pid(client) not in (None, holder),
            "another process took the lapsed prober lease",
            LEASE_S + 3 * INTERVAL_S,
        )
        assert prober_pid(client) in pids
        survivors = [service for pid, service in pids.items() if pid != holder]
        rate = probes_a_second(replica)
        assert 0.5 / INTERVAL_S <= rate <= 1.5 / INTERVAL_S, rate
        assert [ready(service) for service in survivors] == [200, 200]


def test_followers_see_what_the_prober_finds(settings: Settings) -> None:
    env = {"CLASSROOM_ROUTING__PROBE_INTERVAL_S": str(INTERVAL_S), "CLASSROOM_ROUTING__PROBER_LEASE_S": str(LEASE_S)}
    with ExitStack() as stack:
        replica_stack = stack.enter_context(ExitStack())
        replica = replica_stack.enter_context(instant_fake_vllm())
        own = isolated(settings, backend=settings.backend.model_copy(update={"base_url": replica}))
        services = [stack.enter_context(service_process(own, env=env)) for _ in range(2)]
        client = stack.enter_context(redis.Redis.from_url(own.redis.url))
        holder = prober_pid(client)
        (follower,) = [service for service in services if service.pid != holder]
        replica_stack.close()  # the replica dies: the prober finds it, the follower reads it
        eventually(lambda: ready(follower) == 503, "the follower said 503", 3 * INTERVAL_S + 2)
        body = httpx.get(f"{follower.url}/readyz", timeout=5).json()
        assert "no healthy replica" in body["backend"]
