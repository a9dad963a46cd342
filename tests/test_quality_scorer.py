"""The quality set and its scorer, on their own (no model): the set is one a school would recognise, and the
scorer gives the teacher's verdict on answers a teacher labelled, including the real small model's own."""

import random
import re
from collections import Counter
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from loadtest.quality.judge import messages, parse
from loadtest.quality.lmeval import comprehension_docs, write_tasks
from loadtest.quality.rubric import Scorer, load_labelled, load_rubrics, readable
from loadtest.quality.scorer_check import check, load_adversarial
from tests.figures import report

KINDS = {"one_sentence", "explain", "what_if", "word_meaning", "not_in_passage"}
# What the scorer reaches, on the passages its rules were tuned on and on the held-out ones it never saw
# (`classroom loadtest quality scorer` prints the table): these hold it there. The goals are higher (issue 40:
# kappa >= 0.8 held out, and at most 1 in 20 wrong answers passed or right ones failed on the adversarial set).
LABELLED_HELD_OUT_KAPPA = 0.70  # 0.71 with the H200 answers labelled (330 held out); 0.80 on the first 150
ADVERSARIAL_WRONG_PASSED = {"tuning": 70, "held_out": 55}  # of 195 each
ADVERSARIAL_RIGHT_FAILED = {"tuning": 44, "held_out": 54}  # of 130 each


def test_the_set_is_a_school_s() -> None:
    rubrics = load_rubrics()
    assert len(rubrics.passages) >= 12
    subjects = Counter(p.subject for p in rubrics.passages)
    assert set(subjects) == {"science", "history", "geography", "story", "poem"}, subjects
    scorer = Scorer(rubrics)
    for passage in rubrics.passages:
        assert {q.kind for q in passage.questions} == KINDS and len(passage.questions) == 5, passage.title
        for q in passage.questions:
            for rule in [*q.ideas, *q.misconceptions]:
                for pattern in rule.any:
                    re.compile(pattern)
            # The right choice of the multiple-choice item earns credit; the misconception among the others not.
            assert scorer.score(passage, q, q.choices[0]).passed, (passage.title, q.question, q.choices[0])
            assert (q.kind == "not_in_passage") == (q.ideas == [])


def test_the_scorer_gives_the_teacher_s_verdict_on_labelled_answers() -> None:
    rubrics, labelled = load_rubrics(), load_labelled()
    assert {"right", "wrong", "misconception", "off_topic", "empty", "not_told"} <= {a.label for a in labelled.answers}
    assert any(a.source != "written" for a in labelled.answers)  # the real model's own answers are among them
    parts = check(rubrics)["labelled"]
    for part, figures in parts.items():
        report(f"scorer against the labels, {part} passages", figures.model_dump(exclude={"by_kind"}))
    held_out = parts["held_out"]
    assert held_out.kappa is not None and held_out.kappa >= LABELLED_HELD_OUT_KAPPA, held_out
    # Above failing everything (92.4% against 83.3% since the H200 answers, most of which fail, were labelled).
    assert held_out.agreement > held_out.always_fail + 0.05, held_out


def test_answers_written_to_fool_a_keyword_scorer_are_held_where_they_are() -> None:
    """The adversarial set (loadtest/quality/adversarial.json): negated ideas, wrong numbers, invented details,
    copied sentences, half answers, contradictions, misconceptions; and right answers, plain and in a pupil's own
    words. Each part no worse than measured; both parts are split by passage like the labels."""
    written = load_adversarial()
    assert len(written.answers) >= 100
    rubrics = load_rubrics()
    parts = {p.title: p.part for p in rubrics.passages}
    assert {a.title for a in written.answers if parts[a.title] == "held_out"} == set(written.held_out)
    for part, figures in check(rubrics)["adversarial"].items():
        report(f"scorer on the adversarial answers, {part} passages", figures.model_dump())
        assert figures.wrong_passed <= ADVERSARIAL_WRONG_PASSED[part], figures
        assert figures.right_failed <= ADVERSARIAL_RIGHT_FAILED[part], figures


BEES = "The honeybee"


