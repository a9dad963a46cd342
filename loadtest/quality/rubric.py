"""(a) Passage-question scoring: the bundled passages, questions and rubrics (passages.json), asked through
the service's own prompt layout, scored by keyword rules the way a teacher marks: credit for the ideas the
passage supports, a penalty for a known misconception, nothing for an answer that is empty, unreadable or
off the point, and credit for saying "the passage does not tell" exactly where it does not.

Its own accuracy is measured against answers a teacher labelled (labelled.json, tests/test_quality_scorer.py).
On the stand-in the words are random: the scores then mean nothing, and every output says so."""

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

RUBRICS = Path(__file__).with_name("passages.json")
LABELLED = Path(__file__).with_name("labelled.json")
STANDIN_WARNING = (
    "THE MODEL IS THE OFFLINE STAND-IN (random weights): its answers are gibberish and these scores MEAN "
    "NOTHING. They show the scoring runs end to end; judge quality on a real model."
)
SMALL_WARNING = (
    "THE MODEL IS A SMALL REAL ONE ({repo}), not the product's Qwen2.5-1.5B: these scores are its own, "
    "real but far below what the product's model would reach."
)

# The five kinds of question a class asks about a passage.
QuestionKind = Literal["one_sentence", "explain", "what_if", "word_meaning", "not_in_passage"]
Subject = Literal["science", "history", "geography", "story", "poem"]

# An answer is read as words when most of its tokens are plain words or numbers: the stand-in's random tokens mix
# scripts, casing, code and word pieces (in 2,000 random answers over its vocabulary, at most 70% plain).
_WORD = re.compile(r"^[(\"'‘“]*([A-Za-z][a-z]*(['’-][a-z]+)*|[0-9]+([.,][0-9]+)?%?)[)\"'’”.,;:!?]*$")
READABLE_WORDS = 0.8
# Words that carry no content, left out of the grounding measure.
_FUNCTION = frozenset(
    """this that with from have they their them then than there these those what when where which while will would
    could should about after again also been before being between both because does doing down during each every
    into just like more most much only other over same some such very your here were said says tell tells told make
    made many well even ever""".split()
)


def readable(answer: str) -> bool:
    """Words a pupil can read: mostly plain words and numbers, not a word salad ("the the stream stream")."""
    tokens = answer.split()
    if not tokens:
        return False
    plain = sum(1 for t in tokens if _WORD.match(t))
    bare = [t.strip("\"'.,;:!?()").lower() for t in tokens]
    stutters = sum(1 for a, b in zip(bare, bare[1:], strict=False) if a == b)  # "the the stream stream": word salad
    return plain / len(tokens) >= READABLE_WORDS and stutters < 2


def _content(text: str) -> list[str]:
    """Content words, cut to their first five letters (pollen, pollination, pollinated meet as one)."""
    return [w[:5] for w in re.findall(r"[a-z]+", text.lower()) if len(w) >= 4 and w not in _FUNCTION]


def grounding(answer: str, source: str) -> float:
    """The share of the answer's content words that the passage or the question uses: an answer that wanders
    into things the passage never mentions (the small model's invented facts) scores low."""
    words = _content(answer)
    known = set(_content(source))
    return sum(w in known for w in words) / len(words) if words else 0.0


def _sentences(answer: str) -> list[str]:
    return [" ".join(s.split()) for s in re.split(r"(?<=[.!?])\s+|\n+", answer) if s.strip()]


def wanders(answer: str, source: str, least: float) -> bool:
    """A sentence of six content words or more, fewer than `least` of them the passage's or the question's: the
    small model's invented facts come a sentence at a time, beside a right one."""
    known = set(_content(source))
    for sentence in _sentences(answer):
        words = _content(sentence)
        if len(words) >= 6 and sum(w in known for w in words) / len(words) < least:
            return True
    return False


