"""How far the rule scorer can be trusted: its verdicts against a teacher's on answers it was not written from.

Two sets: labelled.json (answers of the small model and written ones, labelled as a teacher would) and
adversarial.json (answers written to fool a keyword scorer: negated ideas, wrong numbers, invented details, copied
sentences that answer something else, half answers, contradictions; and right answers in a pupil's own words). Each
is split by passage (`Passage.part` in passages.json): the scorer's rules are tuned on the tuning passages only, and
the held-out passages measure it. The figures a reviewer asks for are printed for each part: agreement beside the
baseline of failing everything, Cohen's kappa, wrong answers passed and right ones failed."""

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from loadtest.quality.rubric import LABELLED, Rubrics, Scorer, load_labelled, load_rubrics

if TYPE_CHECKING:
    from loadtest.quality.judge import JudgeEndpoint

ADVERSARIAL = Path(__file__).with_name("adversarial.json")


class AdversarialAnswer(BaseModel):
    title: str
    question: str
    answer: str
    kind: str = Field(alias="class")  # what the answer does: right_own_words, negated, wrong_number, ...
    passes: bool  # the teacher's verdict
    why: str


class AdversarialAnswers(BaseModel):
    note: str
    held_out: list[str]
    answers: list[AdversarialAnswer]


def load_adversarial(path: Path = ADVERSARIAL) -> AdversarialAnswers:
    return AdversarialAnswers.model_validate(json.loads(path.read_text()))


@dataclass(frozen=True)
class Judged:
    """One answer, the teacher's verdict and the scorer's, and the kind of answer it is."""

    title: str
    kind: str  # the labelled set's label, or the adversarial set's class
    teacher: bool
    scorer: bool


class Agreement(BaseModel):
    answers: int
    agreement: float
    always_fail: float  # the agreement of a scorer that fails everything: the floor to beat
    kappa: float | None  # Cohen's: agreement beyond what the two verdicts' rates give by chance
    wrong_passed: int
    wrong: int
    right_failed: int
    right: int
    by_kind: dict[str, str]  # kind -> "agreed/answers"


def cohen_kappa(judged: list[Judged]) -> float | None:
    n = len(judged)
    observed = sum(j.teacher == j.scorer for j in judged) / n
    teacher, scorer = sum(j.teacher for j in judged) / n, sum(j.scorer for j in judged) / n
    chance = teacher * scorer + (1 - teacher) * (1 - scorer)
    return None if chance == 1 else (observed - chance) / (1 - chance)


def agreement(judged: list[Judged]) -> Agreement:
    n = len(judged)
    kinds: Counter[str] = Counter(j.kind for j in judged)
    agreed: Counter[str] = Counter(j.kind for j in judged if j.teacher == j.scorer)
    return Agreement(
        answers=n,
        agreement=sum(j.teacher == j.scorer for j in judged) / n,
        always_fail=sum(not j.teacher for j in judged) / n,
        kappa=cohen_kappa(judged),
        wrong_passed=sum(j.scorer and not j.teacher for j in judged),
        wrong=sum(not j.teacher for j in judged),
        right_failed=sum(j.teacher and not j.scorer for j in judged),
        right=sum(j.teacher for j in judged),
        by_kind={k: f"{agreed[k]}/{kinds[k]}" for k in sorted(kinds)},
    )


# An answer as both sets give it: passage title, question, answer, the teacher's verdict, and its kind (the label a
# teacher gave, or the trap it was written as).
Row = tuple[str, str, str, bool, str]


def verdict_rows(labelled: Path = LABELLED, adversarial: Path = ADVERSARIAL) -> dict[str, list[Row]]:
    """Both sets' answers, each with the teacher's verdict."""
    return {
        "labelled": [
            (a.title, a.question, a.answer, a.teacher_passes, str(a.label)) for a in load_labelled(labelled).answers
        ],
        "adversarial": [
            (a.title, a.question, a.answer, a.passes, a.kind) for a in load_adversarial(adversarial).answers
        ],
    }


