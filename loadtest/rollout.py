"""`classroom loadtest rollout`: may we serve the candidate (the FP8 copy) instead of the original? One command from
two served variants to one report (rollout.md and rollout.json):

1. **Quality**, as an experiment (quality/experiment.py): paired answers on both variants and an A/A run of the
   original; the non-inferiority verdict at the operator's margin, flips and greedy distance beside the A/A's.
2. **Latency**, in rounds that alternate the variants (A B, then B A, ...): the seed's levels (synthetic at 1 and 4
   requests a second, and a class of 30 on one passage), each level's goodput and p95 TTFT as the median over the
   rounds with its range (one round of one server swings by tens of percent).
3. **Cost per acceptable answer** = GPU price x GPUs / (goodput x pass rate x 3600), with its interval: the
   slowest round and the low end of the pass rate's 95% interval give its high end, and the other way round.
   A variant is cheaper only where its interval clears the other's.

The verdict: keep the original when the candidate is worse (quality) or not clearly cheaper; roll out the candidate
when it is non-inferior and its cost interval lies under the original's; otherwise not enough evidence, with the
sample that would decide."""

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel
from scipy import stats as scipy_stats

from loadtest.quality.experiment import QualityLeg
from loadtest.quality.noninferiority import Decision
from loadtest.quality.rubric import Score
from loadtest.results import RunResult
from loadtest.stats import figures


@dataclass(frozen=True)
class LevelPlan:
    """One load level, as `classroom loadtest run` options."""

    name: str
    options: dict[str, object]


# The seed's latency runs (loadtest/gpu/h200.sh `real-runs`), and a smoke-sized copy for a CPU.
LEVELS = [
    LevelPlan("synthetic 1/s", {"workload": "synthetic", "profile": "constant", "rate": 1.0, "requests": 30,
                                "prompt_tokens": 256, "output_tokens": 128}),
    LevelPlan("synthetic 4/s", {"workload": "synthetic", "profile": "constant", "rate": 4.0, "requests": 120,
                                "prompt_tokens": 256, "output_tokens": 128}),
    LevelPlan("a class of 30", {"workload": "classroom", "classes": 1, "pupils": 30, "passage_tokens": 1000,
                                "trickle": 30, "profile": "constant", "rate": 4.0, "requests": 60,
                                "output_tokens": 128}),
]  # fmt: skip
QUICK_LEVELS = [
    LevelPlan("synthetic 2/s", {"workload": "synthetic", "profile": "constant", "rate": 2.0, "requests": 6,
                                "prompt_tokens": 64, "output_tokens": 8, "warmup": 1}),
    LevelPlan("a class of 4", {"workload": "classroom", "classes": 1, "pupils": 4, "passage_tokens": 200,
                               "trickle": 0, "profile": "constant", "rate": 1.0, "requests": 4, "output_tokens": 8,
                               "warmup": 1}),
]  # fmt: skip


class RoundFigures(BaseModel):
    variant: str
    level: str
    round: int
    goodput: float  # req/s within the TTFT target, 0 at a level that misses it
    p95_ttft_ms: float | None
    meets_target: bool
    run: str  # the saved run


class LevelSummary(BaseModel):
    variant: str
    level: str
    rounds: int
    goodput: float  # median over the rounds
    goodput_low: float
    goodput_high: float
    p95_ttft_ms: float | None  # median
    p95_ttft_low_ms: float | None
    p95_ttft_high_ms: float | None
    met_target: int  # rounds whose p95 TTFT met the target


class PassRate(BaseModel):
    rate: float
    low: float
    high: float


class Cost(BaseModel):
    """Per 1,000 acceptable answers, in the price's currency; None where no answer is acceptable (infinite)."""

    variant: str
    level: str
    median: float | None
    low: float | None
    high: float | None


class RolloutReport(BaseModel):
    created: str
    original_url: str
    candidate_url: str
    candidate: str
    model_description: str | None  # the quality leg's model
    latency_model_description: str | None = None  # the latency rounds' (the same unless --latency-* said otherwise)
    latency_urls: dict[str, str] = {}
    warning: str | None
    gpu_price: float
    gpus: int
    ttft_target_ms: float
    quality: QualityLeg
    pass_rates: dict[str, PassRate]  # "original", the candidate's name
    rounds: list[RoundFigures]
    levels: list[LevelSummary]
    costs: list[Cost]
    decision: str
    sentence: str
    plots: list[str] = []  # PNGs beside rollout.md


def draw(report: RolloutReport, out_dir: Path) -> list[str]:
    """The report's plots: the quality differences beside the A/A's and the margin, and each round's p95 TTFT."""
    from loadtest import plots

    q = report.quality
    rows = [
        (label, d.difference * 100, d.low * 100, d.high * 100)
        for label, d in ((report.candidate, q.candidate_side.difference), ("A/A", q.aa_side.difference))
    ]
    made = [plots.differences(rows, q.candidate_side.verdict.margin * 100, out_dir / "quality.png")]
    p95: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in report.rounds:
        if r.p95_ttft_ms is not None and math.isfinite(r.p95_ttft_ms):
            p95[r.level][r.variant].append(r.p95_ttft_ms)
    if p95:
        made.append(plots.rounds({k: dict(v) for k, v in p95.items()}, report.ttft_target_ms, out_dir / "latency.png"))
    return [m.name for m in made]


