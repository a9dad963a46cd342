"""The layout that lets a class share one cached passage: passage first, byte-identical, question last."""

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.classroom.prompting import Prompts
from service.errors import InvalidInput, PassageTooLong, QuestionTooLong
from service.settings import AnswerSettings, ModelSettings, Settings

pytestmark = pytest.mark.slow  # the real small model converted, both tokenizers loaded

text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=0, max_size=300)


@pytest.fixture(scope="module", params=["stand-in", "small real model"])
def prompts(request: pytest.FixtureRequest, model_dir: Path) -> Prompts:
    """Each model's own tokenizer and chat template: Qwen2.5's (the stand-in's) and SmolLM2-135M's, each with a
    default system message of its own that ours must replace."""
    folder = model_dir if request.param == "stand-in" else request.getfixturevalue("small_model_dir")
    return Prompts.from_settings(Settings(model=ModelSettings(dir=folder)))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(title=text, passage=text, first=text, second=text)
def test_two_questions_on_one_passage_share_the_whole_passage_part(
    prompts: Prompts, title: str, passage: str, first: str, second: str
) -> None:
    tokenizer = prompts.tokenizer
    a = tokenizer.chat_ids(prompts.messages(title, passage, first))
    b = tokenizer.chat_ids(prompts.messages(title, passage, second))
    # The passage part: the whole system turn, which ends in a special token, so what follows it
    # cannot change how it is tokenized.
    system_turn = tokenizer.encode(tokenizer.render_chat([prompts.messages(title, passage, "")[0]]))
    shared = system_turn[: -len(tokenizer.encode("<|im_start|>assistant\n"))]
    assert a[: len(shared)] == shared
    assert b[: len(shared)] == shared
    assert passage in tokenizer.render_chat(prompts.messages(title, passage, first)).split("<|im_start|>user")[0]


def test_nothing_pupil_specific_stands_before_the_passage(prompts: Prompts) -> None:
    rendered = prompts.tokenizer.render_chat(prompts.messages("Bees", "PASSAGE-TEXT", "QUESTION-TEXT"))
    assert rendered.index("PASSAGE-TEXT") < rendered.index("QUESTION-TEXT")
    # Our own system message replaces the model's default one (Qwen's, SmolLM's), so the instructions are the
    # same for every class.
    assert "You are Qwen" not in rendered and "SmolLM" not in rendered


def test_passage_over_the_budget_is_refused_with_the_tokens_to_cut(prompts: Prompts) -> None:
    limit = prompts.passage_max_tokens
    assert prompts.check_passage("Bees", "bee " * (limit - 10)) <= limit
    with pytest.raises(PassageTooLong) as refused:
        prompts.check_passage("Bees", "bee " * (limit + 50))
    assert refused.value.over == refused.value.tokens - limit > 0
    assert f"cut at least {refused.value.over:,} tokens" in refused.value.message


def test_question_limits(prompts: Prompts) -> None:
    with pytest.raises(InvalidInput, match="Please type a question"):
        prompts.check_question("   ")
    with pytest.raises(InvalidInput, match="too long"):
        prompts.check_question("a" * (prompts.question_max_chars + 1))
    with pytest.raises(QuestionTooLong):
        prompts.check_question("🐝" * (prompts.question_max_chars // 2))


def test_the_default_layout_is_the_documented_one(prompts: Prompts) -> None:
    assert Settings().answer.prompt_layout == prompts.layout == "passage_first"
    instructions = (Settings().prompts_dir / "instructions.j2").read_text().strip()
    assert prompts.tokenizer.render_chat(prompts.messages("Bees", "PASSAGE-TEXT", "QUESTION-TEXT")) == (
        f"<|im_start|>system\n{instructions}\n\nPassage: Bees\n\nPASSAGE-TEXT<|im_end|>\n"
        "<|im_start|>user\nQUESTION-TEXT<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.fixture(scope="module")
def question_first(model_dir: Path) -> Prompts:
    return Prompts.from_settings(
        Settings(model=ModelSettings(dir=model_dir), answer=AnswerSettings(prompt_layout="question_first"))
    )


def test_question_first_puts_the_question_before_the_passage(question_first: Prompts) -> None:
    system, user = question_first.messages("Bees", "PASSAGE-TEXT", "QUESTION-TEXT")
    assert "PASSAGE-TEXT" not in str(system["content"])  # the instructions alone
    rendered = question_first.tokenizer.render_chat([system, user])
    assert rendered.index("reading assistant") < rendered.index("QUESTION-TEXT") < rendered.index("PASSAGE-TEXT")
    assert user["content"] == "QUESTION-TEXT\n\nPassage: Bees\n\nPASSAGE-TEXT"


def shared_prefix(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def test_passage_first_pupils_share_the_passage_and_question_first_pupils_only_the_instructions(
    prompts: Prompts, question_first: Prompts
) -> None:
    passage = "Bees live in hives. " * 40
    questions = ["Why do bees dance?", "What is pollen?"]
    shared = {}
    for layout in (prompts, question_first):
        a, b = (layout.tokenizer.chat_ids(layout.messages("Bees", passage, q)) for q in questions)
        shared[layout.layout] = shared_prefix(a, b)
    tokenizer = prompts.tokenizer
    instructions_turn = tokenizer.chat_ids([question_first.messages("Bees", passage, "")[0]])
    opening = len(instructions_turn) - len(tokenizer.encode("<|im_start|>assistant\n"))  # the system turn
    # Question first: the system turn with the instructions, the user turn's opening, then they part.
    assert shared["question_first"] == opening + len(tokenizer.encode("<|im_start|>user\n"))
    assert shared["passage_first"] >= shared["question_first"] + prompts.passage_tokens("Bees", passage)
