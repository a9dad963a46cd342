"""`classroom loadtest ...` (or `python -m loadtest ...`): run load, render reports, compare variants,
measure the client's overhead, and the quality checks (quality/)."""

import asyncio
import secrets
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, get_args

import typer

from loadtest import report as reports
from loadtest.client import PupilApiTarget, Target, VllmTarget
from loadtest.environment import environment, model_info
from loadtest.files import model_prompts, read_saved
from loadtest.quality.cli import quality_app
from loadtest.results import ProfileKind, RunConfig, RunResult, TargetKind, WorkloadInfo, WorkloadKind
from loadtest.runner import SweepPlan, run
from loadtest.scheduler import DEFAULT_MAX_IN_FLIGHT, Profile
from loadtest.workload import Workload, classroom, seed_workload, synthetic
from service.settings import Settings

# Named: its commands are a group of `classroom` (`classroom loadtest run`), added by entry point.
app = typer.Typer(
    name="loadtest", help="The pre-rollout load test: latency, quality and cost of a variant.", no_args_is_help=True
)
app.add_typer(quality_app, name="quality")

TARGETS, WORKLOADS, PROFILES = get_args(TargetKind), get_args(WorkloadKind), get_args(ProfileKind)
DEFAULT_RUNS = Path("var/loadtest")
# A run with more failed requests than this share exits 1 (`run --max-failed`).
DEFAULT_MAX_FAILED = 0.01


def _profile(name: str, rate: float | None, streams: int | None, steps: int) -> Profile | SweepPlan:
    if name == "sweep":
        return SweepPlan(steps=steps)
    if name in ("constant", "poisson"):
        if not rate or rate <= 0:
            raise typer.BadParameter(f"{name} needs --rate R (requests a second)", param_hint="--rate")
        return Profile(name, rate=rate)  # type: ignore[arg-type]
    if name == "concurrent":
        if not streams or streams <= 0:
            raise typer.BadParameter("concurrent needs --streams N", param_hint="--streams")
        return Profile("concurrent", streams=streams)
    if name in ("synchronous", "throughput"):
        return Profile(name, streams=streams)  # type: ignore[arg-type]
    raise typer.BadParameter(_either(PROFILES), param_hint="--profile")


def _either(names: tuple[str, ...]) -> str:
    return f"{', '.join(names[:-1])} or {names[-1]}"


