"""The passage budget on real tokens (the tiny stand-in's Qwen2.5 tokenizer): a long text is refused by its
length, or counted a piece at a time, without ever refusing one that fits; the rest is counted whole."""

from pathlib import Path

import pytest

from service.classroom.prompting import COUNTED_WHOLE_CHARS, Prompts
from service.errors import FarTooLong, PassageTooLong
from service.settings import ModelSettings, Settings
from tests.helpers import passage_text

pytestmark = pytest.mark.slow  # the stand-in's tokenizer, over long texts


@pytest.fixture(scope="module")
def prompts(model_dir: Path) -> Prompts:
    return Prompts.from_settings(Settings(model=ModelSettings(dir=model_dir)))


def test_the_longest_token_bounds_the_characters_a_passage_can_have(prompts: Prompts) -> None:
    longest = max(map(len, prompts.tokenizer.vocabulary()))
    assert longest == 128  # Qwen2.5's: a space and 127 dashes
    assert prompts.passage_max_chars == (prompts.passage_max_tokens + 1) * longest
    with pytest.raises(FarTooLong):
        prompts.check_passage("Long", "-" * (prompts.passage_max_chars + 1))


def fitting_long_text(prompts: Prompts, tokens_short_of_budget: int) -> str:
    """Over COUNTED_WHOLE_CHARS of long tokens (dashes, a few tokens a run of 127), then prose up to the budget."""
    filler = ("-" * 127 + " ") * (2 * COUNTED_WHOLE_CHARS // 128 + 20)
    text = filler
    for sentence in passage_text(20_000).split(". "):
        longer = f"{text}{sentence}. "
        if prompts.passage_tokens("Title", longer) > prompts.passage_max_tokens - tokens_short_of_budget:
            break
        text = longer
    return text


def test_a_long_text_that_fits_is_never_refused_by_its_pieces(prompts: Prompts) -> None:
    text = fitting_long_text(prompts, tokens_short_of_budget=1)
    assert len(text) > 2 * COUNTED_WHOLE_CHARS  # counted in pieces first, then whole
    assert prompts.check_passage("Title", text) == prompts.passage_tokens("Title", text)
    assert prompts.passage_max_tokens - 40 <= prompts.check_passage("Title", text) <= prompts.passage_max_tokens


def test_a_long_text_just_over_the_budget_is_told_how_much_to_cut(prompts: Prompts) -> None:
    text = fitting_long_text(prompts, tokens_short_of_budget=0) + passage_text(200)
    with pytest.raises(PassageTooLong) as raised:
        prompts.check_passage("Title", text)
    exact = prompts.passage_tokens("Title", text)
    assert raised.value.message.startswith("This passage is about") and "Please cut at least" in raised.value.message
    assert abs(raised.value.tokens - exact) <= 10 and 0 < raised.value.over < 400  # the pieces' sum, near the exact


def test_a_long_text_far_over_the_budget_is_counted_a_piece_at_a_time(prompts: Prompts) -> None:
    digits = "7 " * 200_000  # two tokens a pair, 400,000 in all: ~300 MiB counted at once, ~25 MiB a piece
    with pytest.raises(PassageTooLong) as raised:
        prompts.check_passage("Digits", digits)
    assert raised.value.tokens == 400_000 and f"at most {prompts.passage_max_tokens:,} tokens" in raised.value.message
