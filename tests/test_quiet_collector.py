"""Full collections at quiet moments (service/quiet_collector.py): CPython no longer starts one on its own, the
process makes one when no answer is being written and none began since its last look, and one anyway when
`most_s` has passed."""

import asyncio
import gc
import time

from service.quiet_collector import NEVER, QuietCollector


class Answers:
    """What the collector reads of the process's answers (service.classroom.live.LiveAnswers)."""

    def __init__(self) -> None:
        self.writing = 0
        self.begun = 0

    def __len__(self) -> int:
        return self.writing


def full_collections() -> int:
    return int(gc.get_stats()[2]["collections"])


def test_a_full_collection_waits_for_a_quiet_moment_and_for_least_s() -> None:
    answers = Answers()
    made_at = time.monotonic()
    collector = QuietCollector(answers, check_s=1.0, least_s=60.0, most_s=600.0)
    made = full_collections()
    assert collector.look(made_at + 1) is False  # quiet, but under least_s since start-up

    answers.writing, answers.begun = 1, 1
    assert collector.look(made_at + 100) is False  # an answer being written
    answers.writing, answers.begun = 0, 2
    assert collector.look(made_at + 101) is False  # none now, but one began and ended since the last look
    assert full_collections() == made
    assert collector.look(made_at + 102) is True  # quiet, and least_s since the last full collection
    assert full_collections() == made + 1
    assert collector.look(made_at + 103) is False  # quiet, but one was made under least_s ago
    assert collector.look(made_at + 163) is True


def test_a_busy_process_still_collects_after_most_s() -> None:
    answers = Answers()
    answers.writing = 3
    made_at = time.monotonic()
    collector = QuietCollector(answers, check_s=1.0, least_s=0.0, most_s=600.0)
    assert collector.look(made_at + 599) is False  # never quiet, under most_s
    made = full_collections()
    assert collector.look(made_at + 601) is True
    assert full_collections() == made + 1


def test_cpython_starts_no_full_collection_while_it_runs_and_again_after() -> None:
    before = gc.get_threshold()

    async def scene() -> tuple[int, ...]:
        collector = QuietCollector(Answers(), check_s=60.0, least_s=60.0, most_s=600.0)
        await collector.start()
        during = gc.get_threshold()
        await collector.close()
        return during

    during = asyncio.run(scene())
    assert during == (before[0], before[1], NEVER)
    assert gc.get_threshold() == before
