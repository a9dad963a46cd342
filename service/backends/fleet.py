"""The replicas as this service process sees them: the shared configuration, health, load and probes.

The configuration lives in Redis (seeded from deploy/backends.yaml or `backend.base_url`); each process
re-reads its version every `config_poll_s`, so an operator's switch reaches every process within a
second. Each replica is probed every `probe_interval_s`: `/health` and `/v1/models` (it serves our
model), and `/metrics` for its queue and cache figures. A replica that fails either probe, refuses a
connection, or misses `probe_misses` rounds in a row (no answer in time), gets no new questions until a probe
passes again. Streams already running keep their
own connection, so no switch and no config change cuts one.

One process probes for all (forty processes probing each replica every 2 s would send it twenty probes a
second, and all turn from a busy replica at the same moment): the one that holds the prober's lease in
Redis, renewed every round; the others read what it found. Should it die, its lease lapses and the next
process to ask takes it. Without Redis, each process probes for itself.
"""

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from pydantic import BaseModel
from redis.exceptions import RedisError

from service.backends.replica_http import AiohttpTransport, ReplicaError, ReplicaHttp, ReplicaNotAnswering
from service.backends.routing import Router, gateway_headers
from service.backends.vllm_metrics import VllmFigures, parse_vllm_metrics, started_at
from service.errors import VariantNotServing
from service.records import BackendConfig
from service.settings import Settings, root_url
from service.store import Store, open_store

log = logging.getLogger(__name__)

ChangeListener = Callable[[], Awaitable[None]]
# Told, after each round of probes, which of the replicas probed passed; it must return at once.
ProbedListener = Callable[[list[str]], None]


@dataclass
class ReplicaState:
    url: str
    healthy: bool = False
    error: str | None = "not probed yet"
    checked_at: float = 0.0
    figures: VllmFigures = field(default_factory=VllmFigures)
    # Which run of the replica answered the probes (its start time, where its /metrics says): a restart
    # changes it. Kept when a probe cannot read /metrics.
    run: str = ""
    # Rounds of probes in a row it did not answer in time (`routing.probe_misses`).
    missed: int = 0


class SharedProbes(BaseModel):
    """What the prober's last round found, as every process reads it."""

    prober: str
    replicas: dict[str, ReplicaState]


