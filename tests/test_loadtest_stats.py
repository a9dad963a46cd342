"""Every figure of loadtest/stats.py on hand-made timelines, where the right answer is known by hand, and how the
reports and plots show them."""

import math
from pathlib import Path

import numpy as np
import pytest
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from loadtest import plots
from loadtest.report import level_table
from loadtest.results import Benchmark, CacheCounters, RequestRecord, ServerCache
from loadtest.stats import (
    distribution,
    e2e,
    figures,
    guidellm_tpot,
    itl_gaps,
    p95_with_failures,
    server_delta,
    tpot,
    ttft,
)


def request(index: int, sent: float, tokens: list[float], output: int | None = None, **extra: object) -> RequestRecord:
    fields: dict[str, object] = {
        "index": index,
        "scheduled_at": sent,
        "sent_at": sent,
        "first_token_at": tokens[0] if tokens else None,
        "token_times": tokens,
        "ended_at": (tokens[-1] if tokens else sent) + 0.01,
        "output_tokens": len(tokens) if output is None else output,
        "prompt_tokens": 100,
        "cached_tokens": 0,
    }
    return RequestRecord.model_validate(fields | extra)


def bench(records: list[RequestRecord], duration: float, cpu: float = 0.0) -> Benchmark:
    return Benchmark(
        profile="constant", rate=2.0, started_wall=0.0, duration_s=duration, requests=records, client_cpu_s=cpu
    )


def test_distribution_is_numpy_linear_percentiles_in_ms() -> None:
    d = distribution([0.1 * i for i in range(1, 11)])  # 0.1 .. 1.0 s
    assert d.count == 10
    assert d.mean == pytest.approx(550.0)
    assert d.p50 == pytest.approx(550.0)  # halfway between 500 and 600
    assert d.p90 == pytest.approx(910.0)  # rank 8.1 of 0..9
    assert d.p99 == pytest.approx(991.0)
    assert distribution([]).p50 is None


def test_per_request_figures_by_their_definitions() -> None:
    r = request(0, sent=1.0, tokens=[1.5, 1.6, 1.8, 2.1])
    assert ttft(r) == pytest.approx(0.5)
    assert e2e(r) == pytest.approx(1.1)
    assert tpot(r) == pytest.approx((1.1 - 0.5) / 3)  # vLLM's TPOT = GuideLLM's ITL
    assert itl_gaps(r) == pytest.approx([0.1, 0.2, 0.3])  # vLLM's ITL: every gap
    assert guidellm_tpot(r) == pytest.approx(1.1 / 4)  # GuideLLM's TPOT counts the first token
    one = request(1, sent=0.0, tokens=[0.2])
    assert tpot(one) is None and itl_gaps(one) == []
    failed = request(2, sent=0.0, tokens=[], error="http_503")
    assert ttft(failed) is None and e2e(failed) is None and not failed.ok


def test_throughput_goodput_and_the_target() -> None:
    records = [
        request(0, 0.0, [0.1, 0.2, 0.3]),  # TTFT 100 ms
        request(1, 0.5, [0.8, 0.9, 1.0]),  # 300 ms
        request(2, 1.0, [1.6, 1.7, 1.8]),  # 600 ms: misses a 500 ms target
        request(3, 1.5, [], error="timeout"),
        request(4, 1.6, [], output=64, error="no_token"),  # 64 tokens that decoded to no text
    ]
    f = figures(bench(records, duration=2.0, cpu=0.04), ttft_target_ms=500)
    assert (f.requests, f.completed) == (5, 3)
    assert f.errors == {"empty_answer": 1, "timeout": 1}
    assert f.request_throughput == pytest.approx(3 / 2.0)
    assert f.output_throughput == pytest.approx(9 / 2.0)
    assert f.goodput == pytest.approx(2 / 2.0)
    assert f.goodput_fraction == pytest.approx(2 / 5)
    assert f.ttft_ms.p50 == pytest.approx(300.0)
    assert f.p95_ttft_all_ms == math.inf  # the failed request counts as never answering
    assert not f.meets_target
    assert f.client_cpu_ms_per_request == pytest.approx(40 / 5)


def test_p95_over_all_requests_meets_the_target_when_failures_are_rare_enough() -> None:
    answered = [request(i, 0.0, [0.1]) for i in range(39)]
    records = [*answered, request(39, 0.0, [], error="http_500")]
    assert p95_with_failures(records) == pytest.approx(100.0)  # rank ceil(0.95 x 39) = 38 is still answered
    assert figures(bench(records, 1.0), ttft_target_ms=150).meets_target
    assert not figures(bench(records, 1.0), ttft_target_ms=50).meets_target


def test_cache_ratio_per_class_and_the_servers_counter_delta() -> None:
    records = [
        request(0, 0.0, [0.1], group="a", prompt_tokens=1000, cached_tokens=0),
        request(1, 0.0, [0.1], group="a", prompt_tokens=1000, cached_tokens=896),
        request(2, 0.0, [0.1], group="b", prompt_tokens=500, cached_tokens=384),
    ]
    b = bench(records, 1.0)
    b.cache = [
        ServerCache(url="u", before=CacheCounters(queries=100, hits=10), after=CacheCounters(queries=2600, hits=1290))
    ]
    f = figures(b, 1000)
    assert f.cache.ratio == pytest.approx(1280 / 2500)
    assert f.cache_by_class["a"].ratio == pytest.approx(896 / 2000)
    assert f.cache_by_class["b"].ratio == pytest.approx(384 / 500)
    [server] = f.server_cache
    assert (server.queries, server.hits) == (2500, 1280)
    assert server.hit_ratio == pytest.approx(1280 / 2500)
    assert server_delta("u", CacheCounters(), CacheCounters(hits=5)).hits is None  # no counters: unknown, not 0


