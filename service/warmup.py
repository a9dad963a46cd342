"""Warm the prefix cache before the first pupil asks.

When a passage becomes active, and when a variant or replica becomes active, the passage's prompt
prefix (instructions and passage, exactly as pupils' prompts begin) is sent once, for one output token,
to the replica that affinity will send that passage's questions to, on the active variant and on the
canary. The first pupil's question then finds the passage in the cache, as the class's other pupils do.
Warming runs in the background: a teacher's upload never waits for it.
"""

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from openai import APIError

from service.fleet import Fleet
from service.prompting import Prompts
from service.records import Passage
from service.store import Store

log = logging.getLogger(__name__)


class Warmup:
    def __init__(
        self, store: Store, prompts: Prompts, fleet: Fleet, *, model: str, max_passages: int, claim_s: float
    ) -> None:
        self._store = store
        self._claim_s = claim_s
        self._prompts = prompts
        self._fleet = fleet
        self._model = model
        self._max_passages = max_passages
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
                    await self._fleet.client(url).chat.completions.create(
                        model=self._model, messages=messages, max_tokens=1
                    )
                except APIError as exc:
                    log.warning("could not warm passage %s on %s: %s", passage.id, url, exc)
                    continue
                warmed.append(url)
        await self._store.set_warmed(passage.id, warmed)
        return warmed

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

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

    def _spawn(self, work: Coroutine[Any, Any, object]) -> None:
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
