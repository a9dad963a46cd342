"""Every figure of a benchmark, computed from its saved request timelines. Definitions (report.py prints
them with every report):

- TTFT: from sending a request to its first streamed text.
- E2E (end-to-end latency): from sending to the last streamed text.
- TPOT (vLLM's name; GuideLLM calls the same thing ITL): per request, (E2E - TTFT) / (output tokens - 1),
  for requests with at least 2 output tokens.
- ITL (vLLM's name): every gap between two consecutive streamed pieces of one request, pooled over all
  requests (one piece is one token, unless vLLM's API process fell behind and merged several into one
  piece; `vllm bench serve` counts pieces the same way).
- GuideLLM's TPOT: per request, E2E / output tokens (the first token included).
- Percentiles: linear interpolation between order statistics (numpy's default, as `vllm bench serve`; the
  service's own figures share the definition: service.classroom.figures.percentiles).
- Duration: from the benchmark's start (the first scheduled send) to the end of the last request.
- Request throughput: completed requests / duration; output-token throughput: their output tokens /
  duration (the server's own count, from usage).
- Goodput: completed requests whose TTFT is at most the target, per second of duration; a load level
  *meets the target* when the p95 TTFT of all its requests, failed ones counted as missing it, is at most
  the target.
- Cached-token ratio: cached prompt tokens / prompt tokens, from each response's usage, per class and in all.
- Send lag: how late the client sent each request against the profile's schedule, or against the moment its
  pupil was free to ask if that came later (client overhead).
- Waiting for the pupil's previous answer (pupil API): how long a question due while its pupil's last answer still
  streamed waited for that answer to end (a pupil asks one question at a time). The workload's own shape, neither
  latency nor the client's lateness.
- Server timing: the change of vLLM's own TTFT, ITL and E2E histograms (sum / count) over the level, and
  the client's mean minus the server's (the client's and the network's share; through the service, the
  service's too).
"""

import math
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
from pydantic import BaseModel

from loadtest.results import Benchmark, CacheCounters, RequestRecord
from service.classroom.figures import percentiles

PERCENTILES = (50, 90, 95, 99)


class Distribution(BaseModel):
    count: int
    mean: float | None
    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None

    def at(self, name: str) -> float | None:
        value: float | None = getattr(self, name)
        return value


def distribution(values_s: Sequence[float]) -> Distribution:
    """Mean and percentiles of values given in seconds, in milliseconds."""
    if not values_s:
        return Distribution(count=0, mean=None, p50=None, p90=None, p95=None, p99=None)
    ms = np.asarray(values_s, dtype=float) * 1000
    found = percentiles(ms.tolist(), PERCENTILES)
    assert found is not None
    p50, p90, p95, p99 = found
    return Distribution(count=len(ms), mean=float(ms.mean()), p50=p50, p90=p90, p95=p95, p99=p99)


def ttft(r: RequestRecord) -> float | None:
    return None if r.first_token_at is None else r.first_token_at - r.sent_at


def e2e(r: RequestRecord) -> float | None:
    if r.first_token_at is None:
        return None
    last = r.token_times[-1] if r.token_times else r.first_token_at
    return last - r.sent_at


def tpot(r: RequestRecord) -> float | None:
    """vLLM's TPOT (GuideLLM's ITL): the decode time per token after the first."""
    first, end, n = ttft(r), e2e(r), r.output_tokens
    if first is None or end is None or n is None or n < 2:
        return None
    return (end - first) / (n - 1)


def guidellm_tpot(r: RequestRecord) -> float | None:
    end, n = e2e(r), r.output_tokens
    if end is None or not n:
        return None
    return end / n


def itl_gaps(r: RequestRecord) -> list[float]:
    times = r.token_times
    return [b - a for a, b in zip(times, times[1:], strict=False)]


def error_kind(r: RequestRecord) -> str:
    """The error's kind. Through the pupil API, an answer that ended normally with output tokens but no
    text at all is an `empty_answer` (the stand-in's random tokens can all decode to nothing): nothing
    reached the pupil, so it counts as a failure, but not as the server's. (Straight from vLLM, such
    tokens are timed like any others: service.backends.vllm_stream.)"""
    kind = r.error or "no_token"
    if kind == "no_token" and (r.output_tokens or 0) > 0:
        return "empty_answer"
    return kind


