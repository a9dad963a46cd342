"""Warm the prefix cache before the first pupil asks.

When a passage becomes active, and when a variant or replica becomes active, the passage's prompt
prefix (instructions and passage, exactly as pupils' prompts begin) is sent once, for one output token,
to the replica that affinity will send that passage's questions to, on the active variant and on the
canary. The first pupil's question then finds the passage in the cache, as the class's other pupils do.
Warming runs in the background: a teacher's upload never waits for it.

A replica that comes up (every healthy one when the service starts, one back after being down, one added
to the configuration) also gets one burst of `routing.warmup_burst` short requests at once, a few tokens
each, at the pupils' temperature: a fresh vLLM's sampler JIT-compiles its kernels on its first batches
(5.8-9 s on an H200), and the burst pays that instead of the first class. It goes out as soon as the probe
sees the replica up, in the same round as, and just before, the passages' re-warm, which does not wait for
it: the compiling is paid once by whichever batch runs first, and both are done soonest (waiting would
keep the passages out of the cache for the compile's seconds; the passages first would meet the compile
one request at a time, and the class-sized batch would still be to compile). One process in all sends it,
the first to claim that run of the replica (its start time, from its /metrics) in Redis: a probe that
failed a while does not make it new, a restart does.
"""

import asyncio
import logging
import random
import time
from collections.abc import Coroutine
from typing import Any, Protocol

from openai.types.chat import ChatCompletionMessageParam
from redis.exceptions import RedisError

from service.backends.fleet import Fleet
from service.backends.replica_http import ReplicaError, ReplicaHttp, ReplicaNotAnswering, ReplicaRefused
from service.records import Passage, WarmupBurst
from service.store import Store
from service.tasks import stop_tasks
from service.telemetry.prometheus import Metrics

log = logging.getLogger(__name__)


class PassagePrompts(Protocol):
    """What a warm-up needs of the classroom's prompts (`classroom.prompting.Prompts`): a pupil's messages about
    a passage, whose prefix is what it warms."""

    def messages(self, title: str, text: str, question: str) -> list[ChatCompletionMessageParam]: ...


# Each burst request: a few prompt tokens, and this many output tokens whatever the model says (vLLM's
# `ignore_eos`), so that the sampler runs several steps on the whole batch.
BURST_MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say hello."}]
BURST_MAX_TOKENS = 8
# Seconds between a burst request's attempts, times the attempt's number (jittered).
RETRY_S = 1.0
# How long a run of a replica stays claimed after any process last saw it up: a day, longer than any outage
# of the probes that ends with the same run still serving.
RUN_CLAIM_S = 86400.0