def judge(rubrics: Rubrics, items: Iterable[Row]) -> list[Judged]:
    """Each answer's verdict by the rule scorer, beside the teacher's."""
    scorer = Scorer(rubrics)
    out = []
    for title, question, answer, teacher, kind in items:
        passage, q = rubrics.find(title, question)
        out.append(Judged(title, kind, teacher, scorer.score(passage, q, answer).passed))
    return out


def by_part(rubrics: Rubrics, judged: list[Judged]) -> dict[str, Agreement]:
    part = {p.title: p.part for p in rubrics.passages}
    return {
        name: agreement([j for j in judged if part[j.title] == name])
        for name in ("tuning", "held_out")
        if any(part[j.title] == name for j in judged)
    }


def check(
    rubrics: Rubrics | None = None, labelled: Path = LABELLED, adversarial: Path = ADVERSARIAL
) -> dict[str, dict[str, Agreement]]:
    rubrics = rubrics or load_rubrics()
    return {name: by_part(rubrics, judge(rubrics, rows)) for name, rows in verdict_rows(labelled, adversarial).items()}


def _figures(a: Agreement) -> str:
    """A table row's cells from the answers' count on."""
    kappa = f"{a.kappa:.2f}" if a.kappa is not None else "-"
    return (
        f"{a.answers} | {a.agreement:.1%} | {a.always_fail:.1%} | {kappa} | "
        f"{a.wrong_passed} of {a.wrong} | {a.right_failed} of {a.right} |"
    )


def table(results: dict[str, dict[str, Agreement]]) -> str:
    lines = [
        "| set | part | answers | agreement | always-fail | kappa | wrong passed | right failed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, parts in results.items():
        lines += [f"| {name} | {part} | {_figures(a)}" for part, a in parts.items()]
    return "\n".join(lines)


class JudgeCheck(BaseModel):
    """A rubric judge measured as the rule scorer is, on the held-out part of both sets, and beside it."""

    model: str
    labelled: Agreement  # the judge against the teacher
    adversarial: Agreement
    with_scorer: Agreement  # the judge against the rule scorer, on the same answers (the scorer in the teacher's place)
    unparsed: int


def check_judge(
    endpoint: "JudgeEndpoint",
    rubrics: Rubrics | None = None,
    limit: int | None = None,
    labelled: Path = LABELLED,
    adversarial: Path = ADVERSARIAL,
) -> JudgeCheck:
    """The held-out answers of both sets (the first `limit` of each, for a try-out), each marked by the judge."""
    from loadtest.quality.judge import judge_all

    rubrics = rubrics or load_rubrics()
    held_out = {p.title for p in rubrics.passages if p.part == "held_out"}
    sets = {
        name: [row for row in rows if row[0] in held_out][:limit]
        for name, rows in verdict_rows(labelled, adversarial).items()
    }
    items = [(*rubrics.find(title, question), answer) for rows in sets.values() for title, question, answer, *_ in rows]
    verdicts = judge_all(endpoint, items)
    scorer = [j.scorer for rows in sets.values() for j in judge(rubrics, rows)]
    rows = [row for rows in sets.values() for row in rows]
    judged = [
        Judged(title, kind, teacher, by_judge)
        for (title, _, _, teacher, kind), by_judge in zip(rows, verdicts.passed, strict=True)
    ]
    n = len(sets["labelled"])
    return JudgeCheck(
        model=endpoint.model,
        labelled=agreement(judged[:n]),
        adversarial=agreement(judged[n:]),
        with_scorer=agreement([Judged(j.title, j.kind, s, j.scorer) for j, s in zip(judged, scorer, strict=True)]),
        unparsed=verdicts.unparsed,
    )


def judge_table(result: JudgeCheck) -> str:
    lines = [
        f"The judge ({result.model}) on the held-out answers; {result.unparsed} replies said neither PASS nor FAIL.",
        "",
        "| against | answers | agreement | always-fail | kappa | wrong passed | right failed |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, a in (
        ("the teacher, labelled", result.labelled),
        ("the teacher, adversarial", result.adversarial),
        ("the rule scorer, both", result.with_scorer),
    ):
        lines.append(f"| {name} | {_figures(a)}")
    return "\n".join(lines)
