"""The operators' figures, kept as questions end: the Lua script that stores a question's final record (FINISH,
REFUSE, ABANDON) adds the question to tallies of the hour, ten minutes and minute it was asked in; `stats_window`
reads a window's tallies back in one round trip, however many questions it holds.

A question counts once, in the minute it was asked, when its final state is stored: one still being answered
appears when it ends (or is swept as cut short). FINISH run twice (a command retried on a dropped connection)
counts once: it counts only while the record it replaces still says `answering`; ABANDON counts only when it
replaces the record; REFUSE only when there was none.

A hash for each hour, ten minutes and minute (its start in epoch seconds), and one for an hour's per-minute series,
its fields named by scope and figure, `{scope}|{figure}`:

    tallies:{hour}            replica:{r}, class:{id}: the hour's
    tallies:{ten}:ten         replica:{r}, class:{id}: the ten minutes'
    tallies:{minute}:minute   replica:{r}, class:{id}: the minute's
    tallies:{hour}:series     {minute of the hour}|variant:{v}: the series, a variant's a minute

so a window reads each of its hours' series, and the totals of the fewest blocks that make it up: its
whole hours, then whole ten minutes and minutes at its edges (at most 5 and 9 an edge; none at the end of one
that ends now). A figure is `q` (questions), `a` (answered), `e` (errors), `p` (prompt tokens), `c` (cached
tokens), or a bucket of the time-to-first-token histogram (its number): each an integer the scripts add to with
HINCRBY, so that storing a question's end costs Redis a few microseconds a figure whatever the hash holds (a
figure that is 0 is not written); a hash lives until a day after its hour ends.
"""

import math
import time
from dataclasses import dataclass, field

from service.records import QuestionRecord, QuestionStatus, is_error
from service.store.base import StoreBase
from service.store.keys import Keys

MINUTE = 60
TEN = 600
HOUR = 3600
# The longest window an operator reads (service.api.operator.Window), and a margin for the clocks of processes.
REACH_S = 24 * 3600
KEPT_S = REACH_S + 600

# Time-to-first-token buckets: [r**i, r**(i+1)) milliseconds for bucket i, so any value read back from the
# histogram is within r - 1 (2.5 %) of the true one; below 0.01 ms counts as 0.01 ms.
TTFT_RATIO = 1.025
TTFT_FLOOR_MS = 0.01
_LOG_RATIO = math.log(TTFT_RATIO)
# The counts' figures, as the scripts name them (scripts.STATS's FIGURES): the rest are buckets.
FIGURES = ("q", "a", "e", "p", "c")


def ttft_bucket(ttft_ms: float) -> int:
    return math.floor(math.log(max(ttft_ms, TTFT_FLOOR_MS)) / _LOG_RATIO)


@dataclass(slots=True)
class Tally:
    """What a set of questions adds up to: the counts and token sums of `figures.Figures`, and a histogram of their
    times to first token (bucket -> questions)."""

    questions: int = 0
    answered: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    ttft: dict[int, int] = field(default_factory=dict)

    def add(self, other: "Tally") -> None:
        self.questions += other.questions
        self.answered += other.answered
        self.errors += other.errors
        self.prompt_tokens += other.prompt_tokens
        self.cached_tokens += other.cached_tokens
        for bucket, count in other.ttft.items():
            self.ttft[bucket] = self.ttft.get(bucket, 0) + count

    def fields(self, scope: str) -> dict[str, int]:
        """The hash fields `scope` holds for this tally, as the scripts write them (none for a figure of 0)."""
        counts = (self.questions, self.answered, self.errors, self.prompt_tokens, self.cached_tokens)
        found = {f"{scope}|{figure}": n for figure, n in zip(FIGURES, counts, strict=True) if n}
        return found | {f"{scope}|{bucket}": n for bucket, n in self.ttft.items() if n}

    def take(self, figure: bytes, value: int) -> None:
        """One figure of a hash's field added."""
        if figure[0] < 0x61:  # a digit or '-': a bucket, as most fields are
            bucket = int(figure)
            self.ttft[bucket] = self.ttft.get(bucket, 0) + value
        elif figure == b"q":
            self.questions += value
        elif figure == b"a":
            self.answered += value
        elif figure == b"e":
            self.errors += value
        elif figure == b"p":
            self.prompt_tokens += value
        elif figure == b"c":
            self.cached_tokens += value


def tally_of(record: QuestionRecord) -> Tally:
    """What a question's final record adds: one question, answered or an error of ours (`records.is_error`), its
    tokens and its time to first token."""
    usage = record.usage
    return Tally(
        questions=1,
        answered=int(record.status == QuestionStatus.ANSWERED),
        errors=int(is_error(record)),
        prompt_tokens=usage.prompt_tokens if usage else 0,
        cached_tokens=usage.cached_tokens if usage else 0,
        ttft={} if record.ttft_ms is None else {ttft_bucket(record.ttft_ms): 1},
    )