@app.command("run")
def run_command(
    target: Annotated[str, typer.Option(help="vllm: its OpenAI API directly; service: the pupil API")] = "vllm",
    url: Annotated[
        str | None, typer.Option(help="vLLM's /v1 URL or the service's root (default: the settings')")
    ] = None,
    workload: Annotated[str, typer.Option(help=_either(WORKLOADS))] = "synthetic",
    profile: Annotated[str, typer.Option(help=", ".join(PROFILES))] = "synchronous",
    rate: Annotated[
        float | None, typer.Option(help="arrivals a second (constant, poisson); a class's burst is one arrival")
    ] = None,
    streams: Annotated[int | None, typer.Option(help="requests in flight (concurrent; a bound for the others)")] = None,
    sweep_steps: Annotated[int, typer.Option(help="constant rates between synchronous and throughput")] = 3,
    prompt_tokens: Annotated[int, typer.Option(help="synthetic: tokens of each prompt after the chat template")] = 256,
    output_tokens: Annotated[
        int | None, typer.Option(help="tokens of each answer (default: the service's answer budget)")
    ] = None,
    classes: Annotated[int, typer.Option(help="classroom: classes")] = 2,
    pupils: Annotated[int, typer.Option(help="classroom: pupils a class (each asks in the burst)")] = 10,
    passage_tokens: Annotated[int, typer.Option(help="classroom: tokens of each class's passage")] = 1000,
    trickle: Annotated[int, typer.Option(help="classroom: single questions a class after its burst")] = 5,
    prime: Annotated[
        bool, typer.Option(help="classroom on vLLM: send each passage once first, as the service's warm-up does")
    ] = True,
    requests: Annotated[int, typer.Option(help="request cap of each load level (what stops a run)")] = 100,
    max_seconds: Annotated[
        float, typer.Option(help="safety net: requests still running then are cut and counted")
    ] = 600.0,
    warmup: Annotated[int, typer.Option(help="warm-up requests on other prompts, not counted")] = 2,
    seed: Annotated[int | None, typer.Option(help="seed of prompts and arrivals (default: a new one each run)")] = None,
    ttft_target_ms: Annotated[float, typer.Option(help="the p95 TTFT a class accepts")] = 1000.0,
    variant: Annotated[str, typer.Option(help="the deployment's name in reports (original, fp8, ...)")] = "original",
    model_dir: Annotated[Path | None, typer.Option(help="the served model's folder: tokenizer and manifest")] = None,
    metrics_url: Annotated[
        list[str] | None, typer.Option(help="vLLM /v1 URLs whose cache counters to read (service target)")
    ] = None,
    teacher_email: Annotated[
        str | None, typer.Option(help="service: an existing teacher (password in $CLASSROOM_LOADTEST_TEACHER_PASSWORD)")
    ] = None,
    settle_s: Annotated[float, typer.Option(help="wait before reading /metrics after a run (it lags)")] = 1.0,
    out: Annotated[Path | None, typer.Option(help="where to save the results JSON")] = None,
    max_failed: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="the share of requests that may fail before the run exits 1")
    ] = DEFAULT_MAX_FAILED,
) -> None:
    """Send a workload under a load profile; save every request's timeline; print the report. Exits 1 when more
    than --max-failed of the requests got no whole answer: a run that measured errors is not a latency figure."""
    settings = Settings()
    if target not in TARGETS:
        raise typer.BadParameter(_either(TARGETS), param_hint="--target")
    if workload not in WORKLOADS:
        raise typer.BadParameter(_either(WORKLOADS), param_hint="--workload")
    if target == "service" and workload == "synthetic":
        raise typer.BadParameter("the pupil API builds its own prompts: use classroom or seed", param_hint="--workload")
    plan = _profile(profile, rate, streams, sweep_steps)
    seed = seed if seed is not None else secrets.randbelow(2**31)
    folder = model_dir or settings.model.dir
    prompts = model_prompts(settings, folder)
    answer_tokens = output_tokens or settings.answer.max_tokens
    notes: list[str] = []

    def make(run_seed: int) -> Workload:
        if workload == "synthetic":
            return synthetic(
                prompts.tokenizer,
                prompt_tokens=prompt_tokens,
                output_tokens=answer_tokens,
                requests=requests,
                warmup=warmup,
                seed=run_seed,
            )
        if workload == "classroom":
            return classroom(
                prompts,
                classes=classes,
                pupils=pupils,
                passage_tokens=passage_tokens,
                trickle_per_class=trickle,
                output_tokens=answer_tokens,
                temperature=settings.answer.temperature,
                warmup=warmup,
                seed=run_seed,
            )
        return seed_workload(prompts, output_tokens=answer_tokens, temperature=settings.answer.temperature)

    sample = make(seed)
    base = url or (settings.backend.base_url if target == "vllm" else f"http://{settings.api.host}:{settings.api.port}")
    cache_urls = [base] if target == "vllm" else (metrics_url or [settings.backend.base_url])
    # As many connections as the profile lets requests be in flight: a smaller pool would hold the surplus
    # back until earlier answers end (4 classes of 30 at once through 64 connections waited ~0.5 s each).
    connections = max(1, streams or 0) if profile in ("synchronous", "concurrent") else streams or DEFAULT_MAX_IN_FLIGHT
    chosen: Target
    if target == "vllm":
        chosen = VllmTarget(
            base, settings.served_name(folder), connections, settings.backend.api_key.get_secret_value()
        )
    else:
        email, password = _teacher(settings, teacher_email)
        chosen = PupilApiTarget(base, connections, email, password)
        limit = settings.limits.questions_per_minute
        notes.append(
            f"through the service: answers of CLASSROOM_ANSWER__MAX_TOKENS={settings.answer.max_tokens} tokens, "
            f"rate limit CLASSROOM_LIMITS__QUESTIONS_PER_MINUTE={limit} a pupil as this environment sets it "
            "(raise it for load tests: a refused question counts as an error here)"
        )
        if workload == "classroom" and output_tokens not in (None, settings.answer.max_tokens):
            notes.append("--output-tokens is ignored through the service: its answer budget applies")
    info = WorkloadInfo(
        kind=sample.kind,
        prompt_tokens=sample.prompt_tokens,
        output_tokens=settings.answer.max_tokens if target == "service" else answer_tokens,
        ignore_eos=sample.ignore_eos and target == "vllm",
        temperature=sample.temperature,
        classes=sample.class_infos(),
        trickle_per_class=sample.trickle_per_class,
        primed_passages=workload == "classroom" and (prime or target == "service"),
    )
    if target == "service" and workload == "classroom":
        notes.append("passages warmed by the service itself when added (routing.warmup), as in class")
    config = RunConfig(
        target=target,
        url=base,
        variant=variant,
        seed=seed,
        warmup_requests=len(sample.warmup),
        max_requests=requests,
        max_seconds=max_seconds,
        ttft_target_ms=ttft_target_ms,
        settle_s=settle_s,
        notes=notes,
    )
    made = iter([sample])

    def workloads(run_seed: int) -> Workload:
        return next(made, None) or make(run_seed)

    result = asyncio.run(
        _run(chosen, workloads, plan, config, info, prompts_dir=folder, cache_urls=cache_urls, settings=settings)
    )
    path = out or DEFAULT_RUNS / f"{time.strftime('%Y%m%d-%H%M%S')}-{variant}-{workload}-{profile}.json"
    result.save(path)
    typer.echo(reports.render(result))
    typer.echo(f"saved {path}")
    failed, sent = result.failed()
    if failed > max_failed * sent:
        first = next(r for b in result.benchmarks for r in b.requests if not r.ok)
        why = f"{first.error}: {first.error_detail}" if first.error_detail else first.error or "no first token"
        typer.echo(
            f"Error: {failed} of {sent} requests failed, more than --max-failed {max_failed:g} allows (the first: "
            f"{why}).",
            err=True,
        )
        raise typer.Exit(1)


