"""The operator's figures from the tallies the store keeps as questions end (service/store/stats.py), not from
the records: the same `figures.Figures`, counts and token sums exact, p50 and p95 of the time to first token from
its histogram, within the buckets' precision (`TTFT_RATIO - 1`, 2.5 %) of what `figures.percentile` gives from
the values themselves."""

from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from pydantic import TypeAdapter

from service.classroom.figures import Figures, Point
from service.store.stats import MINUTE, TTFT_RATIO, StatsWindow, Tally


def histogram_percentiles(histogram: Mapping[int, int], pcts: Sequence[int]) -> list[float] | None:
    """The `pcts` percentiles of the values counted in `histogram` (bucket -> values in [r**b, r**(b+1))), as
    `figures.percentiles` interpolates between order statistics; each order statistic read as its bucket's values
    spread evenly over it (in log scale). None for no values."""
    if len(histogram) == 1:
        [(bucket, count)] = histogram.items()
        if count == 1:
            return [float(TTFT_RATIO ** (bucket + 0.5))] * len(pcts)
    buckets = sorted(histogram)
    below = list(accumulate(histogram[b] for b in buckets))  # values up to each bucket
    n = below[-1] if below else 0
    if n == 0:
        return None

    def nth(k: int) -> float:  # the k-th smallest value (from 0), as its bucket places it
        i = bisect_right(below, k)
        count = histogram[buckets[i]]
        return float(TTFT_RATIO ** (buckets[i] + (k - below[i] + count + 0.5) / count))

    if n == 1:
        return [nth(0)] * len(pcts)
    found = []
    for pct in pcts:
        j, delta = divmod(pct * (n - 1), 100)  # statistics.quantiles(n=100, method="inclusive")
        found.append(nth(j) if delta == 0 else (nth(j) * (100 - delta) + nth(j + 1) * delta) / 100)
    return found


def _figures(tally: Tally) -> dict[str, Any]:
    p50_p95 = histogram_percentiles(tally.ttft, (50, 95))
    return {
        "questions": tally.questions,
        "answered": tally.answered,
        "errors": tally.errors,
        "ttft_p50_ms": p50_p95[0] if p50_p95 else None,
        "ttft_p95_ms": p50_p95[1] if p50_p95 else None,
        "prompt_tokens": tally.prompt_tokens,
        "cached_tokens": tally.cached_tokens,
        "cache_hit_ratio": tally.cached_tokens / tally.prompt_tokens if tally.prompt_tokens else None,
    }


def figures_of(tally: Tally) -> Figures:
    return Figures(**_figures(tally))


# A day's series is 1,441 points a variant, and a day's classes thousands: each validated as one list or
# mapping, at half the cost of a model at a time.
_POINTS = TypeAdapter(list[Point])
_BY_NAME = TypeAdapter(dict[str, Figures])


def _by_name(tallies: Mapping[str, Tally]) -> dict[str, Figures]:
    return _BY_NAME.validate_python({name: _figures(tally) for name, tally in sorted(tallies.items())})


def total(tallies: Iterable[Tally]) -> Tally:
    summed = Tally()
    for tally in tallies:
        summed.add(tally)
    return summed


@dataclass
class WindowFigures:
    overall: Figures
    by_variant: dict[str, Figures]
    by_replica: dict[str, Figures]
    by_classroom: dict[str, Figures]
    series: dict[str, list[Point]]  # per variant, a point a minute, empty minutes included


def window_figures(window: StatsWindow) -> WindowFigures:
    """A window's figures overall (every variant's questions), per variant, replica and classroom, and per minute."""
    variants = {variant: total(minutes.values()) for variant, minutes in window.series.items()}
    empty = _figures(Tally())
    series = {}
    for variant, minutes in sorted(window.series.items()):
        series[variant] = _POINTS.validate_python(
            [
                {"start": window.start + i * MINUTE, **(_figures(minutes[i]) if i in minutes else empty)}
                for i in range(window.minutes)
            ]
        )
    return WindowFigures(
        overall=figures_of(total(variants.values())),
        by_variant=_by_name(variants),
        by_replica=_by_name(window.by_replica),
        by_classroom=_by_name(window.by_classroom),
        series=series,
    )
