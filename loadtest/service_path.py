"""The report of `loadtest/gpu/h200.sh service-runs`: a class's burst straight to vLLM (unprimed, the seed's
way; primed) and through the service, configurations alternated within each round, read from the saved
runs (named VARIANT-CLASSES-rROUND.json, or .json.gz).

    python -m loadtest.service_path results/h200-2026-12-03 [--skip-round 0]

Each figure is the median over rounds of that round's figure, with its range; the service's overhead and
the ratio to the seed's way are taken within a round (the runs of one round were back to back), then the
median of those. Round 0 is left out by default: a fresh server's first bursts compile Triton kernels.
"""

import json
import re
import statistics
from pathlib import Path
from typing import Annotated, Any

import typer

from loadtest.results import RunResult
from loadtest.stats import Figures, figures

NAME = re.compile(r"^(?P<variant>.+)-(?P<classes>\d+)-r(?P<round>\d+)\.json(\.gz)?$")
SEED = "seed-1api"
# Through the service (`service-4api`, or a lever of it: `service-4api-tok`) against straight to the same
# server, primed (`primed-4api`): the service's own overhead.
THROUGH_SERVICE = re.compile(r"^service-(?P<server>\d+api)")
app = typer.Typer(add_completion=False)


def _figures_of(folder: Path, skip: set[int]) -> tuple[dict[tuple[str, int, int], Figures], set[str]]:
    """Each run's figures, and the GPUs the runs name (an H100 or an H200 may come for one call)."""
    found, gpus = {}, set()
    for path in sorted(folder.glob("*.json*")):
        m = NAME.match(path.name)
        if not m or int(m["round"]) in skip:
            continue
        run = RunResult.load(path)
        found[(m["variant"], int(m["classes"]), int(m["round"]))] = figures(
            run.benchmarks[0], run.config.ttft_target_ms
        )
        gpus.add(run.environment.gpu or "a GPU not named")
    return found, gpus


def _row(values: list[float]) -> dict[str, float] | None:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)} if values else None


FIELDS: dict[str, Any] = {
    "ttft_p50": lambda f: f.ttft_ms.p50,
    "ttft_p95": lambda f: f.ttft_ms.p95,
    "ttft_p99": lambda f: f.ttft_ms.p99,
    "itl_mean": lambda f: f.itl_ms.mean,
    "itl_p50": lambda f: f.itl_ms.p50,
    "tpot_mean": lambda f: f.tpot_ms.mean,
    "errors": lambda f: f.requests - f.completed,
    "server_ttft_mean": lambda f: f.server_timing[0].ttft_mean_ms if f.server_timing else None,
    "client_minus_server_ttft": lambda f: f.server_timing[0].client_minus_server_ttft_ms if f.server_timing else None,
    "client_minus_server_itl": lambda f: f.server_timing[0].client_minus_server_itl_ms if f.server_timing else None,
    "cached_ratio": lambda f: f.cache.ratio,
    # The service's own part of each question's TTFT: the client's less the service's own TTFT of vLLM.
    "own_part_p50": lambda f: f.service_overhead_ttft_ms.p50,
    "own_part_p95": lambda f: f.service_overhead_ttft_ms.p95,
}


# The service's overhead on each figure, within a round: TTFT in ms added, ITL and TPOT relative.
OVERHEADS = [
    ("ttft_p50_overhead", "ttft_p50", False),
    ("ttft_p95_overhead", "ttft_p95", False),
    ("itl_mean_overhead", "itl_mean", True),
    ("tpot_mean_overhead", "tpot_mean", True),
]