async def _run(
    target: Target,
    make: Callable[[int], Workload],
    plan: Profile | SweepPlan,
    config: RunConfig,
    info: WorkloadInfo,
    *,
    prompts_dir: Path,
    cache_urls: list[str],
    settings: Settings,
) -> RunResult:
    try:
        return await run(
            target,
            make,
            plan,
            config,
            workload_info=info,
            model=model_info(prompts_dir, cache_urls[0], settings.served_name(prompts_dir)),
            environment=environment(settings.backend.venv),
            cache_urls=cache_urls,
        )
    finally:
        await target.close()


def _teacher(settings: Settings, email: str | None) -> tuple[str, str]:
    import os

    if email is not None:
        password = os.environ.get("CLASSROOM_LOADTEST_TEACHER_PASSWORD")
        if not password:
            raise typer.BadParameter("set CLASSROOM_LOADTEST_TEACHER_PASSWORD", param_hint="--teacher-email")
        return email, password
    from service.classroom.accounts import add_teacher  # reaches the service's Redis, as `classroom teacher add` does

    email, password = f"loadtest-{uuid.uuid4().hex[:10]}@loadtest.invalid", secrets.token_urlsafe(16)
    asyncio.run(add_teacher(settings, email, "Load test", password))
    return email, password


@app.command("report")
def report_command(
    results: Annotated[list[Path], typer.Argument(help="saved results JSON")],
    out: Annotated[Path | None, typer.Option(help="write the Markdown here (default: print it)")] = None,
) -> None:
    """Render the report of saved runs again, from their JSON alone."""
    text = "\n\n".join(reports.render(read_saved(path, RunResult, "RESULTS")) for path in results)
    if out is None:
        typer.echo(text)
    else:
        out.write_text(text + "\n")
        typer.echo(f"wrote {out}")


@app.command("overhead")
def overhead_command(
    rate: Annotated[float, typer.Option(help="the constant rate to hold (req/s)")] = 250.0,
    requests: Annotated[int, typer.Option(help="requests a profile")] = 2500,
    output_tokens: Annotated[int, typer.Option(help="tokens the fake streams per answer")] = 16,
    prompt_tokens: int = 64,
    model_dir: Annotated[Path | None, typer.Option(help="a model folder, for the tokenizer")] = None,
    out: Annotated[Path | None, typer.Option(help="save as JSON")] = None,
) -> None:
    """The client's own overhead against fake_vllm: rate held, send lag, CPU per request."""
    from loadtest.overhead import run_overhead

    folder = model_dir or Settings().model.dir
    model_prompts(Settings(), folder)  # a sentence, not a traceback, where no model is
    results = run_overhead(
        folder,
        rate=rate,
        requests=requests,
        output_tokens=output_tokens,
        prompt_tokens=prompt_tokens,
    )
    for r in results:
        typer.echo(
            f"{r.profile}: {r.requests} requests of {r.output_tokens} streamed tokens, "
            f"{r.achieved_rps:.1f} req/s achieved, "
            f"errors {r.errors or 'none'}; send lag p50 {r.send_lag_p50_ms:.2f} ms, p99 {r.send_lag_p99_ms:.2f} ms; "
            f"client CPU {r.client_cpu_ms_per_request:.2f} ms a request; "
            f"TTFT p50 {r.ttft_p50_ms:.2f} ms (client + fake)"
        )
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("[\n" + ",\n".join(r.model_dump_json(indent=1) for r in results) + "\n]\n")


