"""The decision report's PNG plots (matplotlib, no display): latency CDFs, TTFT and throughput against
rate, cached-token ratio per class. Each takes figures already computed from saved results."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on servers or in CI
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from loadtest.results import Benchmark  # noqa: E402
from loadtest.stats import Figures, e2e, ttft  # noqa: E402

DPI = 110
# The series' colours: matplotlib's tab10 without its red, which marks the target line alone.
SERIES_COLOURS = ["tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:gray", "tab:olive"]
TARGET_COLOUR = "tab:red"


def latency_cdfs(levels: dict[str, Benchmark], path: Path) -> Path:
    """For each level (keyed by its legend: variant, workload, profile), the share of requests answered
    within t: TTFT and E2E."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for label, bench in levels.items():
        ok = [r for r in bench.requests if r.ok]
        for ax, fn in zip(axes, (ttft, e2e), strict=True):
            values = np.sort([v * 1000 for r in ok if (v := fn(r)) is not None])
            if len(values):
                ax.step(values, np.arange(1, len(values) + 1) / len(values), where="post", label=label)
    for ax, name in zip(axes, ("TTFT", "end-to-end latency"), strict=True):
        ax.set_xlabel(f"{name} (ms)")
        ax.set_ylabel("share of requests")
        ax.set_title(f"{name}, cumulative")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")  # each panel says its own lines
    return _save(fig, path)


def _x(f: Figures) -> float:
    """A level's rate: the offered rate of constant/poisson, else the rate it achieved."""
    return f.rate if f.rate is not None else f.request_throughput


def against_rate(figures: dict[str, list[Figures]], ttft_target_ms: float, path: Path) -> Path:
    """One line per series (a variant on one workload) over its load levels, each in a colour of its own and the
    target line in red alone. The axis starts at 0, so that one rate is a point at its rate and not the middle
    of a 3.8-4.2 axis; series at the same rate are set a little apart, so that none hides another."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    top = max((_x(f) for levels in figures.values() for f in levels), default=1.0) or 1.0
    for i, (variant, levels) in enumerate(figures.items()):
        ordered = sorted(levels, key=_x)
        xs = [_x(f) + (i - (len(figures) - 1) / 2) * 0.02 * top for f in ordered]
        colour = SERIES_COLOURS[i % len(SERIES_COLOURS)]
        left.plot(xs, [f.ttft_ms.p50 for f in ordered], "o--", color=colour, label=f"{variant} p50")
        left.plot(xs, [f.p95_ttft_all_ms for f in ordered], "^-", color=colour, label=f"{variant} p95")
        right.plot(xs, [f.request_throughput for f in ordered], "o-", color=colour, label=f"{variant} completed")
        right.plot(xs, [f.goodput for f in ordered], "s--", color=colour, label=f"{variant} goodput")
    left.axhline(ttft_target_ms, color=TARGET_COLOUR, lw=1.5, ls=":", label=f"p95 target ({ttft_target_ms:g} ms)")
    left.set(
        xlabel="rate (req/s: offered, or achieved for synchronous/throughput)",
        ylabel="TTFT (ms)",
        title="TTFT against rate",
    )
    right.set(xlabel="rate (req/s)", ylabel="req/s", title="throughput against rate")
    for ax in (left, right):
        ax.set_xlim(0, top * 1.15)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return _save(fig, path)


def cache_per_class(ratios: dict[str, dict[str, float]], path: Path) -> Path:
    """Cached-token ratio of each class, a bar per variant."""
    fig, ax = plt.subplots(figsize=(8, 4))
    classes = sorted({c for per in ratios.values() for c in per})
    width = 0.8 / max(1, len(ratios))
    for i, (variant, per) in enumerate(ratios.items()):
        ax.bar(np.arange(len(classes)) + i * width, [per.get(c, 0.0) for c in classes], width, label=variant)
    ax.set_xticks(np.arange(len(classes)) + width * (len(ratios) - 1) / 2, classes, rotation=30, fontsize=8)
    ax.set(ylabel="cached / prompt tokens", ylim=(0, 1), title="prefix-cache ratio per class")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    return _save(fig, path)


def differences(rows: list[tuple[str, float, float, float]], margin: float, path: Path) -> Path:
    """Each (label, difference, low, high) of a pass rate, original minus other, in points, as a point and its 95%
    interval; zero and the non-inferiority margin as lines: an interval wholly left of the margin is non-inferior."""
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.6 * len(rows)))
    for i, (_, diff, low, high) in enumerate(rows):
        colour = SERIES_COLOURS[i % len(SERIES_COLOURS)]
        ax.errorbar([diff], [i], xerr=[[diff - low], [high - diff]], fmt="o", color=colour, capsize=4)
        ax.annotate(f"{diff:+.1f} ({low:+.1f} to {high:+.1f})", (high, i), xytext=(6, 0), textcoords="offset points",
                    va="center", fontsize=8)  # fmt: skip
    ax.axvline(0, color="black", lw=1)
    ax.axvline(margin, color=TARGET_COLOUR, lw=1.5, ls=":", label=f"margin ({margin:g} points)")
    ax.set_yticks(range(len(rows)), [r[0] for r in rows])
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set(xlabel="pass rate, original - other (points; right of 0: the other passes fewer)",
           title="quality: paired differences, 95% intervals")  # fmt: skip
    ax.grid(alpha=0.3, axis="x")
    ax.legend(fontsize=8, loc="lower right")
    return _save(fig, path)


def rounds(p95_ms: dict[str, dict[str, list[float]]], target_ms: float, path: Path) -> Path:
    """Each level's p95 TTFT, one point a round, a colour a variant, beside the target: the spread between rounds is
    the noise a difference between variants must clear."""
    levels = list(p95_ms)
    variants = sorted({v for per in p95_ms.values() for v in per})
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / max(1, len(variants))
    for i, variant in enumerate(variants):
        colour = SERIES_COLOURS[i % len(SERIES_COLOURS)]
        for j, level in enumerate(levels):
            values = p95_ms[level].get(variant, [])
            xs = [j + (i - (len(variants) - 1) / 2) * width] * len(values)
            ax.plot(xs, values, "o", color=colour, alpha=0.8, label=variant if j == 0 else None)
    ax.axhline(target_ms, color=TARGET_COLOUR, lw=1.5, ls=":", label=f"p95 target ({target_ms:g} ms)")
    ax.set_xticks(range(len(levels)), levels, fontsize=8)
    ax.set(ylabel="p95 TTFT (ms)", title="latency: each round's p95 TTFT", ylim=(0, None))
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    return _save(fig, path)


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path