def summarise(found: dict[tuple[str, int, int], Figures], gpus: set[str] | None = None) -> dict[str, Any]:
    variants = sorted({v for v, _, _ in found})
    shapes = sorted({c for _, c, _ in found})
    rounds = sorted({r for _, _, r in found})
    table: dict[str, Any] = {}
    for classes in shapes:
        for variant in variants:
            runs = [found[(variant, classes, r)] for r in rounds if (variant, classes, r) in found]
            if not runs:
                continue
            cell: dict[str, Any] = {"rounds": len(runs)}
            for name, get in FIELDS.items():
                cell[name] = _row([v for v in (get(f) for f in runs) if v is not None])
            paired: dict[str, list[float]] = {key: [] for key, _, _ in OVERHEADS}
            paired["p95_vs_seed"] = []
            for r in rounds:
                mine, seed = found.get((variant, classes, r)), found.get((SEED, classes, r))
                if mine and seed and mine.ttft_ms.p95 and seed.ttft_ms.p95:
                    paired["p95_vs_seed"].append(mine.ttft_ms.p95 / seed.ttft_ms.p95)
                through = THROUGH_SERVICE.match(variant)
                direct = found.get((f"primed-{through['server']}", classes, r)) if through else None
                if mine and direct:
                    for key, field, relative in OVERHEADS:
                        a, b = FIELDS[field](mine), FIELDS[field](direct)
                        if a is not None and b is not None:
                            paired[key].append(a / b - 1 if relative else a - b)
            cell |= {k: _row(v) for k, v in paired.items()}
            table[f"{classes}|{variant}"] = cell
    return {"rounds": rounds, "gpus": sorted(gpus or ()), "table": table}


def _cell(c: dict[str, float] | None, pct: bool = False, signed: bool = False) -> str:
    if c is None:
        return "–"
    if pct:
        return f"{c['median']:+.1%} [{c['min']:+.1%}, {c['max']:+.1%}]"
    fmt = "{:+,.1f}" if signed else "{:,.1f}"
    return f"{fmt.format(c['median'])} [{fmt.format(c['min'])}–{fmt.format(c['max'])}]"


def markdown(summary: dict[str, Any]) -> str:
    lines = [
        "# A class's burst on the GPU: straight to vLLM and through the service",
        "",
        f"GPU: {' and '.join(summary.get('gpus') or ['not recorded'])}.",
        "",
        f"Rounds {', '.join(map(str, summary['rounds']))}; each cell the median over rounds [range]. ms unless said.",
        "`seed-1api`: plain chat straight to vLLM, nothing primed (one API server, the seed's way); "
        "`primed-*`: straight to vLLM with the passage sent once first; `service-*`: through the service "
        "(4 workers), the passage warmed when it was published; `1api`/`4api`: vLLM with 1 or 4 API servers; "
        "`-tok`: token-id prompts (`/v1/completions`), `-tNN`: NN questions in flight per replica, the rest "
        "waiting their turn, `-qfirst`: the question before the passage. Cached: prompt tokens served from "
        "vLLM's prefix cache, of all prompt tokens (usage).",
        "",
        "| classes of 30 | configuration | TTFT p50 | p95 | p99 | ITL mean | TPOT mean | errors | p95 ÷ seed's "
        "| service − direct: TTFT p50 | TTFT p95 | ITL mean | TPOT mean | client − vLLM's own TTFT | "
        "service's own part p50 | p95 | cached |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, c in summary["table"].items():
        classes, variant = key.split("|")
        ratio = c["p95_vs_seed"]
        lines.append(
            f"| {classes} | {variant} | {_cell(c['ttft_p50'])} | {_cell(c['ttft_p95'])} | {_cell(c['ttft_p99'])} | "
            f"{_cell(c['itl_mean'])} | {_cell(c['tpot_mean'])} | {_cell(c['errors'])} | "
            + ("–" if ratio is None else f"{ratio['median']:.2f} [{ratio['min']:.2f}–{ratio['max']:.2f}]")
            + f" | {_cell(c['ttft_p50_overhead'], signed=True)} | {_cell(c['ttft_p95_overhead'], signed=True)} | "
            f"{_cell(c['itl_mean_overhead'], pct=True)} | {_cell(c['tpot_mean_overhead'], pct=True)} | "
            f"{_cell(c['client_minus_server_ttft'], signed=True)} | "
            f"{_cell(c['own_part_p50'])} | {_cell(c['own_part_p95'])} | "
            + ("–" if c["cached_ratio"] is None else f"{c['cached_ratio']['median']:.0%}")
            + " |"
        )
    return "\n".join(lines) + "\n"


@app.command()
def main(
    folder: Annotated[Path, typer.Argument(help="the runs' folder")],
    skip_round: Annotated[list[int] | None, typer.Option(help="rounds left out (default: 0)")] = None,
) -> None:
    summary = summarise(*_figures_of(folder, set(skip_round if skip_round is not None else [0])))
    (folder / "service-path.json").write_text(json.dumps(summary, indent=1) + "\n")
    text = markdown(summary)
    (folder / "service-path.md").write_text(text)
    typer.echo(text)


if __name__ == "__main__":
    app()
