"""The one HTTP seam to the replicas (`service.backends.replica_http`), with a fake transport in place of a
replica (tests/fakes.py): a replica's error in its own words, a probe that finds the wrong model or a sick
replica, and a warm-up's request as vLLM receives it. The fast tier: no server, no vLLM (the aiohttp transport
against real sockets: tests/test_gateway.py; against vLLM: every vllm-tier test)."""

import asyncio

import pytest

from service.backends.fleet import Fleet
from service.backends.replica_http import ReplicaAnswered, ReplicaHttp, ReplicaNotAnswering, ReplicaRefused, Reply
from service.records import BackendConfig
from service.settings import BackendSettings, Settings
from service.store import open_store
from tests.fakes import FakeRequest, FakeStream, FakeTransportScripted
from tests.servers import own_database_url

REPLICA = "http://replica:8000/v1"


def test_a_replicas_error_is_raised_with_its_own_words_and_the_connection_kept() -> None:
    words = "This model's maximum context length is 32768 tokens."
    refusal = b'{"error": {"message": "%s"}}' % words.encode()
    stream = FakeStream([refusal], status=400)
    http = ReplicaHttp(FakeTransportScripted([stream]), BackendSettings(), probe_timeout_s=1.0)
    with pytest.raises(ReplicaAnswered) as refused:
        asyncio.run(http.open_answer(REPLICA, b"{}"))
    assert (refused.value.status, refused.value.message) == (400, words)
    assert stream.released


class SickReplica(FakeTransportScripted):
    """A fake transport whose replica answers /health with `health`, does not answer it at all (None), or refuses
    the connection ("refused")."""

    def __init__(self, health: int | None | str, model: str) -> None:
        super().__init__(model=model)
        self.health = health

    async def fetch(self, method: str, url: str, **options: object) -> Reply:
        if url.endswith("/health"):
            self.requests.append(FakeRequest(method, url, None, {}, None))
            if self.health is None:
                raise ReplicaNotAnswering("no answer within the read timeout")
            if self.health == "refused":
                raise ReplicaRefused("Cannot connect to host replica:8000")
            assert isinstance(self.health, int)
            return Reply(self.health, b"")
        return await super().fetch(method, url, **options)  # type: ignore[arg-type]


def test_a_replica_that_was_up_stays_up_through_slow_probes_until_it_misses_several_in_a_row(
    settings: Settings, redis_url: str
) -> None:
    """A probe left unanswered in time is most often a busy host or a late loop: one miss took every question of the
    replica to a 503. Refusing the connection is down at once."""

    async def rounds() -> list[tuple[bool, int]]:
        replica = SickReplica(200, settings.served_name())
        http = ReplicaHttp(replica, settings.backend, settings.routing.probe_timeout_s)
        seen = []
        async with open_store(own_database_url(redis_url)) as store:
            fleet = Fleet(store, settings, BackendConfig.single(REPLICA), http)
            for health in (200, None, None, 200, None, None, None, 200, "refused"):
                replica.health = health
                await fleet.probe_all()
                state = fleet.replicas[REPLICA]
                seen.append((state.healthy, state.missed))
        return seen

    assert settings.routing.probe_misses == 3
    assert asyncio.run(rounds()) == [
        (True, 0), (True, 1), (True, 2),  # two misses: still up
        (True, 0),  # an answer starts the count again
        (True, 1), (True, 2), (False, 3),  # the third in a row: down
        (True, 0),
        (False, 0),  # refused: down at once
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("health", "model", "why"),
    [
        (200, None, None),
        (200, "another-model", "serves ['another-model'], not "),
        (503, None, "/health answered 503"),
        (None, None, "no answer within the read timeout"),
    ],
    ids=["well", "another model", "unwell", "silent"],
)
def test_a_probe_passes_only_a_replica_that_is_well_and_serves_our_model(
    settings: Settings, redis_url: str, health: int | None, model: str | None, why: str | None
) -> None:
    async def probe() -> tuple[bool, str | None, list[str]]:
        replica = SickReplica(health, model or settings.served_name())
        http = ReplicaHttp(replica, settings.backend, settings.routing.probe_timeout_s)
        async with open_store(own_database_url(redis_url)) as store:
            fleet = Fleet(store, settings, BackendConfig.single(REPLICA), http)
            await fleet.probe_all()
        state = fleet.replicas[REPLICA]
        return state.healthy, state.error, [asked.url for asked in replica.requests]

    healthy, error, asked = asyncio.run(probe())
    assert healthy is (why is None)
    assert (error is None) if why is None else (error is not None and error.startswith(why)), error
    assert all(url.startswith("http://replica:8000/") for url in asked)
    if why is None:
        assert asked == ["http://replica:8000/health", f"{REPLICA}/models", "http://replica:8000/metrics"]
