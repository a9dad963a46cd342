"""The Redis client every store uses: one that rides out a restart and waits for a free connection."""

import asyncio

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

# How long a command waits for a free connection of the pool before it fails.
POOL_WAIT_S = 10.0


def connect(url: str, max_connections: int = 50) -> Redis:
    """A client that rides out a Redis restart: a command that meets a dropped connection is retried on a
    new one for about 5 s, so a pupil's question waits through a restart instead of failing. When all
    `max_connections` are busy (a class's burst), a command waits for one instead of failing."""
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=POOL_WAIT_S,
        retry=Retry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), retries=10),
        retry_on_error=[RedisConnectionError, RedisTimeoutError],
    )
    return Redis.from_pool(pool)  # closing the client closes its pool


async def open_connections(redis: Redis, count: int) -> None:
    """Open `count` connections of the client's pool now (they stay in it), rather than during a burst."""
    await asyncio.gather(*(redis.ping() for _ in range(count)))