_FIGURE = re.compile(r"\d+(?:[.,]\d+)*")
# Words that state a quantity, a date or a time: an answer that gives one the passage does not is wrong however
# right its ideas ("for a day and a half", "every autumn", "three weeks"). Number words are read as their digits.
_NUMBER_WORDS = {
    word: str(value)
    for value, word in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
        "seventeen eighteen nineteen twenty".split()
    )
    if word not in ("zero", "one")  # "the only one", "no one": pronouns far more often than counts
} | {"thirty": "30", "forty": "40", "fifty": "50", "sixty": "60", "seventy": "70", "eighty": "80", "ninety": "90"}
_QUANTITY_WORDS = frozenset(
    """hundred thousand million billion half halves quarter dozen twice double triple third fourth
    fifth sixth seventh eighth ninth tenth spring summer autumn winter january february march april may june july
    august september october november december monday tuesday wednesday thursday friday saturday sunday
    minute hour day week month year decade century morning evening noon midnight centimetre metre kilometre
    mile inch gram kilogram tonne litre degree percent""".split()
)


def _quantities(text: str) -> set[str]:
    words = re.findall(r"[a-z]+", text.lower())
    found = {_NUMBER_WORDS[w] for w in words if w in _NUMBER_WORDS}
    found |= {
        w.rstrip("s") if w.rstrip("s") in _QUANTITY_WORDS else w
        for w in words
        if w in _QUANTITY_WORDS or w.rstrip("s") in _QUANTITY_WORDS
    }
    return found | set(_FIGURE.findall(text))


def invents_figures(answer: str, source: str) -> bool:
    """A number, a quantity, a date or a time that neither the passage nor the question gives: made up."""
    return bool(_quantities(answer) - _quantities(source))


def repeats_itself(answer: str) -> bool:
    """The same sentence (four words or more) written twice: the runaway loop of a small model."""
    sentences = [" ".join(s.lower().split()) for s in re.split(r"[.!?\n]+", answer)]
    long = [s for s in sentences if len(s.split()) >= 4]
    return len(long) != len(set(long))


# A negation before a match, in the match's own clause, turns it around: "they do not collect nectar".
# ("Not many", "not much": a quantity, few, not a negation.)
_NEGATOR = re.compile(
    r"(\b(not|never|nor|neither|cannot|no longer)\b|n't\b)(?! (many|much|a lot|very|enough)\b)", re.IGNORECASE
)
_CLAUSE_BREAK = re.compile(r"[.,;:!?]|\b(but|because|so|although|though|while|whereas|instead)\b", re.IGNORECASE)


def negated(answer: str, start: int) -> bool:
    """Whether a negation stands between the start of the clause and `start`."""
    clause = max((m.end() for m in _CLAUSE_BREAK.finditer(answer, 0, start)), default=0)
    return _NEGATOR.search(answer, clause, start) is not None


class Rule(BaseModel):
    name: str
    any: list[str]

    def _starts(self, answer: str) -> list[int]:
        return [m.start() for pattern in self.any for m in re.finditer(pattern, answer, re.IGNORECASE)]

    def found(self, answer: str, negation: bool = True) -> bool:
        """Said: a match, not negated in its clause (unless `negation` is off: where the rule's own patterns
        carry the negation, as what-if answers do: "would not be pollinated")."""
        return any(not (negation and negated(answer, start)) for start in self._starts(answer))

    def denied(self, answer: str) -> bool:
        """Said only the other way round: every match negated ("pollination is not the moving of pollen")."""
        starts = self._starts(answer)
        return bool(starts) and all(negated(answer, start) for start in starts)


class Question(BaseModel):
    question: str
    kind: QuestionKind
    teacher_note: str  # in words, what earns credit and what loses it: what a person labelling answers reads
    ideas: list[Rule]  # empty for not_in_passage: the shared not_told rule is the credit
    needed: int | None = None  # ideas a full-credit answer needs (None: all of them)
    misconceptions: list[Rule]
    choices: list[str] = Field(min_length=4, max_length=4)  # the first is right (lm-eval's multiple choice)


class Passage(BaseModel):
    title: str
    subject: Subject
    # The scorer's rules are tuned on the tuning passages' answers only; the held-out ones measure it
    # (loadtest/quality/scorer_check.py).
    part: Literal["tuning", "held_out"]
    text: str
    questions: list[Question]


