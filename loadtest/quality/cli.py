"""`classroom loadtest quality ...`: rubric scores, original-vs-FP8 agreement, lm-eval."""

import asyncio
from pathlib import Path
from typing import Annotated

import httpx
import typer
from pydantic import BaseModel

from loadtest.files import model_prompts
from loadtest.quality import lmeval
from loadtest.quality.logprobs import Agreement, PositionStats, compare_positions, generate, score, summarize
from loadtest.quality.rubric import STANDIN_WARNING, RubricResult, Scorer, load_rubrics
from service.classroom.prompting import Prompts
from service.model_manifest import read_manifest
from service.settings import Settings

quality_app = typer.Typer(help="Quality: rubric scores, original-vs-FP8 agreement, lm-eval.", no_args_is_help=True)
TIMEOUT = httpx.Timeout(600.0, connect=10.0)


def _prompts(model_dir: Path | None) -> tuple[Settings, Path, Prompts]:
    settings = Settings()
    folder = model_dir or settings.model.dir
    return settings, folder, model_prompts(settings, folder)


@quality_app.command("rubric")
def rubric_command(
    url: Annotated[str | None, typer.Option(help="vLLM's /v1 URL (default: the settings')")] = None,
    variant: str = "original",
    model_dir: Annotated[Path | None, typer.Option(help="the served model's folder (tokenizer, manifest)")] = None,
    out: Annotated[Path | None, typer.Option(help="save the scores as JSON")] = None,
) -> None:
    """Ask the bundled passage questions (greedy) and score the answers with their rubrics."""
    settings, folder, prompts = _prompts(model_dir)
    base = url or settings.backend.base_url
    rubrics = load_rubrics()
    scorer = Scorer(rubrics.misconception_penalty)
    manifest = read_manifest(folder)
    kind = manifest.kind if manifest else None

    async def ask_all() -> list[str]:
        answers = []
        async with httpx.AsyncClient(base_url=base, timeout=TIMEOUT) as client:
            for passage in rubrics.passages:
                for q in passage.questions:
                    body = {
                        "model": settings.served_name(folder),
                        "messages": prompts.messages(passage.title, passage.text, q.question),
                        "max_tokens": settings.answer.max_tokens,
                        "temperature": 0,
                    }
                    response = await client.post("/chat/completions", json=body)
                    response.raise_for_status()
                    answers.append(response.json()["choices"][0]["message"]["content"] or "")
        return answers

    answers = iter(asyncio.run(ask_all()))
    scores = [scorer.score(p, q, next(answers)) for p in rubrics.passages for q in p.questions]
    warning = None if kind == "hub" else STANDIN_WARNING
    result = RubricResult(
        variant=variant, url=base, model_kind=kind, warning=warning,
        mean_score=sum(s.score for s in scores) / len(scores), scores=scores,
    )  # fmt: skip
    if warning:
        typer.echo(f"\n{'!' * 78}\n{warning}\n{'!' * 78}\n")
    for s in scores:
        wrong = f"; misconceptions: {', '.join(s.misconceptions_found)}" if s.misconceptions_found else ""
        typer.echo(
            f"{s.score:.2f}  {s.title} / {s.question}  "
            f"ideas {len(s.ideas_found)}/{len(s.ideas_found) + len(s.ideas_missed)}{wrong}"
        )
    typer.echo(f"mean score {result.mean_score:.3f} over {len(scores)} questions ({variant})")
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

    async def measure() -> list[list[PositionStats]]:
        per_prompt: list[list[PositionStats]] = []
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
        return per_prompt

    per_prompt = asyncio.run(measure())
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
        definitions=(logprobs.__doc__ or "").strip(),
    )
    a = result.agreement
    typer.echo(
        f"{candidate_name} vs original over {a.prompts} prompts, {a.positions} positions: top-1 agreement "
        f"{a.top1_agreement:.1%}, mean KL over top-{k} {a.mean_kl:.4f} nats (p95 {a.p95_kl:.4f})"
        + (
            "; the model is the stand-in: agreement is still meaningful (same weights, quantized)"
            if result.model_kind == "standin"
            else ""
        )
    )
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(result.model_dump_json(indent=1) + "\n")


@quality_app.command("lm-eval")
def lm_eval_command(
    url: Annotated[str | None, typer.Option(help="vLLM's /v1 URL (default: the settings')")] = None,
    model_dir: Annotated[Path | None, typer.Option(help="the served model's folder (its tokenizer)")] = None,
    lm_eval: Annotated[Path | None, typer.Option(help="the lm_eval command (default: .venv-lmeval, then PATH)")] = None,
    out: Path = Path("var/loadtest/lm-eval"),
) -> None:
    """wikitext and hellaswag with --limit 100 through lm-eval, where the datasets can be fetched."""
    settings = Settings()
    reachable = lmeval.datasets_reachable()
    if not reachable.ok:
        typer.echo(reachable.message, err=True)
        raise typer.Exit(2)
    program = lmeval.find_lm_eval(lm_eval)
    if program is None:
        typer.echo("lm-eval is not installed: " + (lmeval.__doc__ or "").strip().splitlines()[-1].strip(), err=True)
        raise typer.Exit(2)
    done = lmeval.run_lm_eval(
        program,
        url or settings.backend.base_url,
        settings.served_name(model_dir),
        model_dir or settings.model.dir,
        out,
    )
    typer.echo(done.message, err=not done.ok)
    if not done.ok:
        raise typer.Exit(2)
