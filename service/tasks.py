"""The service's background tasks (channel listeners, sweeps, warm-ups) end the same way at shutdown."""

import asyncio


async def stop_tasks(*tasks: asyncio.Task[None] | None) -> None:
    """Cancel the tasks and wait until they have ended; what they raise on the way out is dropped (they were
    told to stop)."""
    running = [task for task in tasks if task is not None]
    for task in running:
        task.cancel()
    await asyncio.gather(*running, return_exceptions=True)
