"""Latency and cache figures computed from the stored question records (exact, per class, any window).

Prometheus holds the same figures as time series with bounded labels; these are for the teacher's and
operator's pages, which need per-classroom detail that labels must not carry. The operator's page reads the
same figures from tallies kept as questions end (`aggregates`), not from the records: a day of a district's
questions is too many to read every few seconds.
"""

import statistics
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, Field

from service.records import QuestionRecord, QuestionStatus, is_error


class Figures(BaseModel):
    questions: int
    answered: int
    errors: int = Field(description="questions without a whole answer for a reason of ours (not a pupil stopping it)")
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    prompt_tokens: int
    cached_tokens: int
    cache_hit_ratio: float | None  # cached / prompt tokens


class Point(Figures):
    start: float  # epoch seconds at the start of the bucket


def percentiles(values: Sequence[float], pcts: Sequence[int]) -> list[float] | None:
    """The `pcts` percentiles (whole numbers, 1 to 99) of `values`, by linear interpolation between order
    statistics: numpy's default and `vllm bench serve`'s (the load tester's figures use it too). None for none."""
    if not values:
        return None
    if len(values) == 1:
        return [values[0]] * len(pcts)
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return [cuts[pct - 1] for pct in pcts]


def percentile(values: Sequence[float], pct: int) -> float | None:
    found = percentiles(values, (pct,))
    return None if found is None else found[0]


def figures(records: Iterable[QuestionRecord]) -> Figures:
    records = list(records)
    ttfts = [r.ttft_ms for r in records if r.ttft_ms is not None]
    prompt = sum(r.usage.prompt_tokens for r in records if r.usage)
    cached = sum(r.usage.cached_tokens for r in records if r.usage)
    return Figures(
        questions=len(records),
        answered=sum(r.status == QuestionStatus.ANSWERED for r in records),
        errors=sum(is_error(r) for r in records),
        ttft_p50_ms=percentile(ttfts, 50),
        ttft_p95_ms=percentile(ttfts, 95),
        prompt_tokens=prompt,
        cached_tokens=cached,
        cache_hit_ratio=cached / prompt if prompt else None,
    )
