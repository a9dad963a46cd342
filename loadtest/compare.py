"""The decision report: two variants' saved runs, one Markdown report and its plots.

For each load level and variant: p95 TTFT against the target, the quality gate, acceptable requests per
GPU-hour and cost per acceptable request; then one sentence: which variant to roll out and why, or that
neither passes.

- An *acceptable request* completed, with TTFT within the target, at a level whose p95 TTFT meets the
  target, on a variant that passes the quality gate.
- Acceptable requests per GPU-hour = goodput (req/s) x 3600 / GPUs the replica uses; 0 at a level that
  misses the target or for a variant that fails the gate.
- Cost per acceptable request = GPU price per hour x GPUs / (goodput x 3600).
- The sentence names the passing variant with the lower cost per acceptable request at its best level;
  costs within 5% of each other are a tie (repeated runs of one server move throughput by up to ~4%,
  loadtest/README.md, validity), and a tie goes to the original (no quantization risk).
- Acceptable answers: where a real model's rubric was measured on the runs' own model (`quality rubric`,
  the service's prompt and sampling), only its passing share of answers counts: acceptable per GPU-hour =
  goodput x pass rate x 3600 / GPUs; two variants whose rates differ by less than twice the standard error of
  the difference both count at their pooled rate. Without one, every answer in time counts, and the report
  says so.
- Quality gate: the original is the reference and passes. Where a real model's rubric was measured on both
  variants, another variant passes when its pass rate is within --max-score-drop of the original's, and
  (where lm-eval's local tasks were run on both) so is its multiple-choice comprehension accuracy: what a
  pupil reads decides, and top-1 agreement and KL are reported beside it. Without real rubrics (the
  stand-in's answers are noise) the gate is the agreement: top-1 agreement at least --min-top1 and mean KL
  at most --max-kl.
"""

import math
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from loadtest import plots
from loadtest.quality.cli import AgreementResult, LmEvalResult
from loadtest.quality.rubric import RubricResult
from loadtest.results import RunResult
from loadtest.stats import Figures, figures

REFERENCE = "original"
# Costs closer than this are a tie: repeated runs of one server and workload moved throughput by up to
# 3.8% (results/agreement-vllm-bench*.md), so a smaller difference is no reason to quantize.
TIE = 0.05


@dataclass(frozen=True)
class Gate:
    min_top1: float
    max_kl: float
    max_score_drop: float


class Level(BaseModel):
    variant: str
    label: str
    run: str
    figures: Figures
    quality_ok: bool
    acceptable_per_gpu_hour: float
    cost_per_acceptable: float | None


class VariantQuality(BaseModel):
    passes: bool
    reason: str


REAL = ("hub", "small")  # model kinds whose answers are words worth scoring


def _real_rubrics(rubrics: list[RubricResult]) -> dict[str, RubricResult]:
    return {r.variant: r for r in rubrics if r.model_kind in REAL}


def quality(
    variant: str,
    agreement: list[AgreementResult],
    rubrics: list[RubricResult],
    gate: Gate,
    lm_evals: list[LmEvalResult] | None = None,
) -> VariantQuality:
    if variant == REFERENCE:
        return VariantQuality(passes=True, reason="the reference")
    found = [a for a in agreement if a.candidate == variant]
    agrees = None
    if found:
        a = found[-1].agreement
        agrees = f"top-1 agreement {a.top1_agreement:.1%}, mean KL {a.mean_kl:.4f} nats over {a.positions} positions"
    real = _real_rubrics(rubrics)
    if variant in real and REFERENCE in real:
        ref, alt = real[REFERENCE], real[variant]
        drop = ref.pass_rate - alt.pass_rate
        reason = (
            f"rubric pass rate {alt.pass_rate:.1%} vs the original's {ref.pass_rate:.1%} "
            f"({len(alt.scores)} and {len(ref.scores)} answers; a drop of at most {gate.max_score_drop:.0%} allowed)"
        )
        evals = {e.variant: e.tasks.get("classroom_comprehension", {}).get("acc") for e in lm_evals or []}
        if evals.get(variant) is not None and evals.get(REFERENCE) is not None:
            acc, ref_acc = evals[variant], evals[REFERENCE]
            reason += f"; comprehension accuracy (lm-eval) {acc:.1%} vs {ref_acc:.1%}"
            drop = max(drop, ref_acc - acc)  # type: ignore[operator]
        if agrees:
            reason += f"; {agrees}"
        return VariantQuality(passes=drop <= gate.max_score_drop, reason=reason)
    if not found:
        return VariantQuality(passes=False, reason="no agreement measurement against the original was given")
    a = found[-1].agreement
    if a.top1_agreement < gate.min_top1 or a.mean_kl > gate.max_kl:
        return VariantQuality(
            passes=False,
            reason=f"top-1 agreement {a.top1_agreement:.1%} (≥ {gate.min_top1:.0%} needed), "
            f"mean KL {a.mean_kl:.4f} (≤ {gate.max_kl:g} needed); no real model's rubric on both variants",
        )
    return VariantQuality(passes=True, reason=f"{agrees}; no real model's rubric on both variants")


