"""How much of Redis' memory the service's state takes, and the bound it must stay under."""

from pydantic import BaseModel, Field

from service.store.base import StoreBase, text


class MemoryUsage(BaseModel):
    """Redis' memory as its INFO tells it."""

    used_bytes: int
    max_bytes: int = Field(description="maxmemory: 0 means unbounded (only a development Redis should be)")
    policy: str = Field(description="what Redis does at the bound: noeviction refuses writes, losing nothing")
    evicted_keys: int = Field(description="keys Redis dropped to stay under the bound: 0 under noeviction")


class UsageStore(StoreBase):
    async def memory_usage(self) -> MemoryUsage:
        memory = await self.redis.info("memory")
        stats = await self.redis.info("stats")
        return MemoryUsage(
            used_bytes=int(memory["used_memory"]),
            max_bytes=int(memory["maxmemory"]),
            policy=text(memory["maxmemory_policy"]),
            evicted_keys=int(stats["evicted_keys"]),
        )