@app.command("compare")
def compare_command(
    runs: Annotated[list[Path], typer.Argument(help="saved runs of both variants (their --variant tells them apart)")],
    gpu_price: Annotated[float, typer.Option(help="price of one GPU an hour (any currency)")],
    gpus: Annotated[int, typer.Option(help="GPUs one replica uses")] = 1,
    agreement: Annotated[list[Path] | None, typer.Option(help="`quality agreement` results")] = None,
    rubric: Annotated[list[Path] | None, typer.Option(help="`quality rubric` results")] = None,
    lm_eval: Annotated[list[Path] | None, typer.Option(help="`quality lm-eval` results (lm-eval-VARIANT.json)")] = None,
    ttft_target_ms: Annotated[float | None, typer.Option(help="default: the runs' own target")] = None,
    min_top1: Annotated[float, typer.Option(help="quality gate: least top-1 agreement")] = 0.9,
    max_kl: Annotated[float, typer.Option(help="quality gate: largest mean KL (nats)")] = 0.1,
    max_score_drop: Annotated[
        float, typer.Option(help="quality gate: largest drop of the rubric score (real model)")
    ] = 0.05,
    out_dir: Path = Path("var/loadtest/compare"),
) -> None:
    """One decision report (Markdown + PNG plots) from two variants' saved runs."""
    from loadtest import compare as decide
    from loadtest.quality.cli import AgreementResult, LmEvalResult
    from loadtest.quality.rubric import RubricResult

    loaded = [(p, read_saved(p, RunResult, "RUNS")) for p in runs]
    agreements = [read_saved(p, AgreementResult, "--agreement") for p in agreement or []]
    if (mismatch := decide.mismatched_agreement(loaded, agreements)) is not None:
        raise typer.BadParameter(mismatch, param_hint="--agreement")
    target = ttft_target_ms or loaded[0][1].config.ttft_target_ms
    report = decide.render(
        loaded,
        agreements,
        [read_saved(p, RubricResult, "--rubric") for p in rubric or []],
        price=gpu_price,
        gpus=gpus,
        gate=decide.Gate(min_top1, max_kl, max_score_drop),
        target_ms=target,
        out_dir=out_dir,
        lm_evals=[read_saved(p, LmEvalResult, "--lm-eval") for p in lm_eval or []],
    )
    typer.echo(report.read_text())
    typer.echo(f"wrote {report}")


