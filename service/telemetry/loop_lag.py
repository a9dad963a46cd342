"""How late this process's event loop runs what is due. Everything a process does shares its one loop: while
something holds it (a slow parse, a sweep, thirty questions of a burst), a question that arrives waits that
long before any of it runs, and a probe's reply waits too, which is how a late loop turns into false 503s.
A timer is set every `interval_s`; how late it fires is observed in `classroom_event_loop_lag_seconds`."""

import asyncio

from prometheus_client import Histogram

from service.tasks import stop_tasks


class LoopLag:
    def __init__(self, histogram: Histogram, interval_s: float) -> None:
        self._histogram = histogram
        self._interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._watch())

    async def close(self) -> None:
        await stop_tasks(self._task)

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + self._interval_s
            await asyncio.sleep(self._interval_s)
            self._histogram.observe(max(0.0, loop.time() - due))
