"""A question's tokens counted word by word (`ModelTokenizer.count_words`, each word's count remembered) are
exactly what the tokenizer counts for the whole question, on both models' tokenizers: Qwen2.5's (the
stand-in's) and SmolLM2's, whatever the text holds (spaces of every kind, line breaks, digits, punctuation,
contractions, accents, CJK, emoji, the models' own special tokens)."""

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.backends.tokens import WORDS_LEARNED, ModelTokenizer

pytestmark = pytest.mark.slow  # both tokenizers, 1,500 texts each

PIECES = st.sampled_from(
    [
        " ", "  ", "\n", "\r\n", "\t", "\u00a0", "\u3000", " \n", ".", ",", "?!", "'s", "'LL", "-", '"', "(", "0", "42",
        "why", "Why", "river", "éte", "naïve", "e\u0301", "ß", "中文", "日本語", "😀", "<|im_start|>", "<|endoftext|>",
    ]
)  # fmt: skip
TEXTS = st.lists(st.one_of(PIECES, st.text(max_size=4)), max_size=40).map("".join)


@pytest.fixture(scope="module", params=["stand-in (Qwen2.5)", "SmolLM2"])
def tokenizer(request: pytest.FixtureRequest) -> ModelTokenizer:
    fixture = "model_dir" if request.param.startswith("stand-in") else "small_model_dir"
    model_dir: Path = request.getfixturevalue(fixture)
    return ModelTokenizer.from_model_dir(model_dir)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=TEXTS)
def test_counted_word_by_word_a_text_has_exactly_the_tokenizers_count(tokenizer: ModelTokenizer, text: str) -> None:
    assert tokenizer.count_words(text) == tokenizer.count(text)
    assert tokenizer.count_words(text) == tokenizer.count(text)  # again, from the words it remembered


def test_a_text_of_many_unseen_words_is_counted_whole_and_a_few_of_them_learned_each_time(model_dir: Path) -> None:
    tokenizer = ModelTokenizer.from_model_dir(model_dir)
    text = " ".join(f"w{i}x" for i in range(3 * WORDS_LEARNED))
    for time in (1, 2, 3, 4):
        assert tokenizer.count_words(text) == tokenizer.count(text)
        assert tokenizer.words_known == min(time, 3) * WORDS_LEARNED
