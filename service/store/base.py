"""What every part of the store shares: the Redis client, and how its replies read."""

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, TypeVar

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import WatchError

from service.store.subscriptions import Subscriptions

T = TypeVar("T")


def text(value: Any) -> str:
    """Redis replies are bytes; ids and keys are ASCII text."""
    return value.decode() if isinstance(value, bytes) else str(value)


def texts(values: Iterable[Any]) -> list[str]:
    return [text(v) for v in values]


class StoreBase:
    """The client that each part of `Store` reads and writes through. A part with Lua scripts registers them in
    its own `__init__`, and calls this one first."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self.subscriptions = Subscriptions(redis)

    async def _published(self, channel: str, read: Callable[[Any], T]) -> AsyncIterator[T]:
        """What is published on `channel`, each message read by `read`, until the consumer stops: on the
        process's one pub/sub connection (`Subscriptions`)."""
        async for data in self.subscriptions.messages(channel):
            yield read(data)

    async def _watching(self, keys: list[str], step: Callable[[Pipeline], Awaitable[T]]) -> T:
        """`step` on a transaction that watches `keys`: it reads, then queues its writes after `tx.multi()` and
        runs them with `tx.execute()`. Should one of the keys change before its writes, it runs again."""
        while True:
            async with self.redis.pipeline(transaction=True) as tx:
                try:
                    await tx.watch(*keys)
                    return await step(tx)
                except WatchError:
                    continue
