"""The backends' configuration shared by every service process, and the warm-up's marks: which replicas hold
a passage, and which process re-warms for a change of the fleet or sends a replica's burst."""

import json
from collections.abc import Callable

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from service.errors import InvalidInput
from service.records import BackendConfig, WarmupBurst
from service.store.base import StoreBase, text
from service.store.keys import Keys
from service.store.scripts import HOLD_LEASE, RELEASE_LEASE


class BackendStore(StoreBase):
    def __init__(self, redis: Redis) -> None:
        super().__init__(redis)
        self._hold_lease = redis.register_script(HOLD_LEASE)
        self._release_lease = redis.register_script(RELEASE_LEASE)

    # The backends' configuration, shared by every service process

    async def backend_config(self) -> BackendConfig | None:
        raw = await self.redis.get(Keys.backend_config())
        return None if raw is None else BackendConfig.model_validate_json(raw)

    async def seed_backend_config(self, declared: BackendConfig) -> BackendConfig:
        """The shared configuration; the declared one if there is none yet (operators' changes persist)."""
        await self.redis.set(Keys.backend_config(), declared.model_dump_json(), nx=True)
        current = await self.backend_config()
        return current if current is not None else declared

    async def update_backend_config(self, change: Callable[[BackendConfig], BackendConfig]) -> BackendConfig:
        """Read, change and write the configuration atomically (another process may change it too). A change
        that changes nothing writes nothing and keeps the version, so no process re-warms for it."""
        key = Keys.backend_config()

        async def update(tx: Pipeline) -> BackendConfig:
            raw = await tx.get(key)
            if raw is None:
                raise InvalidInput("no backend configuration is stored yet")
            current = BackendConfig.model_validate_json(raw)
            changed = change(current)
            if changed.model_dump(exclude={"version"}) == current.model_dump(exclude={"version"}):
                return current  # the same configuration (e.g. the active variant chosen again): no new version
            new = changed.revised(current.version + 1)
            tx.multi()  # type: ignore[no-untyped-call]
            tx.set(key, new.model_dump_json())
            await tx.execute()
            return new

        return await self._watching([key], update)

    # The one prober of the fleet, and what it found

    async def hold_prober_lease(self, holder: str, seconds: float) -> str:
        """Take or renew the prober's lease for `holder` (a process's id) if it is free or theirs: the holder."""
        return text(await self._hold_lease(keys=[Keys.prober()], args=[holder, max(1, int(seconds * 1000))]))

    async def release_prober_lease(self, holder: str) -> None:
        await self._release_lease(keys=[Keys.prober()], args=[holder])

    async def prober(self) -> str | None:
        raw = await self.redis.get(Keys.prober())
        return None if raw is None else text(raw)

    async def share_probes(self, probes: str, seconds: float) -> None:
        """The prober's last findings (JSON), kept `seconds`: stale findings vanish rather than mislead."""
        await self.redis.set(Keys.probes(), probes, px=max(1, int(seconds * 1000)))

    async def shared_probes(self) -> str | None:
        raw = await self.redis.get(Keys.probes())
        return None if raw is None else text(raw)

    # Warm-up's marks

    async def set_warmed(self, passage_id: str, replicas: list[str]) -> None:
        await self.redis.set(Keys.warmed(passage_id), json.dumps(replicas))

    async def claim_fleet_warmup(self, fleet_state: str, seconds: float) -> bool:
        """True for the first process to ask for this state of the fleet within `seconds`: one re-warm for a
        change that every worker process of the service sees."""
        return bool(await self.redis.set(Keys.fleet_warmup(fleet_state), "1", nx=True, px=int(seconds * 1000)))

    async def warmed(self, passage_id: str) -> list[str]:
        raw = await self.redis.get(Keys.warmed(passage_id))
        return [] if raw is None else list(json.loads(raw))

    async def claim_replica_bursts(self, claims: dict[str, float]) -> list[str]:
        """Warm-up bursts, one per run of a replica across every service process: of the claims named
        (a replica's URL and run) those not yet held, claimed now by this process alone (SET NX). Every
        one named is held for its seconds from now, so that a process that keeps seeing the replica up
        keeps its claim. One round trip."""
        names = list(claims)
        async with self.redis.pipeline(transaction=False) as batch:
            for name in names:
                key, ms = Keys.replica_burst(name), max(1, int(claims[name] * 1000))
                batch.set(key, "1", nx=True, px=ms)
                batch.pexpire(key, ms)
            replies = await batch.execute()
        return [name for name, claimed in zip(names, replies[::2], strict=True) if claimed]

    async def set_burst_outcome(self, replica: str, outcome: WarmupBurst) -> None:
        await self.redis.hset(Keys.burst_outcomes(), replica, outcome.model_dump_json())

    async def burst_outcomes(self, replicas: list[str]) -> dict[str, WarmupBurst]:
        """How the last burst on each of `replicas` went, for those that had one."""
        if not replicas:
            return {}
        raw = await self.redis.hmget(Keys.burst_outcomes(), replicas)
        return {url: WarmupBurst.model_validate_json(r) for url, r in zip(replicas, raw, strict=True) if r is not None}
