"""Waiting for a turn on a replica: the fair line of service.settings.TurnSettings, as one process sees it.

The line itself is in Redis (`store.TurnLine`; the scripts ADMIT, FINISH and TURN_PLACE keep it), shared by
every service process: a question takes a turn when it is admitted, or waits in its class's line; whoever
finishes a question gives its turn to the next class in line, and announces it on a channel. Each process
listens to that channel once, for all of its waiting questions, and also asks where each stands every
`poll_s` (its place for the pupil's page, and a turn whose notice was missed, e.g. across a Redis restart).
"""

import asyncio
import logging
from collections.abc import AsyncGenerator

from service.settings import TurnSettings
from service.store import Store, TurnLine
from service.tasks import stop_tasks

log = logging.getLogger(__name__)


class TurnNotInTime(Exception):
    """A question waited `max_wait_s` in line."""


class Turns:
    def __init__(self, store: Store, settings: TurnSettings, *, longest_answer_s: float) -> None:
        self._store = store
        self._settings = settings
        self._longest_answer_s = longest_answer_s
        self._lines: dict[str, TurnLine] = {}
        self._expected: dict[str, asyncio.Future[None]] = {}
        self._listener: asyncio.Task[None] | None = None

    @property
    def retry_after_s(self) -> int:
        return self._settings.retry_after_s

    @property
    def enabled(self) -> bool:
        return self._settings.max_in_flight_per_replica > 0

    def line(self, replica: str) -> TurnLine:
        line = self._lines.get(replica)
        if line is None:
            turns = self._settings
            line = TurnLine(
                replica, turns.max_in_flight_per_replica, turns.max_waiting_per_replica, self._longest_answer_s
            )
            self._lines[replica] = line
        return line

    async def start(self) -> None:
        if self.enabled:
            self._listener = asyncio.create_task(self._listen())

    async def close(self) -> None:
        await stop_tasks(self._listener)

    def expect(self, question_id: str) -> None:
        """Before a question is admitted: should it wait, its turn's notice may come before its reply."""
        self._expected[question_id] = asyncio.get_running_loop().create_future()

    def forget(self, question_id: str) -> None:
        self._expected.pop(question_id, None)

    async def wait(self, line: TurnLine, classroom_id: str, question_id: str, place: int) -> AsyncGenerator[int]:
        """The question's place in line, first `place` and then whenever it changes, until its turn comes."""
        loop = asyncio.get_running_loop()
        granted = self._expected.get(question_id) or loop.create_future()
        self._expected[question_id] = granted
        deadline = loop.time() + self._settings.max_wait_s
        try:
            yield place
            while not granted.done():
                left = deadline - loop.time()
                if left <= 0:
                    raise TurnNotInTime()
                await asyncio.wait([granted], timeout=min(self._settings.poll_s, left))
                if granted.done():
                    break
                now = await self._store.turn_place(line, classroom_id, question_id)
                if now == 0:
                    break
                if now != place:
                    place = now
                    yield place
        finally:
            self.forget(question_id)

    async def _listen(self) -> None:
        while True:
            try:
                async for question_id in self._store.turns_granted():
                    granted = self._expected.get(question_id)
                    if granted is not None and not granted.done():
                        granted.set_result(None)
            except Exception as exc:  # Redis went away: waiting questions poll meanwhile
                log.warning("lost the turns' channel (%s); listening again in a second", exc)
                await asyncio.sleep(1.0)