def pass_rates(runs: list[tuple[Path, RunResult]], rubrics: list[RubricResult]) -> dict[str, float]:
    """Each variant's share of acceptable answers, where a real rubric was measured on the runs' own model. Where
    the variants' rates differ by less than twice the difference's standard error, the rubric cannot tell them
    apart: both count at their pooled rate, so that sampling noise does not decide the cost."""
    real = _real_rubrics(rubrics)
    measured = {
        run.config.variant: real[run.config.variant]
        for _, run in runs
        if run.config.variant in real and real[run.config.variant].model_description == run.model.description
    }
    rates = {variant: r.pass_rate for variant, r in measured.items()}
    if len(measured) == 2:
        (a, b) = measured.values()
        n_a, n_b = len(a.scores), len(b.scores)
        pooled = (a.pass_rate * n_a + b.pass_rate * n_b) / (n_a + n_b)
        error = math.sqrt(pooled * (1 - pooled) * (1 / n_a + 1 / n_b))
        if abs(a.pass_rate - b.pass_rate) < 2 * error:
            rates = dict.fromkeys(rates, pooled)
    return rates


def mismatched_agreement(runs: list[tuple[Path, RunResult]], agreement: list[AgreementResult]) -> str | None:
    """Why an agreement measurement does not belong with these runs (it was measured on another model than the
    one their original serves), or None. Its own description of the model is compared where it has one (older
    files name only the model's folder)."""
    originals = [r.model for _, r in runs if r.config.variant == REFERENCE]
    for a in agreement:
        for model in originals:
            if a.model_description is not None and model.kind is not None:
                same = a.model_description == model.description
            else:
                same = Path(a.model_dir).resolve() == Path(model.path or "").resolve()
            if not same:
                measured, served = f"the model in {a.model_dir}", f"the model in {model.path}"
                return (
                    f"the {a.candidate} agreement was measured on {measured}, but the runs' {REFERENCE} serves "
                    f"{served}: measure the agreement on the runs' own model (`classroom loadtest quality agreement`)"
                )
    return None


def levels_of(
    runs: list[tuple[Path, RunResult]],
    qualities: dict[str, VariantQuality],
    price: float,
    gpus: int,
    target_ms: float,
    rates: dict[str, float] | None = None,
) -> list[Level]:
    out = []
    for path, run in runs:
        variant = run.config.variant
        for bench in run.benchmarks:
            f = figures(bench, target_ms)
            ok = f.meets_target and qualities[variant].passes
            per_hour = f.goodput * (rates or {}).get(variant, 1.0) * 3600 / gpus if ok else 0.0
            out.append(
                Level(
                    variant=variant, label=f"{run.workload.kind}: {bench.label}", run=path.name, figures=f,
                    quality_ok=qualities[variant].passes, acceptable_per_gpu_hour=per_hour,
                    cost_per_acceptable=price / per_hour if per_hour > 0 else None,
                )
            )  # fmt: skip
    return out