def _present(values: Iterable[float | None]) -> list[float]:
    return [v for v in values if v is not None]


class CacheFigures(BaseModel):
    prompt_tokens: int
    cached_tokens: int
    ratio: float | None


def cache_figures(records: Iterable[RequestRecord]) -> CacheFigures:
    done = [r for r in records if r.prompt_tokens is not None]
    prompt = sum(r.prompt_tokens or 0 for r in done)
    cached = sum(r.cached_tokens or 0 for r in done)
    return CacheFigures(prompt_tokens=prompt, cached_tokens=cached, ratio=cached / prompt if prompt else None)


class ServerCacheDelta(BaseModel):
    url: str
    queries: float | None
    hits: float | None
    hit_ratio: float | None
    prompt_tokens: float | None
    generation_tokens: float | None


def _delta(after: float | None, before: float | None) -> float | None:
    return None if after is None or before is None else after - before


def server_delta(url: str, before: CacheCounters, after: CacheCounters) -> ServerCacheDelta:
    queries = _delta(after.queries, before.queries)
    hits = _delta(after.hits, before.hits)
    return ServerCacheDelta(
        url=url,
        queries=queries,
        hits=hits,
        hit_ratio=hits / queries if hits is not None and queries else None,
        prompt_tokens=_delta(after.prompt_tokens, before.prompt_tokens),
        generation_tokens=_delta(after.generation_tokens, before.generation_tokens),
    )


class ServerTiming(BaseModel):
    """The server's own latency histograms over a level (the change of their sums and counts), and the
    client's means minus the server's for the same requests: what the client and its path to the server
    add to each figure. A difference is only meaningful where `requests` equals the client's completed."""

    url: str
    requests: float | None  # the change of the TTFT histogram's count
    ttft_mean_ms: float | None
    itl_mean_ms: float | None
    e2e_mean_ms: float | None
    client_minus_server_ttft_ms: float | None = None
    client_minus_server_itl_ms: float | None = None
    client_minus_server_e2e_ms: float | None = None


def _mean_ms(total: float | None, count: float | None) -> float | None:
    return total / count * 1000 if total is not None and count else None


def server_timing(url: str, before: CacheCounters, after: CacheCounters) -> ServerTiming:
    def mean(field: str) -> float | None:
        total = _delta(getattr(after, f"{field}_sum"), getattr(before, f"{field}_sum"))
        return _mean_ms(total, _delta(getattr(after, f"{field}_count"), getattr(before, f"{field}_count")))

    return ServerTiming(
        url=url,
        requests=_delta(after.ttft_count, before.ttft_count),
        ttft_mean_ms=mean("ttft"),
        itl_mean_ms=mean("itl"),
        e2e_mean_ms=mean("e2e"),
    )


def _minus(client: float | None, server: float | None) -> float | None:
    return None if client is None or server is None else client - server


class Figures(BaseModel):
    label: str
    profile: str
    rate: float | None
    requests: int
    completed: int
    errors: dict[str, int]
    duration_s: float
    ttft_ms: Distribution
    e2e_ms: Distribution
    tpot_ms: Distribution
    itl_ms: Distribution
    guidellm_tpot_ms: Distribution
    request_throughput: float  # req/s
    output_throughput: float  # tokens/s
    prompt_tokens_mean: float | None
    output_tokens_mean: float | None
    ttft_target_ms: float
    goodput: float  # req/s meeting the target
    goodput_fraction: float  # of all requests
    p95_ttft_all_ms: float | None  # failed requests counted as infinitely late
    meets_target: bool
    cache: CacheFigures
    cache_by_class: dict[str, CacheFigures]
    server_cache: list[ServerCacheDelta]
    server_timing: list[ServerTiming]  # the server's own histograms, client minus server (one server: exact)
    send_lag_ms: Distribution
    pupil_wait_ms: Distribution  # the pupil API: questions that waited for their pupil's previous answer
    client_cpu_ms_per_request: float | None
    service_ttft_ms: Distribution  # the service's own TTFT of its backend call (pupil API)
    service_overhead_ttft_ms: Distribution  # client TTFT - the service's TTFT, per request


