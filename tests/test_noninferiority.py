"""The rollout's quality verdict on synthetic outcomes, whose truth is known: a real drop is found, no drop raises
the alarm at most 5% of the time, the interval covers the true difference 95% of the time, and the sample a
decision needs is what the spread says (loadtest/quality/noninferiority.py)."""

import numpy as np
import pytest

from loadtest.quality.noninferiority import Decision, Difference, Pair, detectable_drop, paired_difference, verdict

QUESTIONS, SEEDS = 120, 5
RUNS = 400  # experiments a figure is measured over: a rate of 5% is then known to about +-2 points


def experiment(rng: np.random.Generator, drop: float, questions: int = QUESTIONS, shared: float = 0.6) -> list[Pair]:
    """Questions of spread difficulty (pass rates from 0.1 to 0.9, a quarter on average), each asked with SEEDS
    seeds on both variants; a seed's luck is shared by both variants with probability `shared` (the same sampling
    seed). The candidate's chance on each question is the original's minus `drop` (up to 0.1: none goes below 0)."""
    chances = 0.1 + 0.8 * rng.beta(0.7, 2.8, questions)
    pairs = []
    for q, chance in enumerate(chances):
        for seed in range(SEEDS):
            luck = rng.random()
            other = luck if rng.random() < shared else rng.random()
            pairs.append(Pair(f"q{q}", seed, bool(luck < chance), bool(other < chance - drop)))
    return pairs


def decisions(drop: float, questions: int = QUESTIONS, margin: float = 0.03) -> dict[Decision, float]:
    rng = np.random.default_rng(39)
    made = [verdict(paired_difference(experiment(rng, drop, questions)), margin).decision for _ in range(RUNS)]
    return {d: made.count(d) / RUNS for d in Decision}


def test_no_drop_raises_the_alarm_at_most_one_time_in_twenty() -> None:
    rates = decisions(drop=0.0)
    assert rates[Decision.KEEP] <= 0.05, rates


def test_a_ten_point_drop_is_found() -> None:
    rates = decisions(drop=0.10)
    assert rates[Decision.KEEP] >= 0.9, rates
    assert rates[Decision.ROLL_OUT] == 0, rates  # never waved through


def test_a_drop_past_the_margin_is_rolled_out_at_most_one_time_in_forty() -> None:
    """The non-inferiority test's own error: a candidate worse by more than the margin passes as acceptable only
    when the interval's upper bound misses, 2.5% of the time at 95%."""
    rates = decisions(drop=0.05)
    assert rates[Decision.ROLL_OUT] <= 0.04, rates


def test_no_drop_on_enough_questions_rolls_out() -> None:
    rates = decisions(drop=0.0, questions=400)
    assert rates[Decision.ROLL_OUT] >= 0.8, rates


def test_the_interval_covers_the_true_difference_nineteen_times_in_twenty() -> None:
    rng = np.random.default_rng(40)
    covered = 0
    for _ in range(RUNS):
        pairs = experiment(rng, 0.0)
        d = paired_difference(pairs)
        covered += d.low <= 0.0 <= d.high
    assert 0.92 <= covered / RUNS <= 0.98, covered / RUNS


def test_flips_are_counted_each_way_beside_the_rates() -> None:
    pairs = [
        Pair("a", 0, True, True),
        Pair("a", 1, True, False),  # lost
        Pair("b", 0, False, True),  # gained
        Pair("b", 1, False, False),
        Pair("c", 0, True, False),  # lost
        Pair("c", 1, False, False),
    ]
    d = paired_difference(pairs)
    assert (d.questions, d.pairs, d.lost, d.gained) == (3, 6, 2, 1)
    assert d.original_rate == pytest.approx(0.5) and d.candidate_rate == pytest.approx(1 / 3)
    assert d.difference == pytest.approx(1 / 6)
    assert d.low < d.difference < d.high


def test_an_undecided_verdict_says_how_many_questions_would_decide() -> None:
    rng = np.random.default_rng(41)
    small = paired_difference(experiment(rng, 0.0, questions=20))
    said = verdict(small)
    assert said.decision is Decision.UNDECIDED, said
    assert said.questions_needed is not None and said.questions_needed > 20
    assert f"about {said.questions_needed} questions" in said.sentence
    # At that size (the same spread, centred where it was) the interval clears a bound it can reach: under the
    # margin if the difference is below it, above zero if the difference is above zero.
    half = 1.96 * small.sd / said.questions_needed**0.5
    reachable = [distance for distance in (0.03 - small.difference, small.difference) if distance > 0]
    assert any(half <= distance for distance in reachable), (half, reachable)
    assert 1.96 * small.sd / (said.questions_needed - 1) ** 0.5 > max(reachable)  # and not at one question fewer


def test_the_verdicts_say_the_interval_in_words() -> None:
    base = {"questions": 100, "pairs": 500, "original_rate": 0.2, "candidate_rate": 0.19, "sd": 0.1, "lost": 9}
    out = verdict(Difference(**base, difference=0.01, low=-0.01, high=0.02, gained=4), margin=0.03)
    assert out.decision is Decision.ROLL_OUT and "95% interval -1.0 to +2.0" in out.sentence
    worse = verdict(Difference(**base, difference=0.06, low=0.02, high=0.10, gained=1), margin=0.03)
    assert worse.decision is Decision.KEEP and "margin of 3 points is not cleared" in worse.sentence


def test_the_detectable_drop_shrinks_with_the_root_of_the_questions() -> None:
    assert detectable_drop(0.2, 400) == pytest.approx(detectable_drop(0.2, 100) / 2, rel=0.02)
    # Planned at the spread of the experiments above, the drop found 80% of the time really is found that often.
    rng = np.random.default_rng(42)
    sd = float(np.mean([paired_difference(experiment(rng, 0.0)).sd for _ in range(50)]))
    drop = detectable_drop(sd, QUESTIONS)
    found = decisions(drop)[Decision.KEEP]
    assert 0.7 <= found <= 0.95, (drop, found)


def test_one_question_is_no_experiment() -> None:
    with pytest.raises(ValueError, match="two questions"):
        paired_difference([Pair("a", 0, True, False), Pair("a", 1, True, True)])
