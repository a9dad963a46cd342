"""(a) Passage-question scoring: the bundled passages, questions and rubrics (passages.json), asked through
the service's own prompt layout, scored by keyword rules. On the stand-in the words are random: the scores
then mean nothing, and every output says so."""

import json
import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

RUBRICS = Path(__file__).with_name("passages.json")
STANDIN_WARNING = (
    "THE MODEL IS THE OFFLINE STAND-IN (random weights): its answers are gibberish and these scores MEAN "
    "NOTHING. They show the scoring runs end to end; judge quality on the real checkpoint."
)


class Rule(BaseModel):
    name: str
    any: list[str]

    def found(self, answer: str) -> bool:
        return any(re.search(pattern, answer, re.IGNORECASE) for pattern in self.any)


class Question(BaseModel):
    question: str
    ideas: list[Rule]
    misconceptions: list[Rule]


class Passage(BaseModel):
    title: str
    text: str
    questions: list[Question]


class Rubrics(BaseModel):
    note: str
    misconception_penalty: float
    passages: list[Passage]


def load_rubrics(path: Path = RUBRICS) -> Rubrics:
    return Rubrics.model_validate(json.loads(path.read_text()))


class Score(BaseModel):
    title: str
    question: str
    answer: str
    ideas_found: list[str]
    ideas_missed: list[str]
    misconceptions_found: list[str]
    score: float  # ideas found / ideas - penalty x misconceptions found, within [0, 1]


@dataclass(frozen=True)
class Scorer:
    penalty: float

    def score(self, passage: Passage, question: Question, answer: str) -> Score:
        found = [idea.name for idea in question.ideas if idea.found(answer)]
        wrong = [m.name for m in question.misconceptions if m.found(answer)]
        raw = len(found) / len(question.ideas) - self.penalty * len(wrong)
        return Score(
            title=passage.title,
            question=question.question,
            answer=answer,
            ideas_found=found,
            ideas_missed=[idea.name for idea in question.ideas if idea.name not in found],
            misconceptions_found=wrong,
            score=min(1.0, max(0.0, raw)),
        )


class RubricResult(BaseModel):
    variant: str
    url: str
    model_kind: str | None
    warning: str | None
    mean_score: float
    scores: list[Score]