class Rubrics(BaseModel):
    note: str
    misconception_penalty: float
    pass_mark: float  # a teacher's "good enough for a pupil": the cost per acceptable answer counts these
    # An answer to an answerable question with a sentence whose grounding (the share of its content words the
    # passage or question uses) is lower than this wanders from the passage and pays the misconception penalty;
    # so does one that gives a figure the passage does not, repeats itself, or says the passage does not tell.
    min_grounding: float
    not_told: Rule
    passages: list[Passage]

    def find(self, title: str, question: str) -> tuple[Passage, Question]:
        passage = next(p for p in self.passages if p.title == title)
        return passage, next(q for q in passage.questions if q.question == question)


def load_rubrics(path: Path = RUBRICS) -> Rubrics:
    return Rubrics.model_validate(json.loads(path.read_text()))


class Score(BaseModel):
    title: str
    question: str
    kind: QuestionKind
    answer: str
    readable: bool
    grounding: float
    ideas_found: list[str]
    ideas_missed: list[str]
    misconceptions_found: list[str]
    score: float  # ideas found / needed (at most 1) - penalty x misconceptions found, within [0, 1]
    passed: bool  # score >= the pass mark, and no misconception: nothing false taught to a pupil


# What any answer can lose credit for, beside its question's own misconceptions.
WANDERS = "wanders from the passage"
SAYS_NOT_TOLD = "says the passage does not tell, where it does"
REPEATS = "repeats itself"
INVENTS = "gives a figure the passage does not"
DENIES = "denies what the passage says"


@dataclass(frozen=True)
class Scorer:
    rubrics: Rubrics

    def score(self, passage: Passage, question: Question, answer: str) -> Score:
        told = question.kind == "not_in_passage"
        ideas = [self.rubrics.not_told] if told else question.ideas
        words = readable(answer)
        # What-if ideas are written with their negations ("would not be pollinated"): read as written.
        negation = question.kind != "what_if" and not told
        found = [idea.name for idea in ideas if words and idea.found(answer, negation)]
        wrong = [m.name for m in question.misconceptions if words and m.found(answer, negation)]
        source = f"{passage.text} {question.question}"
        grounded = grounding(answer, source)
        if words:
            if wanders(answer, source, self.rubrics.min_grounding):
                wrong.append(WANDERS)
            if invents_figures(answer, source):
                wrong.append(INVENTS)
            if not told and self.rubrics.not_told.found(answer, negation=False) and not found:
                wrong.append(SAYS_NOT_TOLD)
            if negation and any(idea.denied(answer) for idea in ideas):
                wrong.append(DENIES)
        if words and repeats_itself(answer):
            wrong.append(REPEATS)
        needed = min(question.needed or len(ideas), len(ideas))
        raw = min(1.0, len(found) / needed) - self.rubrics.misconception_penalty * len(wrong)
        score = min(1.0, max(0.0, raw))
        return Score(
            title=passage.title,
            question=question.question,
            kind=question.kind,
            answer=answer,
            readable=words,
            grounding=grounded,
            ideas_found=found,
            ideas_missed=[idea.name for idea in ideas if idea.name not in found],
            misconceptions_found=wrong,
            score=score,
            passed=score >= self.rubrics.pass_mark and not wrong,
        )


# How a teacher labelled an answer, and what the label says of it.
Label = Literal["right", "partial", "wrong", "misconception", "off_topic", "empty", "not_told", "gibberish"]


class LabelledAnswer(BaseModel):
    title: str
    question: str
    answer: str
    label: Label
    teacher_passes: bool  # the teacher's verdict: good enough for a pupil
    source: str  # who wrote it: "written" (to cover a kind of answer) or the model and prompt that did


class LabelledAnswers(BaseModel):
    note: str
    answers: list[LabelledAnswer]


def load_labelled(path: Path = LABELLED) -> LabelledAnswers:
    return LabelledAnswers.model_validate(json.loads(path.read_text()))


class RubricResult(BaseModel):
    variant: str
    url: str
    model_kind: str | None
    model_description: str | None = None
    warning: str | None
    sampling: dict[str, float | int]
    mean_score: float
    pass_rate: float  # answers at or above the pass mark: the "acceptable answers" of the cost figure
    scores: list[Score]