def _cost(level: Level) -> float:
    return level.cost_per_acceptable if level.cost_per_acceptable is not None else float("inf")


def decision(levels: list[Level], qualities: dict[str, VariantQuality], target_ms: float) -> str:
    best: dict[str, Level] = {}
    for level in levels:
        if level.acceptable_per_gpu_hour > 0 and (
            level.variant not in best or level.acceptable_per_gpu_hour > best[level.variant].acceptable_per_gpu_hour
        ):
            best[level.variant] = level
    if not best:
        failing = "; ".join(
            f"{v}: {q.reason}" if not q.passes else f"{v}: no level meets p95 TTFT ≤ {target_ms:g} ms"
            for v, q in qualities.items()
        )
        return f"**Neither variant passes**, so roll out neither: {failing}."
    winner = min(best.values(), key=_cost)
    others = [lv for v, lv in best.items() if v != winner.variant]
    if REFERENCE in best and others:
        ref, alt = best[REFERENCE], min((lv for v, lv in best.items() if v != REFERENCE), key=_cost)
        if abs(_cost(alt) / _cost(ref) - 1) < TIE:  # within the measurement's own error: no reason to quantize
            return (
                f"**Roll out {REFERENCE}**: both pass, and {alt.variant} is not cheaper by more than {TIE:.0%} "
                f"(the measurement's own error): {_cost(alt) * 1000:.4f} against {_cost(ref) * 1000:.4f} per 1,000 "
                f"acceptable answers at their best levels ({alt.label}; {ref.label}), so the original keeps its "
                "quality without a quantization risk."
            )
    against = (
        f" against {others[0].cost_per_acceptable * 1000:.4f} for {others[0].variant} (best level {others[0].label})"
        if others and others[0].cost_per_acceptable
        else " (the other variant passes at no level)"
    )
    return (
        f"**Roll out {winner.variant}**: it meets p95 TTFT ≤ {target_ms:g} ms up to {winner.label} "
        f"(p95 {winner.figures.p95_ttft_all_ms:.0f} ms), passes the quality gate ({qualities[winner.variant].reason}), "
        f"and costs {winner.cost_per_acceptable * 1000:.4f} per 1,000 acceptable answers{against}."  # type: ignore[operator]
    )


