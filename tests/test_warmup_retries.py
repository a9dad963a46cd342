"""A warm-up burst on a replica that accepts connections slowly (its API server on a busy host): each request gets
the warm-up's own connect timeout and is sent again, jittered, if it could not connect; a burst that still fails
is counted and said on the operator's console, not left silent. Played through the service's HTTP seam with a
fake replica (a real vLLM cannot be made to refuse connections on demand): the burst on a real vLLM-CPU is
tests/test_warmup_burst.py."""

from collections.abc import Mapping

import httpx

from service.app import create_app
from service.backends.replica_http import ReplicaNotAnswering, Reply
from service.backends.vllm_metrics import sum_samples
from service.settings import RoutingSettings, Settings
from tests.fakes import FakeTransportScripted
from tests.helpers import eventually, operator_headers
from tests.servers import ServerThread, isolated


class FakeReplicaSlowToAccept(FakeTransportScripted):
    """A replica whose first `timeouts` chat requests never get a connection (aiohttp's connect timeout)."""

    def __init__(self, model: str, timeouts: int) -> None:
        super().__init__(model=model)
        self.timeouts = timeouts

    async def fetch(
        self,
        method: str,
        url: str,
        *,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
        connect_timeout_s: float | None = None,
    ) -> Reply:
        reply = await super().fetch(
            method, url, body=body, headers=headers, timeout_s=timeout_s, connect_timeout_s=connect_timeout_s
        )
        if url.endswith("/chat/completions") and self.timeouts > 0:
            self.timeouts -= 1
            raise ReplicaNotAnswering(f"Connection timeout to host {url}")
        return reply


def burst_requests(replica: FakeTransportScripted) -> list[float | None]:
    """The connect timeout each burst request was sent with (the burst's have `ignore_eos`)."""
    return [r.connect_timeout_s for r in replica.requests if r.body is not None and b'"ignore_eos"' in r.body]


def backends(service: ServerThread, settings: Settings) -> httpx.Response:
    return httpx.get(f"{service.url}/api/operator/backends", headers=operator_headers(settings))


def warmup_of(service: ServerThread, settings: Settings) -> object:
    [replica] = backends(service, settings).json()["replicas"]
    return replica["warmup"]


def test_a_burst_whose_connections_time_out_is_sent_again_with_time_to_connect(settings: Settings) -> None:
    own = isolated(settings, routing=RoutingSettings(warmup_burst=8, warmup_attempts=3, probe_interval_s=0.5))
    # Every request's first attempt, and two second ones, find no connection in time.
    replica = FakeReplicaSlowToAccept(own.served_name(), timeouts=8 + 2)
    with ServerThread(create_app(own, replica)) as service:
        warmup = eventually(lambda: warmup_of(service, own), "the burst was done", 30)
        assert isinstance(warmup, dict)
        assert (warmup["requests"], warmup["failed"], warmup["retried"], warmup["error"]) == (8, 0, 10, None)
        figures = sum_samples(httpx.get(f"{service.url}/metrics").text)
    sent = burst_requests(replica)
    assert len(sent) == 8 + 8 + 2  # each request once, again, and two a third time
    assert set(sent) == {own.routing.warmup_connect_timeout_s} and own.routing.warmup_connect_timeout_s > 1.0
    assert figures.get("classroom_warmup_burst_seconds_count") == 1.0
    assert figures.get("classroom_warmup_burst_failed_total", 0.0) == 0.0


def test_a_burst_that_fails_after_every_attempt_is_said_on_the_console_and_counted(settings: Settings) -> None:
    own = isolated(settings, routing=RoutingSettings(warmup_burst=4, warmup_attempts=2, probe_interval_s=0.5))
    replica = FakeReplicaSlowToAccept(own.served_name(), timeouts=1000)
    with ServerThread(create_app(own, replica)) as service:
        warmup = eventually(lambda: warmup_of(service, own), "the burst was done", 30)
        assert isinstance(warmup, dict)
        assert (warmup["requests"], warmup["failed"], warmup["retried"]) == (4, 4, 4)
        assert warmup["error"].startswith("Connection timeout to host")
        figures = sum_samples(httpx.get(f"{service.url}/metrics").text)
        assert backends(service, own).json()["replicas"][0]["healthy"], "a cold replica still serves"
    assert len(burst_requests(replica)) == 4 * 2
    assert figures.get("classroom_warmup_burst_failed_total") == 1.0
    assert figures.get("classroom_warmup_burst_seconds_count", 0.0) == 0.0