def test_client_minus_server_from_the_histograms_change() -> None:
    records = [request(0, 0.0, [0.050, 0.060, 0.070]), request(1, 0.0, [0.030, 0.040])]
    b = bench(records, 1.0)
    before = CacheCounters(ttft_sum=10.0, ttft_count=100, itl_sum=1.0, itl_count=200, e2e_sum=50.0, e2e_count=100)
    after = CacheCounters(ttft_sum=10.07, ttft_count=102, itl_sum=1.027, itl_count=203, e2e_sum=50.1, e2e_count=102)
    b.cache = [ServerCache(url="u", before=before, after=after)]
    [t] = figures(b, 1000).server_timing
    assert t.requests == pytest.approx(2)
    assert [t.ttft_mean_ms, t.itl_mean_ms, t.e2e_mean_ms] == pytest.approx([35, 9, 50])
    # client: TTFT mean 40 ms, gaps 10, 10, 10 ms, E2E mean (70 + 40) / 2 = 55 ms
    assert t.client_minus_server_ttft_ms == pytest.approx(5)
    assert t.client_minus_server_itl_ms == pytest.approx(1)
    assert t.client_minus_server_e2e_ms == pytest.approx(5)
    # two servers each saw part of the requests: their means stand, no difference is made up
    b.cache = [ServerCache(url="u", before=before, after=after), ServerCache(url="v", before=before, after=after)]
    assert all(t.client_minus_server_ttft_ms is None for t in figures(b, 1000).server_timing)
    b.cache = [ServerCache(url="u", before=CacheCounters(), after=CacheCounters())]
    [unknown] = figures(b, 1000).server_timing
    assert (unknown.requests, unknown.ttft_mean_ms, unknown.client_minus_server_ttft_ms) == (None, None, None)


def test_send_lag_and_service_overhead() -> None:
    late = request(0, 1.0, [1.4, 1.5], service_ttft_ms=300.0)
    late.scheduled_at = 0.9  # sent 100 ms late
    f = figures(bench([late], 2.0), 1000)
    assert f.send_lag_ms.p50 == pytest.approx(100.0)
    assert f.service_ttft_ms.p50 == pytest.approx(300.0)
    assert f.service_overhead_ttft_ms.p50 == pytest.approx(100.0)  # 400 ms seen by the pupil, 300 by the service


def test_a_question_waiting_for_its_pupils_previous_answer_is_not_send_lag() -> None:
    # Due at 0.9 s; the pupil's last answer ended at 3.0 s; sent 20 ms after that.
    waited = request(0, 3.02, [3.4, 3.5])
    waited.scheduled_at, waited.pupil_free_at = 0.9, 3.0
    on_time = request(1, 1.0, [1.2, 1.3])
    on_time.scheduled_at, on_time.pupil_free_at = 1.0, 0.5  # free before it was due: no wait
    f = figures(bench([waited, on_time], 4.0), 1000)
    assert f.pupil_wait_ms.count == 1 and f.pupil_wait_ms.p50 == pytest.approx(2100.0)
    assert f.send_lag_ms.p50 == pytest.approx(10.0) and f.send_lag_ms.p95 == pytest.approx(19.0)
    text = "\n".join(level_table(f))
    assert "waiting for the pupil's previous answer" in text and "send lag (client)" in text


def test_the_plots_say_each_series_apart_from_the_target_and_one_rate_is_not_a_zoomed_dot(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    drawn: list[Figure] = []

    def keep(fig: Figure, path: Path) -> Path:
        drawn.append(fig)
        return path

    monkeypatch.setattr(plots, "_save", keep)
    at_4 = figures(bench([request(i, i / 4, [i / 4 + 0.3, i / 4 + 0.4]) for i in range(8)], 2.0), 1000)
    plots.against_rate({"original synthetic": [at_4], "fp8 synthetic": [at_4]}, 500, tmp_path / "rate.png")
    plots.latency_cdfs({"original": bench([request(0, 0.0, [0.3, 0.4])], 1.0)}, tmp_path / "cdf.png")
    rate, cdf = drawn
    left = rate.axes[0]
    assert left.get_xlim()[0] == 0 and left.get_xlim()[1] > 2  # the rate (2 req/s) at its place on an axis from 0
    p95s = {line.get_label(): line for line in left.get_lines()}
    original, fp8, target = p95s["original synthetic p95"], p95s["fp8 synthetic p95"], p95s["p95 target (500 ms)"]
    assert np.asarray(original.get_xdata()).tolist() != np.asarray(fp8.get_xdata()).tolist(), "a point hides another"
    assert original.get_color() != fp8.get_color()
    series_colours = {to_hex(line.get_color()) for line in left.get_lines() if line is not target}
    assert to_hex(target.get_color()) not in series_colours
    assert all(ax.get_legend() is not None for ax in [*rate.axes, *cdf.axes])