@app.command("rollout")
def rollout_command(
    original: Annotated[str, typer.Option(help="the original variant's vLLM /v1 URL")],
    candidate: Annotated[str, typer.Option(help="the candidate's vLLM /v1 URL (FP8)")],
    gpu_price: Annotated[float, typer.Option(help="price of one GPU an hour (any currency)")],
    candidate_name: str = "fp8",
    gpus: Annotated[int, typer.Option(help="GPUs one replica uses")] = 1,
    model_dir: Annotated[Path | None, typer.Option(help="the original's folder: tokenizer and manifest")] = None,
    samples: Annotated[int, typer.Option(min=1, help="answers per question on each variant")] = 5,
    margin: Annotated[float, typer.Option(min=0, help="non-inferiority margin in pass rate (0.03: 3 points)")] = 0.03,
    seeds: Annotated[bool, typer.Option(help="per-request seeds, paired across variants (off on vLLM-CPU)")] = True,
    rounds: Annotated[int, typer.Option(min=1, help="latency rounds, alternating the variants")] = 3,
    ttft_target_ms: Annotated[float, typer.Option(help="the p95 TTFT a class accepts")] = 1000.0,
    quick: Annotated[
        bool, typer.Option(help="a smoke run for a CPU: one passage, 2 answers, no seeds, tiny levels, 1 round")
    ] = False,
    latency_original: Annotated[
        str | None, typer.Option(help="latency on another server pair (the Qwen-shaped stand-in): its original's /v1")
    ] = None,
    latency_candidate: Annotated[str | None, typer.Option(help="and its candidate's /v1")] = None,
    latency_model_dir: Annotated[Path | None, typer.Option(help="that pair's model folder")] = None,
    out_dir: Path = Path("var/loadtest/rollout"),
) -> None:
    """From two served variants to one decision: quality as a paired experiment with an A/A floor, latency in
    alternating rounds, cost per acceptable answer with its interval; rollout.md and rollout.json in OUT_DIR."""
    from loadtest import rollout
    from loadtest.quality.cli import warning_for
    from loadtest.quality.experiment import Plan, Server
    from loadtest.quality.experiment import run as run_quality
    from loadtest.quality.rubric import Scorer, load_rubrics
    from service.model_manifest import read_manifest

    settings = Settings()
    folder = model_dir or settings.model.dir
    prompts = model_prompts(settings, folder)
    rubrics = load_rubrics()
    model = settings.served_name(folder)
    if (latency_original is None) != (latency_candidate is None):
        raise typer.BadParameter("give both --latency-original and --latency-candidate, or neither")
    timed_folder = latency_model_dir or folder
    if quick:
        samples, seeds, rounds = 2, False, 1
    plan = Plan(
        questions=[(p, q) for p in rubrics.passages[: 1 if quick else None] for q in p.questions],
        samples=samples,
        sampling=settings.answer.sampling(),
        seeds=seeds,
        greedy_tokens=16 if quick else 64,
        margin=margin,
    )
    typer.echo(
        f"1/2 quality: {len(plan.questions)} questions x {samples} on original, {candidate_name}, original again"
    )
    quality = run_quality(
        Server(original, model), Server(candidate, model), candidate_name, prompts, Scorer(rubrics), plan
    )
    typer.echo(quality.summary())
    levels = rollout.QUICK_LEVELS if quick else rollout.LEVELS
    figures: list[rollout.RoundFigures] = []
    urls = {"original": latency_original or original, candidate_name: latency_candidate or candidate}
    for round_ in range(rounds):
        order = list(urls) if round_ % 2 == 0 else list(reversed(urls))
        for variant in order:
            for level in levels:
                path = out_dir / "runs" / f"{variant}-{level.name.replace(' ', '-').replace('/', 'per')}-r{round_}.json"
                typer.echo(f"2/2 latency, round {round_ + 1} of {rounds}: {variant}, {level.name}")
                run_command(
                    target="vllm", url=urls[variant], variant=variant, model_dir=timed_folder,
                    ttft_target_ms=ttft_target_ms, seed=round_, out=path, **level.options,  # type: ignore[arg-type]
                )  # fmt: skip
                result = RunResult.load(path)
                figures.append(rollout.round_figures(variant, level.name, round_, result, path.name, ttft_target_ms))
    rates = {
        "original": rollout.pass_rate(quality.scores["original"]),
        candidate_name: rollout.pass_rate(quality.scores["candidate"]),
    }
    summaries = rollout.summarize(figures)
    costs = rollout.costs(summaries, rates, gpu_price, gpus)
    decision, sentence = rollout.decide(quality, costs, candidate_name)
    manifest, timed = read_manifest(folder), read_manifest(timed_folder)
    report = rollout.RolloutReport(
        created=time.strftime("%Y-%m-%dT%H:%M:%S%z"), original_url=original, candidate_url=candidate,
        candidate=candidate_name, model_description=manifest.describe() if manifest else None,
        latency_model_description=timed.describe() if timed else None, latency_urls=urls,
        warning=warning_for(manifest), gpu_price=gpu_price, gpus=gpus, ttft_target_ms=ttft_target_ms,
        quality=quality, pass_rates=rates, rounds=figures, levels=summaries, costs=costs, decision=decision,
        sentence=sentence,
    )  # fmt: skip
    out_dir.mkdir(parents=True, exist_ok=True)
    report.plots = rollout.draw(report, out_dir)
    (out_dir / "rollout.json").write_text(report.model_dump_json(indent=1) + "\n")
    text = rollout.markdown(report)
    (out_dir / "rollout.md").write_text(text)
    typer.echo(text)
    typer.echo(f"wrote {out_dir / 'rollout.md'} and {out_dir / 'rollout.json'}")