def p95_with_failures(records: Sequence[RequestRecord]) -> float | None:
    """p95 TTFT over all requests, a failed one counted as never answering (so it can only raise it)."""
    if not records:
        return None
    values = [ttft(r) if r.ok else math.inf for r in records]
    ordered = np.sort(np.asarray([v if v is not None else math.inf for v in values], dtype=float))
    # numpy's linear interpolation is undefined between a finite value and inf; take the order statistic
    # at or above the 95th percentile's rank, which is never lower than the interpolated value.
    rank = math.ceil(0.95 * (len(ordered) - 1))
    return float(ordered[rank]) * 1000


def figures(bench: Benchmark, ttft_target_ms: float) -> Figures:
    records = bench.requests
    ok = [r for r in records if r.ok]
    duration = bench.duration_s
    ttfts = _present(ttft(r) for r in ok)
    output = sum(r.output_tokens or 0 for r in ok)
    good = sum(1 for v in ttfts if v * 1000 <= ttft_target_ms)
    errors = Counter(error_kind(r) for r in records if not r.ok)
    groups = sorted({r.group for r in records if r.group is not None})
    service_ttft = [r.service_ttft_ms / 1000 for r in ok if r.service_ttft_ms is not None]
    overhead = [
        (r.first_token_at - r.sent_at) - r.service_ttft_ms / 1000
        for r in ok
        if r.service_ttft_ms is not None and r.first_token_at is not None
    ]
    p95_all = p95_with_failures(records)
    ttft_ms, itl_ms, e2e_ms = (
        distribution(ttfts),
        distribution([gap for r in ok for gap in itl_gaps(r)]),
        distribution(_present(e2e(r) for r in ok)),
    )
    timings = [server_timing(s.url, s.before, s.after) for s in bench.cache]
    if len(timings) == 1:  # with several servers, each saw only part of the requests
        t = timings[0]
        t.client_minus_server_ttft_ms = _minus(ttft_ms.mean, t.ttft_mean_ms)
        t.client_minus_server_itl_ms = _minus(itl_ms.mean, t.itl_mean_ms)
        t.client_minus_server_e2e_ms = _minus(e2e_ms.mean, t.e2e_mean_ms)
    return Figures(
        label=bench.label,
        profile=bench.profile,
        rate=bench.rate,
        requests=len(records),
        completed=len(ok),
        errors=dict(sorted(errors.items())),
        duration_s=duration,
        ttft_ms=ttft_ms,
        e2e_ms=e2e_ms,
        tpot_ms=distribution(_present(tpot(r) for r in ok)),
        itl_ms=itl_ms,
        guidellm_tpot_ms=distribution(_present(guidellm_tpot(r) for r in ok)),
        request_throughput=len(ok) / duration if duration > 0 else 0.0,
        output_throughput=output / duration if duration > 0 else 0.0,
        prompt_tokens_mean=_mean(r.prompt_tokens for r in ok),
        output_tokens_mean=_mean(r.output_tokens for r in ok),
        ttft_target_ms=ttft_target_ms,
        goodput=good / duration if duration > 0 else 0.0,
        goodput_fraction=good / len(records) if records else 0.0,
        p95_ttft_all_ms=p95_all,
        meets_target=p95_all is not None and p95_all <= ttft_target_ms,
        cache=cache_figures(ok),
        cache_by_class={g: cache_figures(r for r in ok if r.group == g) for g in groups},
        server_cache=[server_delta(s.url, s.before, s.after) for s in bench.cache],
        server_timing=timings,
        send_lag_ms=distribution([max(0.0, r.sent_at - max(r.scheduled_at, r.pupil_free_at or 0.0)) for r in records]),
        pupil_wait_ms=distribution(
            [r.pupil_free_at - r.scheduled_at for r in records if r.pupil_free_at and r.pupil_free_at > r.scheduled_at]
        ),
        client_cpu_ms_per_request=bench.client_cpu_s * 1000 / len(records) if records else None,
        service_ttft_ms=distribution(service_ttft),
        service_overhead_ttft_ms=distribution(overhead),
    )


def _mean(values: Iterable[int | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None
