"""Full garbage collections at a quiet moment of the process, not in the middle of a class's burst.

CPython starts a full collection itself once what survived its younger collections has grown by a quarter of
the heap, and that collection holds the event loop for as long as it walks the whole heap: 0.3-0.4 s with
10,000 open pupil pages (benchmarks/open_pages.py). What survives the younger collections is mostly what is in
flight at that instant, so a class's burst is what sets it off, and the burst waits for it. Here the process
takes that decision from CPython: the automatic full collection is off, and one is made when no answer is being
written and none has begun since the last look, at most every `least_s`, or after `most_s` whatever the load
(cyclic garbage that reached the oldest generation waits that long at worst). Younger collections run as before.
"""

import asyncio
import gc
import logging
import time
from typing import Protocol

from service.tasks import every, stop_tasks

log = logging.getLogger(__name__)

# CPython's own trigger for the oldest generation (younger collections since the last full one), out of reach.
NEVER = 2**30


class AnswerActivity(Protocol):
    """The answers a process writes: how many now, and how many it has begun since it started."""

    def __len__(self) -> int: ...

    @property
    def begun(self) -> int: ...


class QuietCollector:
    def __init__(self, answers: AnswerActivity, *, check_s: float, least_s: float, most_s: float) -> None:
        self._answers = answers
        self._check_s = check_s
        self._least_s = least_s
        self._most_s = most_s
        self._begun_seen = answers.begun
        self._last_full = time.monotonic()
        self._thresholds = gc.get_threshold()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        young, middle, _ = self._thresholds
        gc.set_threshold(young, middle, NEVER)
        self._task = asyncio.create_task(every(self._check_s, self._look, log, "a quiet full collection", ()))

    async def close(self) -> None:
        await stop_tasks(self._task)
        gc.set_threshold(*self._thresholds)

    async def _look(self) -> None:
        self.look(time.monotonic())

    def look(self, now: float) -> bool:
        """A full collection if it is time for one; True if one was made."""
        begun = self._answers.begun
        quiet = len(self._answers) == 0 and begun == self._begun_seen
        self._begun_seen = begun
        since = now - self._last_full
        if not (quiet and since >= self._least_s or since >= self._most_s):
            return False
        gc.collect()
        self._last_full = now
        return True
