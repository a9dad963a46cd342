"""How often a pupil may ask, counted in Redis so that every service process sees the same count."""

import math
import time

from limits import RateLimitItemPerMinute
from limits.aio.storage import RedisStorage
from limits.aio.strategies import MovingWindowRateLimiter
from redis.asyncio import Redis

from service.errors import TooManyQuestions


class QuestionRateLimit:
    def __init__(self, redis: Redis, redis_url: str, per_minute: int) -> None:
        # On the service's own connection pool, so closing the service's client closes these connections too.
        storage = RedisStorage(
            f"async+{redis_url}",
            implementation="redispy",
            connection_pool=redis.connection_pool,  # type: ignore[arg-type]  # documented, typed too narrowly
        )
        self._limiter = MovingWindowRateLimiter(storage)
        self._item = RateLimitItemPerMinute(per_minute)
        self.per_minute = per_minute

    async def hit(self, pupil_id: str) -> None:
        """Count one question, or refuse it with the seconds until the pupil may ask again."""
        if await self._limiter.hit(self._item, "pupil-questions", pupil_id):
            return
        stats = await self._limiter.get_window_stats(self._item, "pupil-questions", pupil_id)
        raise TooManyQuestions(self.per_minute, max(1, math.ceil(stats.reset_time - time.time())))