def adding(record: QuestionRecord) -> tuple[list[str], list[str | int]]:
    """The KEYS and ARGV of the scripts' `stats_add` (scripts.STATS) for a question's final record."""
    asked = int(record.asked_at.timestamp())
    hour, ten, minute = asked - asked % HOUR, asked - asked % TEN, asked - asked % MINUTE
    scopes = [f"replica:{record.replica or 'none'}", f"class:{record.classroom_id}"]
    series = f"{(minute - hour) // MINUTE}|variant:{record.variant or 'none'}"
    keys = [Keys.stats(hour), Keys.stats_ten(ten), Keys.stats_minute(minute), Keys.stats_series(hour)]
    tally = tally_of(record)
    counts: list[str | int] = [tally.questions, tally.answered, tally.errors, tally.prompt_tokens, tally.cached_tokens]
    bucket = next(iter(tally.ttft), "")
    return keys, [*counts, bucket, hour + HOUR + KEPT_S, series, *scopes, *scopes, *scopes]


@dataclass
class StatsWindow:
    """The tallies of the questions asked in a window's minutes: the first from `start` (epoch s, a minute's start),
    `minutes` of them."""

    start: int
    minutes: int
    series: dict[str, dict[int, Tally]] = field(default_factory=dict)  # variant -> minute (0: the first) -> tally
    by_replica: dict[str, Tally] = field(default_factory=dict)
    by_classroom: dict[str, Tally] = field(default_factory=dict)


@dataclass(frozen=True)
class Reads:
    """A window's minutes, [`first`, `end`) in epoch s, and the hashes that make it up: each hour's series (its
    hash, with the hour), and the blocks whose totals count."""

    first: int
    end: int
    series: dict[str, int]
    totals: list[str]


def window_reads(since: float, until: float | None = None) -> Reads:
    """Each hour's series, and the fewest blocks that make up the window from the minute holding `since` to the
    one holding `until` (None: now): its whole hours, then whole ten minutes, then minutes. Up to now, the block
    that holds now counts whole (none of its questions was asked later)."""
    now = until is None
    until = time.time() if until is None else until
    first, end = int(since) - int(since) % MINUTE, int(until) - int(until) % MINUTE + MINUTE

    def whole(start: int, length: int) -> bool:  # a block whose questions are all in the window
        return first <= start and (start + length <= end or now)

    series: dict[str, int] = {}
    totals: list[str] = []
    for hour in range(first - first % HOUR, end, HOUR):
        series[Keys.stats_series(hour)] = hour
        if whole(hour, HOUR):
            totals.append(Keys.stats(hour))
            continue
        for ten in range(max(hour, first - first % TEN), min(hour + HOUR, end), TEN):
            if whole(ten, TEN):
                totals.append(Keys.stats_ten(ten))
            else:
                totals += [Keys.stats_minute(m) for m in range(max(ten, first), min(ten + TEN, end), MINUTE)]
    return Reads(first, end, series, totals)


class StatsStore(StoreBase):
    async def stats_window(self, since: float, until: float | None = None) -> StatsWindow:
        """The tallies of the minutes from the one holding `since` to the one holding `until` (epoch s; None: now),
        both counted whole, from the hashes `window_reads` names, in one transaction (the figures agree with each
        other): never a question's record."""
        reads = window_reads(since, until)
        first = reads.first
        window = StatsWindow(start=first, minutes=(reads.end - first) // MINUTE)
        async with self.redis.pipeline(transaction=True) as tx:
            for key in [*reads.series, *reads.totals]:
                tx.hgetall(key)
            replies = await tx.execute()
        for hour, reply in zip(reads.series.values(), replies, strict=False):
            for scope, tally in _tallies(reply).items():
                slot, _, variant = scope.partition(b"|")
                if 0 <= (minute := (hour - first) // MINUTE + int(slot)) < window.minutes:
                    window.series.setdefault(variant.partition(b":")[2].decode(), {})[minute] = tally
        totals = {b"replica": window.by_replica, b"class": window.by_classroom}
        for reply in replies[len(reads.series) :]:
            for scope, tally in _tallies(reply).items():
                kind, _, name = scope.partition(b":")
                _add(totals[kind], name.decode(), tally)
        return window


def _tallies(reply: dict[bytes, bytes]) -> dict[bytes, Tally]:
    """A hash's fields, `{scope}|{figure}`, as a tally a scope."""
    found: dict[bytes, Tally] = {}
    for name, value in reply.items():
        scope, _, figure = name.rpartition(b"|")
        if (tally := found.get(scope)) is None:
            tally = found[scope] = Tally()
        tally.take(figure, int(value))
    return found


def _add(tallies: dict[str, Tally], name: str, tally: Tally) -> None:
    if (found := tallies.get(name)) is None:
        tallies[name] = tally
    else:
        found.add(tally)