class Warmup:
    def __init__(
        self,
        store: Store,
        prompts: PassagePrompts,
        fleet: Fleet,
        http: ReplicaHttp,
        metrics: Metrics,
        *,
        model: str,
        max_passages: int,
        claim_s: float,
        burst: int,
        burst_temperature: float,
        burst_claim_s: float,
        burst_connect_timeout_s: float,
        burst_attempts: int,
    ) -> None:
        self._store = store
        self._claim_s = claim_s
        self._prompts = prompts
        self._fleet = fleet
        self._http = http
        self._metrics = metrics
        self._model = model
        self._max_passages = max_passages
        self._burst = burst
        self._burst_temperature = burst_temperature
        self._burst_claim_s = burst_claim_s
        self._burst_connect_timeout_s = burst_connect_timeout_s
        self._burst_attempts = burst_attempts
        self._claiming = False
        self._closed = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._rewarm: asyncio.Event | None = None

    def passage_activated(self, passage: Passage) -> None:
        self._spawn(self.warm(passage))

    async def fleet_changed(self) -> None:
        """Re-warm every open class's active passage: where affinity sends each may have changed."""
        if self._rewarm is None:
            self._rewarm = asyncio.Event()
            self._spawn(self._warm_all_until_settled())
        else:
            self._rewarm.set()  # a pass is under way: run one more after it, for this change too

    async def warm(self, passage: Passage) -> list[str]:
        """Warm the passage where its questions will go; returns the replicas warmed."""
        config = self._fleet.config
        variants = [config.active] + ([config.canary.variant] if config.canary else [])
        messages = self._prompts.messages(passage.title, passage.text, "")
        warmed = []
        for variant in variants:
            for url in self._fleet.plan_variant(variant, passage.id)[:1]:
                try:
                    await self._http.chat(
                        url,
                        {"model": self._model, "messages": messages, "max_tokens": 1},
                        # Through a router: the passage's session, so it lands where the class's questions will.
                        self._fleet.headers(passage.id, passage.classroom_id),
                    )
                except ReplicaError as exc:
                    log.warning("could not warm passage %s on %s: %s", passage.id, url, exc)
                    continue
                warmed.append(url)
        await self._store.set_warmed(passage.id, warmed)
        return warmed

    def replicas_probed(self, healthy: list[str]) -> None:
        """After each round of probes (Fleet.on_probed): claim the replicas that came up, and burst each
        claimed one, in the background; probing and answering never wait for it."""
        if self._burst == 0 or self._claiming:
            return  # a claim still waiting on Redis: the next round renews these
        self._claiming = True
        self._spawn(self._claim_and_burst(healthy))

    async def burst(self, url: str) -> WarmupBurst:
        """`warmup_burst` requests at once to one replica, each sent again (up to `attempts` in all) if it could not
        connect or its answer never came; how it went is logged, counted and kept for the operator's console."""
        request = {
            "model": self._model,
            "messages": BURST_MESSAGES,
            "max_tokens": BURST_MAX_TOKENS,
            "temperature": self._burst_temperature,
            "ignore_eos": True,
        }
        began = time.perf_counter()
        outcomes = await asyncio.gather(*(self._burst_request(url, request) for _ in range(self._burst)))
        took = time.perf_counter() - began
        failed = [error for error, _ in outcomes if error is not None]
        outcome = WarmupBurst(
            requests=self._burst,
            failed=len(failed),
            retried=sum(retries for _, retries in outcomes),
            took_s=round(took, 3),
            error=str(failed[0]) if failed else None,
        )
        if failed:
            self._metrics.warmup_burst_failed.labels(url).inc()
            log.warning(
                "warm-up burst on %s: %d of %d requests failed in %.1f s, %d sent again (first: %s); the replica's "
                "first class may pay what the burst would have",
                url,
                outcome.failed,
                outcome.requests,
                took,
                outcome.retried,
                outcome.error,
            )
        else:
            self._metrics.warmup_burst.labels(url).observe(took)
            log.info(
                "warm-up burst on %s: %d requests at once answered in %.1f s, %d sent again (a first burst of "
                "several seconds on a new GPU replica is its sampler compiling kernels, paid here instead of by "
                "the first class)",
                url,
                outcome.requests,
                took,
                outcome.retried,
            )
        try:
            await self._store.set_burst_outcome(url, outcome)
        except RedisError as exc:  # the log and the metric have it
            log.warning("could not keep the warm-up burst's outcome on %s: %s", url, exc)
        return outcome

    async def _burst_request(self, url: str, request: dict[str, Any]) -> tuple[ReplicaError | None, int]:
        """One request of a burst: (the last failure if every attempt failed, else None; how many were sent again)."""
        failure: ReplicaError | None = None
        for attempt in range(self._burst_attempts):
            if attempt:
                # Apart and jittered, so the retries of a burst do not all knock again at once.
                await asyncio.sleep(RETRY_S * attempt * (0.5 + random.random()))
            try:
                await self._http.chat(url, request, connect_timeout_s=self._burst_connect_timeout_s)
            except (ReplicaRefused, ReplicaNotAnswering) as exc:
                failure = exc
                continue
            except ReplicaError as exc:  # the replica answered with an error: sending it again would too
                return exc, attempt
            return None, attempt
        return failure, self._burst_attempts - 1

    async def close(self) -> None:
        self._closed = True  # the prober runs on a moment longer: a burst claimed now would never be sent
        await stop_tasks(*self._tasks)

    async def _warm_all_until_settled(self) -> None:
        assert self._rewarm is not None
        try:
            while True:
                self._rewarm.clear()
                await self._warm_all()
                if not self._rewarm.is_set():
                    return
        finally:
            self._rewarm = None

    async def _warm_all(self) -> None:
        # Every worker process sees the same change within a probe or two; the first to claim it re-warms.
        fleet_state = f"{self._fleet.config.version} {sorted(self._fleet.healthy())}"
        if not await self._store.claim_fleet_warmup(fleet_state, self._claim_s):
            return
        for passage in await self._store.active_passages_by_recency(self._max_passages):
            await self.warm(passage)

    async def _claim_and_burst(self, healthy: list[str]) -> None:
        # A replica whose /metrics says when it started is claimed by its run, for as long as any process
        # keeps seeing it up, however long its probes fail meanwhile: a restart is a new run. One that does
        # not say (several API servers) by its address, which lapses a few probe rounds after the last
        # process saw it up.
        runs = {f"{url} {self._fleet.replicas[url].run}": url for url in healthy}
        claims = {
            name: RUN_CLAIM_S if self._fleet.replicas[url].run else self._burst_claim_s for name, url in runs.items()
        }
        try:
            claimed = await self._store.claim_replica_bursts(claims)
        except RedisError as exc:  # Redis restarting: the next round of probes claims again
            log.warning("could not claim warm-up bursts: %s", exc)
            return
        finally:
            self._claiming = False
        for name in claimed:
            self._spawn(self.burst(runs[name]))

    def _spawn(self, work: Coroutine[Any, Any, object]) -> None:
        if self._closed:
            work.close()
            return
        task = asyncio.create_task(self._quietly(work))
        self._tasks.add(task)
        task.add_done_callback(self._done)

    @staticmethod
    async def _quietly(work: Coroutine[Any, Any, object]) -> None:
        try:
            await work
        except Exception:  # warming is an optimisation: a failure must not surface anywhere else
            log.exception("warming failed")

    def _done(self, task: "asyncio.Task[None]") -> None:
        self._tasks.discard(task)