def round_figures(variant: str, level: str, round_: int, run: RunResult, path: str, target_ms: float) -> RoundFigures:
    f = figures(run.benchmarks[0], target_ms)
    return RoundFigures(
        variant=variant,
        level=level,
        round=round_,
        goodput=f.goodput if f.meets_target else 0.0,
        p95_ttft_ms=f.p95_ttft_all_ms,
        meets_target=f.meets_target,
        run=path,
    )


def _median_range(values: Sequence[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def summarize(rounds: Sequence[RoundFigures]) -> list[LevelSummary]:
    grouped: dict[tuple[str, str], list[RoundFigures]] = defaultdict(list)
    for r in rounds:
        grouped[(r.variant, r.level)].append(r)
    out = []
    for (variant, level), rs in grouped.items():
        good = _median_range([r.goodput for r in rs])
        p95s = [r.p95_ttft_ms for r in rs if r.p95_ttft_ms is not None and math.isfinite(r.p95_ttft_ms)]
        p95 = _median_range(p95s) if len(p95s) == len(rs) else (None, None, None)
        out.append(
            LevelSummary(
                variant=variant, level=level, rounds=len(rs), goodput=good[0], goodput_low=good[1],
                goodput_high=good[2], p95_ttft_ms=p95[0], p95_ttft_low_ms=p95[1], p95_ttft_high_ms=p95[2],
                met_target=sum(r.meets_target for r in rs),
            )
        )  # fmt: skip
    return out


def pass_rate(scores: Sequence[Score], confidence: float = 0.95) -> PassRate:
    """The share of answers that pass, with Student's t interval over the questions' shares (the question is the
    unit: its answers are not independent of each other)."""
    by_question: dict[tuple[str, str], list[bool]] = defaultdict(list)
    for s in scores:
        by_question[(s.title, s.question)].append(s.passed)
    shares = [sum(v) / len(v) for v in by_question.values()]
    n, mean = len(shares), statistics.fmean(shares)
    half = float(scipy_stats.t.ppf(0.5 + confidence / 2, n - 1)) * statistics.stdev(shares) / math.sqrt(n)
    return PassRate(rate=mean, low=max(0.0, mean - half), high=min(1.0, mean + half))


def _per_1000(price: float, gpus: int, goodput: float, rate: float) -> float | None:
    acceptable_per_hour = goodput * rate * 3600 / gpus
    return price * 1000 / acceptable_per_hour if acceptable_per_hour > 0 else None


def costs(levels: Sequence[LevelSummary], rates: dict[str, PassRate], price: float, gpus: int) -> list[Cost]:
    out = []
    for lv in levels:
        rate = rates[lv.variant]
        out.append(
            Cost(
                variant=lv.variant,
                level=lv.level,
                median=_per_1000(price, gpus, lv.goodput, rate.rate),
                low=_per_1000(price, gpus, lv.goodput_high, rate.high),
                high=_per_1000(price, gpus, lv.goodput_low, rate.low),
            )
        )
    return out


def _best(costs_: Sequence[Cost], variant: str) -> Cost | None:
    """The variant's cheapest level by its median cost (None: no level gives an acceptable answer)."""
    mine = [c for c in costs_ if c.variant == variant and c.median is not None]
    return min(mine, key=lambda c: c.median or math.inf, default=None)


def decide(quality: QualityLeg, costs_: Sequence[Cost], candidate: str) -> tuple[str, str]:
    verdict = quality.candidate_side.verdict
    if verdict.decision is Decision.KEEP:
        return "keep the original", f"Keep the original: {verdict.sentence}"
    if verdict.decision is Decision.UNDECIDED:
        return "not enough evidence", verdict.sentence
    ours, theirs = _best(costs_, "original"), _best(costs_, candidate)
    if theirs is None:
        return "keep the original", (
            f"Keep the original: {candidate} passes no fewer answers within the margin, but none of its answers is "
            "acceptable at any level (none passes, or no level meets the TTFT target)."
        )
    if ours is None or (theirs.high is not None and ours.low is not None and theirs.high < ours.low):
        against = (
            f"against {ours.median:.4f} ({ours.low:.4f} to {_end(ours.high)})" if ours else "(the original has none)"
        )
        return f"roll out {candidate}", (
            f"Roll out {candidate}: {verdict.sentence} It costs {theirs.median:.4f} per 1,000 acceptable answers "
            f"({theirs.low:.4f} to {_end(theirs.high)}, {theirs.level}) {against}: cheaper beyond the noise."
        )
    return "keep the original", (
        f"Keep the original: {candidate} is non-inferior, but its cost per 1,000 acceptable answers, "
        f"{theirs.median:.4f} ({theirs.low:.4f} to {_end(theirs.high)}), does not clear the original's "
        f"{ours.median:.4f} ({ours.low:.4f} to {_end(ours.high)}): no saving worth a quantization risk."
    )


def _end(value: float | None) -> str:
    return "no acceptable answer" if value is None else f"{value:.4f}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _distance_lines(q: QualityLeg, candidate: str) -> list[str]:
    dc, da = q.distance_candidate, q.distance_aa
    if dc is None or da is None:
        return []
    lines = [
        "",
        f"Next-token distributions on the original's greedy answers (teacher-forced, top-{dc.generated.k}; the A/A "
        "is the original scored again in other batches):",
        "",
        "| | answer positions | top-1 agreement | mean KL (nats) | p95 KL | prompt positions | top-1 agreement "
        "| mean KL |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, d in ((candidate, dc), ("original again (A/A)", da)):
        g, p = d.generated, d.prompt
        lines.append(
            f"| {name} | {g.positions} | {g.top1_agreement:.1%} | {g.mean_kl:.4f} | {g.p95_kl:.4f} | {p.positions} "
            f"| {p.top1_agreement:.1%} | {p.mean_kl:.4f} |"
        )
    if (kl := dc.generated.mean_kl) > (floor := da.generated.mean_kl):
        lines += ["", f"{candidate} moves the answers' next-token odds {_times(kl, floor)} as far as batching does."]
    return lines


def _times(a: float, b: float) -> str:
    return f"{a / b:.1f} times" if b > 0 else "further (the A/A moves them not at all)"


def markdown(report: RolloutReport) -> str:
    q = report.quality
    c, aa = q.candidate_side.difference, q.aa_side.difference
    lines = [
        f"# Rollout: original or {report.candidate}?",
        "",
        f"**{report.decision.capitalize()}.** {report.sentence}",
        "",
        f"Model: {report.model_description or 'unknown'}.",
    ]
    timed = report.latency_model_description
    if timed and timed != report.model_description:
        lines += [
            "",
            f"Latency and goodput come from another model: {timed}. The cost per acceptable answer joins that "
            "model's goodput to the quality model's pass rate.",
        ]
    if report.warning:
        lines += ["", f"> **{report.warning}**"]
    lines += [
        "",
        f"## Quality: {q.questions} questions x {q.samples} answers a variant "
        f"({'paired seeds' if q.seeds else 'n samples a request, paired by question'})",
        "",
        "| | original - other, points | 95% interval | flips right->wrong / wrong->right | greedy same "
        "| parting after (median tokens) |",
        "|---|---|---|---|---|---|",
        f"| {report.candidate} | {c.difference * 100:+.1f} | {c.low * 100:+.1f} to {c.high * 100:+.1f} | "
        f"{c.lost} / {c.gained} | {q.greedy_candidate.exact_match:.0%} | {q.greedy_candidate.median_common_prefix:g} |",
        f"| original again (A/A) | {aa.difference * 100:+.1f} | {aa.low * 100:+.1f} to {aa.high * 100:+.1f} | "
        f"{aa.lost} / {aa.gained} | {q.greedy_aa.exact_match:.0%} | {q.greedy_aa.median_common_prefix:g} |",
        "",
        "Pass rates (Student's t over questions): "
        + ", ".join(f"{k} {v.rate:.1%} ({v.low:.1%} to {v.high:.1%})" for k, v in report.pass_rates.items())
        + f". Verdict: {q.candidate_side.verdict.sentence}",
    ]
    if c.lost + c.gained > aa.lost + aa.gained:
        lines.append(
            f"{report.candidate} changes more answers than resampling does: {c.lost + c.gained} flips against "
            f"{aa.lost + aa.gained} in the A/A."
        )
    lines += _distance_lines(q, report.candidate)
    lines += [
        "",
        f"## Latency: medians over rounds that alternate the variants (range), p95 TTFT target "
        f"{report.ttft_target_ms:g} ms",
        "",
        "| variant | level | rounds | goodput req/s | p95 TTFT ms | rounds meeting the target "
        "| cost per 1,000 acceptable |",
        "|---|---|---|---|---|---|---|",
    ]
    cost_of = {(x.variant, x.level): x for x in report.costs}
    for lv in report.levels:
        cost = cost_of[(lv.variant, lv.level)]
        shown = "-" if cost.median is None else f"{cost.median:.4f} ({_end(cost.low)} to {_end(cost.high)})"
        lines.append(
            f"| {lv.variant} | {lv.level} | {lv.rounds} | {lv.goodput:.2f} "
            f"({lv.goodput_low:.2f}-{lv.goodput_high:.2f}) | {_ms(lv.p95_ttft_ms)} "
            f"({_ms(lv.p95_ttft_low_ms)}-{_ms(lv.p95_ttft_high_ms)}) | {lv.met_target} | {shown} |"
        )
    lines += [
        "",
        f"GPU price {report.gpu_price:g} an hour x {report.gpus}; cost = price x GPUs / (goodput x pass rate x 3600), "
        "its interval from the slowest and fastest rounds and the pass rate's interval. Runs: "
        + ", ".join(sorted({r.run for r in report.rounds})),
        "",
    ]
    lines += [f"![{name}]({name})" for name in report.plots]
    return "\n".join(lines)