@pytest.mark.parametrize(
    ("question", "answer", "passes"),
    [
        ("Why do bees visit flowers?", "They go to flowers to collect nectar, which they turn into honey.", True),
        ("Why do bees visit flowers?", "They don't collect nectar there, and they never make honey from it.", False),
        ("Why do bees visit flowers?", "To collect nectar, which does not stay nectar: they turn it into honey.", True),
        ("Why do bees visit flowers?", "To collect nectar.", False),  # half of a two-idea answer
        ("Why do bees visit flowers?", "They collect nectar for eleven days and turn it into honey.", False),
        ("Why do bees visit flowers?", "Every autumn they collect nectar and turn it into honey.", False),
        ("How long does a worker bee live?", "The passage does not say.", True),
        ("How long does a worker bee live?", "The passage does not say, but about six weeks.", False),
        ("What would happen to an apple orchard if there were no bees?",
         "The blossoms would not be pollinated, so there would be fewer apples.", True),
    ],
)  # fmt: skip
def test_negation_quantities_and_half_answers(question: str, answer: str, passes: bool) -> None:
    """Each failure class held with an answer written for it here: a negated idea earns nothing and fails the
    answer, a figure or season the passage does not give fails it, a half answer fails; what-if answers keep the
    negations their ideas are made of."""
    rubrics = load_rubrics()
    passage, q = rubrics.find(BEES, question)
    score = Scorer(rubrics).score(passage, q, answer)
    assert score.passed is passes, score


def test_an_empty_or_unreadable_answer_earns_nothing() -> None:
    rubrics = load_rubrics()
    scorer = Scorer(rubrics)
    bees = rubrics.passages[0]
    pollination = next(q for q in bees.questions if q.question == "What is pollination?")
    assert scorer.score(bees, pollination, "").score == 0
    noise = "pollen 的 seedsISTR другой flower的 ...\u00a0AndUpdate зай"
    assert not readable(noise) and scorer.score(bees, pollination, noise).score == 0
    told = scorer.score(bees, pollination, "The passage does not say what pollination is.")
    assert not told.passed  # it does say: saying it does not is no answer
    (unanswerable,) = [q for q in bees.questions if q.kind == "not_in_passage"]
    assert scorer.score(bees, unanswerable, "The passage does not tell us that, sorry.").passed


def test_what_random_weights_write_is_not_read_as_words(model_dir: Path) -> None:
    """A random-weight model's answer is a walk over its whole vocabulary: 1,000 such answers, none readable."""
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    draw = random.Random(0)
    vocabulary = tokenizer.get_vocab_size(with_added_tokens=False)
    answers = [tokenizer.decode([draw.randrange(vocabulary) for _ in range(draw.randint(16, 64))]) for _ in range(1000)]
    read = [a for a in answers if readable(a)]
    assert read == []


def test_lm_eval_s_local_tasks_are_the_rubric_questions(tmp_path: Path) -> None:
    rubrics = load_rubrics()
    docs = comprehension_docs(rubrics)
    assert len(docs) == sum(len(p.questions) for p in rubrics.passages)
    places = Counter(d["answer"] for d in docs)
    assert len(places) == 4  # the right answer is not always first
    for doc, q in zip(docs, [q for p in rubrics.passages for q in p.questions], strict=True):
        assert doc["choices"][doc["answer"]] == q.choices[0]  # type: ignore[index]
    folder = write_tasks(rubrics, tmp_path)
    assert {p.name for p in folder.iterdir()} >= {"classroom_passages.yaml", "classroom_comprehension.yaml"}


@pytest.mark.parametrize("label", ["empty"])
def test_labels_say_what_they_mean(label: str) -> None:
    assert all(not a.teacher_passes for a in load_labelled().answers if a.label == label)


def test_a_judge_s_reply_is_read_for_its_verdict_and_its_prompt_carries_the_teacher_s_note() -> None:
    assert (parse("PASS"), parse("fail."), parse("Verdict: Pass"), parse("The answer is good")) == (
        True,
        False,
        True,
        None,
    )
    rubrics = load_rubrics()
    bees, pollination = rubrics.find("The honeybee", "What is pollination?")
    said = messages(bees, pollination, "Bees carry pollen.")[1]["content"]
    assert pollination.teacher_note in said and bees.text in said and "Bees carry pollen." in said
