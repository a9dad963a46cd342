"""The gateway benchmark's table: every saved run (benchmarks/results/gateway-*.json) as a column, each figure
the median over the column's runs."""

import json
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

from loadtest.stats import Distribution

PACED_TPOT_MS = 3.5  # the fake's pace in the paced relay: the H200's TPOT for a class


Figure = Callable[[dict[str, Any]], tuple[float, ...]]


def _dist(d: dict[str, Any], key: str) -> float:
    value = Distribution.model_validate(d).at(key) if d else None
    return float("nan") if value is None else value


def _tokens_per_s(runs: list[dict[str, Any]]) -> float:
    return median([float(x["tokens_per_s"]) for x in runs])


def _errors(m: dict[str, Any]) -> float:
    through = [*m["burst"], *m["relay"]["30"]["through"], *m["relay"]["120"]["through"], m["sequential"]["through"]]
    through += m["relay_paced"]["through"] if "relay_paced" in m else []
    return float(sum(sum(x["errors"].values()) for x in through))


NAN = float("nan")
# (figure, format of each value, its unit, the values of one measurement)
FIGURES: list[tuple[str, str, str, Figure]] = [
    ("TTFT one at a time, direct p50 / p95", "{:.2f}", " ms", lambda m: (
        _dist(m["sequential"]["direct"]["ttft_ms"], "p50"), _dist(m["sequential"]["direct"]["ttft_ms"], "p95"))),
    ("TTFT one at a time, through p50 / p95", "{:.2f}", " ms", lambda m: (
        _dist(m["sequential"]["through"]["ttft_ms"], "p50"), _dist(m["sequential"]["through"]["ttft_ms"], "p95"))),
    ("added TTFT p50 / p95", "{:+.2f}", " ms", lambda m: tuple(
        _dist(m["sequential"]["through"]["ttft_ms"], k) - _dist(m["sequential"]["direct"]["ttft_ms"], k)
        for k in ("p50", "p95"))),
    ("of which in the service (arrival to vLLM's first token) p50", "{:.2f}", " ms", lambda m: (
        _dist(m["sequential"]["through"].get("service_ttft_ms", {}), "p50"),)),
    ("service CPU a question, outside streaming", "{:.2f}", " ms", lambda m: (
        m["questions"]["service_cpu_ms_per_question"],)),
    ("tokens/s, 30 at once, direct / through", "{:,.0f}", "", lambda m: (
        _tokens_per_s(m["relay"]["30"]["direct"]), _tokens_per_s(m["relay"]["30"]["through"]))),
    ("tokens/s, 120 at once, direct / through", "{:,.0f}", "", lambda m: (
        _tokens_per_s(m["relay"]["120"]["direct"]), _tokens_per_s(m["relay"]["120"]["through"]))),
    ("service CPU a streamed token, 30 / 120 at once", "{:.1f}", " µs", lambda m: (
        m["relay"]["30"]["cpu_us_per_token"], m["relay"]["120"]["cpu_us_per_token"])),
    ("tokens an SSE event, 120 at once", "{:.1f}", "", lambda m: (
        median([x["tokens_per_event"] for x in m["relay"]["120"]["through"]]),)),
    (f"paced at {PACED_TPOT_MS} ms a token, 120 at once: tokens/s direct / through", "{:,.0f}", "", lambda m: (
        _tokens_per_s(m["relay_paced"]["direct"]), _tokens_per_s(m["relay_paced"]["through"]))
        if "relay_paced" in m else (NAN, NAN)),
    ("paced: service CPU a streamed token", "{:.1f}", " µs", lambda m: (
        m["relay_paced"]["cpu_us_per_token"] if "relay_paced" in m else NAN,)),
    ("paced: gap between events through, p50 / p95", "{:.2f}", " ms", lambda m: tuple(
        median([_dist(x["gap_ms"], k) for x in m["relay_paced"]["through"]]) for k in ("p50", "p95"))
        if "relay_paced" in m else (NAN, NAN)),
    ("burst of 30: last pupil's first token, 1st / 2nd burst", "{:.0f}", " ms", lambda m: tuple(
        b["last_first_token_ms"] or NAN for b in m["burst"])),
    ("bursts: the service's loop timers late by over 5 / 20 ms", "{:.0f}", "", lambda m: tuple(
        # A service without the loop-lag histogram (before 6c44d1e) has no figure here, not 0.
        sum(b["loop_late"][le] for b in m["burst"]) if all(le in b.get("loop_late", {}) for b in m["burst"]) else NAN
        for le in ("0.005", "0.02"))),
    ("errors through the service, all phases", "{:.0f}", "", lambda m: (_errors(m),)),
]  # fmt: skip


def _cell(form: str, unit: str, measurements: list[dict[str, Any]], figure: Figure) -> str:
    """Each value's median over the runs, with the range when there were several."""
    values = list(zip(*(figure(m) for m in measurements), strict=True))
    parts = []
    for series in values:
        if all(v != v for v in series):  # not measured (NaN) in any run: an older run's file
            parts.append("–")
            continue
        mid = median(list(series))
        spread = f" [{form.format(min(series))}–{form.format(max(series))}]" if len(series) > 1 else ""
        parts.append(form.format(mid) + spread)
    return (" / ".join(parts) + unit).replace("nan", "–")


def report(files: list[Path]) -> str:
    """A Markdown table of every saved run: one column per (label, workers), medians over its runs."""
    saved = [json.loads(f.read_text()) for f in files]
    columns = []
    for r in saved:
        for workers, measured in r["by_workers"].items():
            columns.append((r, workers, measured if isinstance(measured, list) else [measured]))
    head = " | ".join(
        f"{r['label']} ({r['service_checkout']}), {w} worker(s), {len(ms)} run(s)" for r, w, ms in columns
    )
    lines = [f"| figure | {head} |", "|---|" + "---|" * len(columns)]
    for name, form, unit, figure in FIGURES:
        lines.append(f"| {name} | " + " | ".join(_cell(form, unit, ms, figure) for _, _, ms in columns) + " |")
    return "\n".join(lines) + "\n"