class Fleet:
    def __init__(self, store: Store, settings: Settings, declared: BackendConfig, http: ReplicaHttp) -> None:
        # This process, as the prober's lease names it: where it runs, and which process.
        self.id = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self._store = store
        self._settings = settings
        self._served_name = settings.served_name()  # read once: the model folder's, unless configured
        self._declared = declared
        self.config = declared
        self.router = Router(settings.routing.policy, settings.routing.max_waiting)
        self.replicas: dict[str, ReplicaState] = {}
        self._http = http
        self._listeners: list[ChangeListener] = []
        self._probed_listeners: list[ProbedListener] = []
        self._tasks: list[asyncio.Task[None]] = []

    # Life cycle

    async def start(self) -> None:
        self.config = await self._store.seed_backend_config(self._declared)
        await self.probe_all()
        self._tasks = [asyncio.create_task(self._follow_config()), asyncio.create_task(self._probe_forever())]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        with contextlib.suppress(RedisError, OSError):  # else it lapses
            await self._store.release_prober_lease(self.id)

    def on_change(self, listener: ChangeListener) -> None:
        """Called when the configuration changes or a replica comes back: time to warm caches."""
        self._listeners.append(listener)

    def on_probed(self, listener: ProbedListener) -> None:
        """Called after every round of probes (the first at start, and a new replica's first) with the
        replicas that passed: where the warm-up finds a replica that came up."""
        self._probed_listeners.append(listener)

    def _probed(self, urls: list[str]) -> None:
        passed = [url for url in urls if url in self.replicas and self.replicas[url].healthy]
        if passed:
            for listener in self._probed_listeners:
                listener(passed)

    async def _changed(self) -> None:
        for listener in self._listeners:
            await listener()

    # Routing

    def healthy(self) -> set[str]:
        return {url for url, state in self.replicas.items() if state.healthy}

    def _waiting(self) -> dict[str, float]:
        return {url: state.figures.waiting for url, state in self.replicas.items()}

    def plan(self, pupil_id: str, passage_id: str) -> tuple[str, list[str]]:
        return self.router.plan(self.config, pupil_id, passage_id, self.healthy(), self._waiting())

    def headers(self, passage_id: str, classroom_id: str) -> dict[str, str] | None:
        """The headers a question's request carries: in gateway mode what the router keys on, else none."""
        routing = self._settings.routing
        if routing.policy != "gateway":
            return None
        return gateway_headers(routing.session_header, routing.fairness_header, passage_id, classroom_id)

    def plan_variant(self, variant: str, passage_id: str) -> list[str]:
        """Where a passage goes on one variant, whoever asks: for warming its cache before anyone does."""
        config = self.config.model_copy(update={"active": variant, "canary": None})
        return self.router.plan(config, "", passage_id, self.healthy(), self._waiting())[1]

    def replica_health(self) -> list[tuple[str, str, bool]]:
        return [
            (name, url, self.replicas.get(url, ReplicaState(url)).healthy)
            for name, variant in sorted(self.config.variants.items())
            for url in variant.replicas
        ]

    def mark_down(self, url: str, error: str) -> None:
        state = self.replicas.setdefault(url, ReplicaState(url))
        state.healthy, state.error, state.checked_at = False, error, time.time()
        log.warning("replica %s is down: %s", url, error)

    # Changes by operators

    async def update(self, change: Callable[[BackendConfig], BackendConfig]) -> BackendConfig:
        """Apply an operator's change to the shared configuration, atomically, and follow it at once. One that
        changes nothing (the version stays) is no change: nothing is probed or warmed for it."""
        before = self.config.version
        self.config = await self._store.update_backend_config(change)
        if self.config.version != before:
            await self._sync_replicas()
            await self._changed()
        return self.config

    async def check_serving(self, variant: str) -> None:
        """Before an operator sends pupils to `variant`: each of its replicas probed now, and VariantNotServing
        unless one passes. A variant the configuration does not name is left to the change's own check."""
        declared = self.config.variants.get(variant)
        if declared is None:
            return
        await asyncio.gather(*(self._probe(url) for url in declared.replicas))
        self._probed(list(declared.replicas))
        states = [self.replicas[url] for url in declared.replicas]
        if not any(state.healthy for state in states):
            raise VariantNotServing(variant, {state.url: state.error or "not healthy" for state in states})

    # Background work

    async def _follow_config(self) -> None:
        while True:
            await asyncio.sleep(self._settings.routing.config_poll_s)
            try:
                current = await self._store.backend_config()
            except Exception:  # Redis restarting: keep routing with what we have
                log.warning("could not read the backend configuration", exc_info=True)
                continue
            if current is not None and current.version != self.config.version:
                self.config = current
                await self._sync_replicas()
                await self._changed()

    async def _probe_forever(self) -> None:
        while True:
            await asyncio.sleep(self._settings.routing.probe_interval_s)
            if await self.probe_round():
                await self._changed()

    async def probe_round(self) -> bool:
        """Probe and share the findings if this process holds the prober's lease, else read the prober's; True
        if a replica came back to health."""
        routing = self._settings.routing
        try:
            holder = await self._store.hold_prober_lease(self.id, routing.prober_lease_s)
        except (RedisError, OSError):
            log.warning("could not reach Redis for the prober's lease: probing for this process alone")
            return await self.probe_all()
        if holder == self.id:
            came_back = await self.probe_all()
            found = SharedProbes(prober=self.id, replicas=self.replicas)
            with contextlib.suppress(RedisError, OSError):  # the next round shares again
                await self._store.share_probes(found.model_dump_json(), routing.prober_lease_s)
            return came_back
        return await self._follow_prober()

    async def _follow_prober(self) -> bool:
        """Take what the prober found that is newer than what this process knows (a replica this process saw
        refuse a connection stays down until a probe after that). Should nothing have been shared for a whole
        lease (a prober between lease holders), probe for this process alone."""
        try:
            raw = await self._store.shared_probes()
        except (RedisError, OSError):
            raw = None
        urls = self.config.replica_urls()
        if raw is None:
            oldest = min((self.replicas[url].checked_at for url in urls if url in self.replicas), default=0.0)
            stale = time.time() - oldest > self._settings.routing.prober_lease_s
            return await self.probe_all() if stale else False
        before = self.healthy()
        # Times from another machine: clocks kept within a fraction of a probe interval (NTP) are enough.
        shared = SharedProbes.model_validate_json(raw).replicas
        for url in urls:
            found, known = shared.get(url), self.replicas.get(url)
            if found is not None and (known is None or found.checked_at > known.checked_at):
                self.replicas[url] = found
        self._probed(urls)
        return bool((self.healthy() & set(urls)) - before)

    async def _sync_replicas(self) -> None:
        new = [url for url in self.config.replica_urls() if url not in self.replicas]
        if new:
            await asyncio.gather(*(self._probe(url) for url in new))
            self._probed(new)

    async def probe_all(self) -> bool:
        """Probe every configured replica; True if one came back to health."""
        before = self.healthy()
        urls = self.config.replica_urls()
        await asyncio.gather(*(self._probe(url) for url in urls))
        self._probed(urls)
        return bool((self.healthy() & set(urls)) - before)

    async def _probe(self, url: str) -> None:
        state = self.replicas.setdefault(url, ReplicaState(url))
        root = root_url(url)
        try:
            health = await self._http.probe(f"{root}/health")
            if not health.ok:
                raise ValueError(f"/health answered {health.status}")
            models = await self._http.probe(f"{url.rstrip('/')}/models")
            if not models.ok:
                raise ValueError(f"/v1/models answered {models.status}")
            served = [m["id"] for m in models.json()["data"]]
            name = self._served_name
            if name not in served:
                raise ValueError(f"serves {served}, not {name}")
            metrics = await self._http.probe(f"{root}/metrics")
            if metrics.ok:
                text = metrics.text()
                state.figures, state.run = parse_vllm_metrics(text), started_at(text)
            else:
                state.figures = VllmFigures()
            state.healthy, state.error, state.missed = True, None, 0
        except ReplicaNotAnswering as exc:
            # Slow is not gone: most often a busy host, or this process's own loop running late. A replica that
            # was up stays up until it misses `probe_misses` rounds in a row (questions that find it slow try the
            # next); one that refuses the connection, or answers wrongly, is down at once.
            state.missed += 1
            if not state.healthy or state.missed >= self._settings.routing.probe_misses:
                state.healthy, state.error = False, str(exc) or type(exc).__name__
            else:
                log.warning("replica %s missed a probe (%d in a row): %s", url, state.missed, exc)
        except (ReplicaError, ValueError, KeyError, TypeError) as exc:
            state.healthy, state.error, state.missed = False, str(exc) or type(exc).__name__, 0
        state.checked_at = time.time()


async def shared_backends(settings: Settings) -> BackendConfig | None:
    """For the command line: the configuration in Redis, if the service has seeded it."""
    async with open_store(settings.redis.url) as store:
        return await store.backend_config()


async def replicas_answering(settings: Settings, urls: list[str]) -> dict[str, str | None]:
    """For the command line: each replica's /health now, None where it answers, else why not."""
    transport = AiohttpTransport(settings.backend)
    http = ReplicaHttp(transport, settings.backend, settings.routing.probe_timeout_s)

    async def health(url: str) -> str | None:
        try:
            reply = await http.probe(f"{root_url(url)}/health")
        except ReplicaError as exc:
            return str(exc) or type(exc).__name__
        return None if reply.ok else f"/health answered {reply.status}"

    try:
        return dict(zip(urls, await asyncio.gather(*(health(url) for url in urls)), strict=True))
    finally:
        await transport.close()


async def load_backends(settings: Settings, declared: BackendConfig) -> BackendConfig:
    """For the command line: replace the shared configuration (seeding it if there is none)."""
    async with open_store(settings.redis.url) as store:
        await store.seed_backend_config(declared)
        return await store.update_backend_config(lambda _: declared)
