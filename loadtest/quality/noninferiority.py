"""The quality verdict of a rollout: does the candidate (the FP8 copy) pass no fewer answers than the original, within
a margin the operator sets? Measured as an experiment, not read off two pass rates.

- **Paired**: each question is asked with the same sampling seeds on both variants, so both see the same draw of
  luck and a difference is the variant's.
- **The question is the unit**: the answers to one question are not independent (an easy question passes on every
  seed), so each question gives one paired difference, the share of its seeds that passed on the original minus the
  share on the candidate, and the interval of their mean is Student's t over the questions: a paired t-interval on
  cluster means, which holds its 95% where a count of answers would claim more evidence than there is.
- **Non-inferiority** (as CONSORT reports it): the candidate is acceptable when the upper bound of the two-sided 95%
  interval of (original - candidate) lies under the margin; it is worse when the whole interval lies above zero
  and does not clear the margin; otherwise there is not enough evidence, and the sample that would decide is given.
- **Flips** (Dutta et al., NeurIPS 2024: equal pass rates hide answers that turn right->wrong and wrong->right, which
  pupils see): counted per (question, seed) pair, and printed beside an A/A run (the original against itself with
  other seeds) as the floor that resampling alone reaches.
"""

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from pydantic import BaseModel
from scipy import stats

CONFIDENCE = 0.95
POWER = 0.80
DEFAULT_MARGIN = 0.03  # three points of pass rate: what a school would not notice in a term's answers


@dataclass(frozen=True)
class Pair:
    """One question asked with one seed on both variants: whether each answer passed."""

    question: str
    seed: int
    original: bool
    candidate: bool


class Decision(StrEnum):
    ROLL_OUT = "roll out the candidate"
    KEEP = "keep the original"
    UNDECIDED = "not enough evidence"


class Difference(BaseModel):
    """(original - candidate) pass rate over paired answers, with its interval over the questions."""

    questions: int
    pairs: int
    original_rate: float
    candidate_rate: float
    difference: float  # positive: the candidate passes fewer
    low: float
    high: float
    sd: float  # of the questions' paired differences: what sets the sample a decision needs
    lost: int  # pairs that passed on the original and failed on the candidate (right -> wrong)
    gained: int  # and the other way (wrong -> right)


def paired_difference(pairs: Iterable[Pair], confidence: float = CONFIDENCE) -> Difference:
    by_question: dict[str, list[Pair]] = defaultdict(list)
    for pair in pairs:
        by_question[pair.question].append(pair)
    if len(by_question) < 2:
        raise ValueError("a paired interval needs answers to two questions at least")
    differences = [sum(p.original - p.candidate for p in ps) / len(ps) for ps in by_question.values()]
    n = len(differences)
    mean = sum(differences) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in differences) / (n - 1))
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * sd / math.sqrt(n)
    every = [p for ps in by_question.values() for p in ps]

    def rate(side: str) -> float:
        shares = [sum(bool(getattr(p, side)) for p in ps) / len(ps) for ps in by_question.values()]
        return sum(shares) / n

    return Difference(
        questions=n,
        pairs=len(every),
        original_rate=rate("original"),
        candidate_rate=rate("candidate"),
        difference=mean,
        low=mean - half,
        high=mean + half,
        sd=sd,
        lost=sum(p.original and not p.candidate for p in every),
        gained=sum(p.candidate and not p.original for p in every),
    )


class Verdict(BaseModel):
    decision: Decision
    margin: float
    difference: Difference
    sentence: str
    # Questions (with as many seeds each) that would most likely decide, where the evidence did not: the sample at
    # which the interval, as wide as this one's spread makes it, clears the margin or zero.
    questions_needed: int | None = None


def _needed(sd: float, distance: float, confidence: float) -> int | None:
    """Questions for an interval's half-width to fall under `distance`, at this spread (normal approximation)."""
    if distance <= 0:
        return None
    z = stats.norm.ppf(0.5 + confidence / 2)
    return max(2, math.ceil((z * sd / distance) ** 2))


def verdict(difference: Difference, margin: float = DEFAULT_MARGIN, confidence: float = CONFIDENCE) -> Verdict:
    d = difference
    shown = f"{d.difference * 100:+.1f} points (95% interval {d.low * 100:+.1f} to {d.high * 100:+.1f})"
    if d.high < margin:
        return Verdict(
            decision=Decision.ROLL_OUT,
            margin=margin,
            difference=d,
            sentence=f"The candidate passes no fewer answers within the {margin * 100:.0f}-point margin: "
            f"original minus candidate {shown}, over {d.questions} questions.",
        )
    if d.low > 0:
        return Verdict(
            decision=Decision.KEEP,
            margin=margin,
            difference=d,
            sentence=f"The candidate passes fewer answers: original minus candidate {shown}, over "
            f"{d.questions} questions, and the margin of {margin * 100:.0f} points is not cleared.",
        )
    # Not decided: the sample at which the interval, centred where it is, would clear the nearer of the two bounds.
    needed = (_needed(d.sd, margin - d.difference, confidence), _needed(d.sd, d.difference, confidence))
    more = min((n for n in needed if n is not None), default=None)
    tail = f"; about {more} questions would decide it at this spread" if more is not None else ""
    return Verdict(
        decision=Decision.UNDECIDED,
        margin=margin,
        difference=d,
        questions_needed=more,
        sentence=f"Not enough evidence: original minus candidate {shown}, over {d.questions} questions, reaches "
        f"both zero and the {margin * 100:.0f}-point margin{tail}.",
    )


def detectable_drop(sd: float, questions: int, confidence: float = CONFIDENCE, power: float = POWER) -> float:
    """The smallest true drop the paired test finds with `power`, at this spread of the questions' differences: how
    many questions a decision needs, before it is run."""
    if questions < 2:
        raise ValueError("two questions at least")
    df = questions - 1
    return float((stats.t.ppf(0.5 + confidence / 2, df) + stats.t.ppf(power, df)) * sd / math.sqrt(questions))
