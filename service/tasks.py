"""The service's background tasks (channel listeners, sweeps, warm-ups) end the same way at shutdown."""

import asyncio
import logging
from collections.abc import Awaitable, Callable


async def stop_tasks(*tasks: asyncio.Task[None] | None) -> None:
    """Cancel the tasks and wait until they have ended; what they raise on the way out is dropped (they were
    told to stop)."""
    running = [task for task in tasks if task is not None]
    for task in running:
        task.cancel()
    await asyncio.gather(*running, return_exceptions=True)


async def every(
    seconds: float,
    work: Callable[[], Awaitable[object]],
    log: logging.Logger,
    what: str,
    errors: tuple[type[Exception], ...],
) -> None:
    """`work` now and then every `seconds`, until cancelled: a round that raises one of `errors` (Redis down, a
    disk full) is logged as `what` not done, and the next round tries again."""
    while True:
        try:
            await work()
        except errors as exc:
            log.warning("%s not done this round: %s", what, exc)
        await asyncio.sleep(seconds)
