"""The quality set and its scorer, on their own (no model): the set is one a school would recognise, and the
scorer gives the teacher's verdict on answers a teacher labelled, including the real small model's own."""

import random
import re
from collections import Counter
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from loadtest.quality.lmeval import comprehension_docs, write_tasks
from loadtest.quality.rubric import Scorer, load_labelled, load_rubrics, readable

KINDS = {"one_sentence", "explain", "what_if", "word_meaning", "not_in_passage"}
# The goal is 90%; the keyword-and-grounding scorer reaches 88.0% over all 300 labelled answers (its rules
# set on the even half: 90.7% there, 85.3% on the odd half it never saw). What it misses is one invented detail
# beside a right idea ("they also eat snow"), which no keyword can see. This holds it where it is.
ACCURACY_FLOOR = 0.87


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
    scorer = Scorer(rubrics)
    assert {"right", "wrong", "misconception", "off_topic", "empty", "not_told"} <= {a.label for a in labelled.answers}
    assert any(a.source != "written" for a in labelled.answers)  # the real model's own answers are among them
    agree: Counter[str] = Counter()
    seen: Counter[str] = Counter()
    wrong = []
    for item in labelled.answers:
        passage, question = rubrics.find(item.title, item.question)
        verdict = scorer.score(passage, question, item.answer).passed
        seen[item.label] += 1
        if verdict == item.teacher_passes:
            agree[item.label] += 1
        else:
            wrong.append(f"{item.label}: {item.question} -> {item.answer[:80]!r}")
    accuracy = sum(agree.values()) / sum(seen.values())
    table = ", ".join(f"{label} {agree[label]}/{n}" for label, n in sorted(seen.items()))
    assert accuracy >= ACCURACY_FLOOR, f"{accuracy:.1%} ({table}); disagreements:\n" + "\n".join(wrong)


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