def render(
    runs: list[tuple[Path, RunResult]], agreement: list[AgreementResult], rubrics: list[RubricResult], *,
    price: float, gpus: int, gate: Gate, target_ms: float, out_dir: Path, lm_evals: list[LmEvalResult] | None = None,
) -> Path:  # fmt: skip
    variants = sorted({r.config.variant for _, r in runs}, key=lambda v: (v != REFERENCE, v))
    qualities = {v: quality(v, agreement, rubrics, gate, lm_evals) for v in variants}
    rates = pass_rates(runs, rubrics)
    levels = levels_of(runs, qualities, price, gpus, target_ms, rates)
    standin = any(r.model.kind == "standin" for _, r in runs)
    lines = [
        f"# Rollout decision: {' vs '.join(variants)}",
        "",
        decision(levels, qualities, target_ms),
        "",
        f"TTFT target: p95 ≤ {target_ms:g} ms. GPU price {price:g} an hour, {gpus} GPU(s) a replica "
        '(on a CPU-only run, read "GPU-hour" as an hour of the machine measured).',
    ]
    if standin:
        lines.append(
            "\n**Latency measured on the offline stand-in** (random weights, the real shapes): latency and cost are "
            "the real shapes' on this machine; its rubric scores mean nothing; logprob agreement is meaningful."
        )
    machines = sorted(
        {f"{r.environment.cpu} ({r.environment.cpu_count} cores), GPU {r.environment.gpu or 'none'}" for _, r in runs}
    )
    lines += [f"Machine(s): {'; '.join(machines)}.", "", "## Which model each figure comes from", ""]
    for run_model in sorted({f"{r.config.variant}: {r.model.description}" for _, r in runs}):
        lines.append(f"- latency runs, {run_model}")
    for a in agreement:
        lines.append(f"- agreement {a.candidate} vs original: {a.model_description or a.model_dir}")
    for r in rubrics:
        lines.append(f"- rubric, {r.variant}: {r.model_description or r.model_kind}")
    for e in lm_evals or []:
        lines.append(f"- lm-eval, {e.variant}: {e.model_description}")
    measured = {r.variant: r.pass_rate for r in rubrics if r.variant in rates}
    pooled = len(set(rates.values())) == 1 and len(rates) > 1 and len(set(measured.values())) > 1
    counted = (
        ", ".join(f"{v} {rate:.1%}" for v, rate in sorted(rates.items()))
        + (
            " (both at the pooled rate: the measured rates differ by less than twice their standard error)"
            if pooled
            else ""
        )
        if rates
        else "none: no real model's rubric on the runs' own model, so every answer in time counts as acceptable"
    )
    lines += ["", f"Rubric pass rates applied to the cost: {counted}.", "", "## Quality gate", ""]
    lines += [f"- {v}: {'passes' if q.passes else '**fails**'} ({q.reason})" for v, q in qualities.items()]
    for r in rubrics:
        note = " (stand-in: meaningless)" if r.model_kind not in REAL else ""
        lines.append(
            f"- rubric, {r.variant}: {r.pass_rate:.1%} of {len(r.scores)} answers pass, mean score "
            f"{r.mean_score:.3f}{note}"
        )
    for e in lm_evals or []:
        for task, figs in sorted(e.tasks.items()):
            said = ", ".join(f"{k} {v:.4g}" for k, v in sorted(figs.items()))
            lines.append(f"- lm-eval {task}, {e.variant}: {said}")
    lines += [
        "",
        "## Each load level",
        "",
        "| variant | level | run | done | p95 TTFT (ms) | meets target | p50 TPOT (ms) | req/s | goodput (req/s) "
        "| acceptable / GPU-hour | cost / 1,000 acceptable |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for lv in sorted(levels, key=lambda lv: (lv.label, lv.variant)):
        f = lv.figures
        cost = "–" if lv.cost_per_acceptable is None else f"{lv.cost_per_acceptable * 1000:.4f}"
        p95 = "–" if f.p95_ttft_all_ms is None else f"{f.p95_ttft_all_ms:,.0f}"
        tpot = "–" if f.tpot_ms.p50 is None else f"{f.tpot_ms.p50:.1f}"
        lines.append(
            f"| {lv.variant} | {lv.label} | {lv.run} | {f.completed}/{f.requests} | {p95} "
            f"| {'yes' if f.meets_target else 'no'} | "
            f"{tpot} | {f.request_throughput:.2f} | {f.goodput:.2f} | {lv.acceptable_per_gpu_hour:,.0f} | {cost} |"
        )
    lines += ["", "## Plots", ""]
    cdfs = {f"{r.config.variant} {r.workload.kind}: {b.label}": b for _, r in runs for b in r.benchmarks}
    lines.append(f"![latency CDFs]({plots.latency_cdfs(cdfs, out_dir / 'latency-cdf.png').name})")
    series: dict[str, list[Figures]] = {}
    for lv in levels:  # a line per variant and workload: rates of different workloads do not compare
        series.setdefault(f"{lv.variant} {lv.label.split(':')[0]}", []).append(lv.figures)
    rate_plot = plots.against_rate(series, target_ms, out_dir / "rate.png")
    lines.append(f"![TTFT and throughput against rate]({rate_plot.name})")
    ratios = {
        v: {
            f"{lv.label} {g}": c.ratio
            for lv in levels
            if lv.variant == v
            for g, c in lv.figures.cache_by_class.items()
            if c.ratio is not None
        }
        for v in variants
    }
    if any(ratios.values()):
        lines.append(f"![cache ratio per class]({plots.cache_per_class(ratios, out_dir / 'cache-per-class.png').name})")
    lines += ["", "## Definitions", "", (__doc__ or "").split("\n\n", 1)[1].strip()]
    report = out_dir / "report.md"
    out_dir.mkdir(parents=True, exist_ok=True)
    report.write_text("\n".join(lines) + "\n")
    return report
