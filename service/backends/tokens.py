"""Token counts exactly as the served model sees them: its tokenizer.json and its own chat template.

vLLM renders chat messages with the template in the model's tokenizer_config.json (through
transformers' sandboxed Jinja environment); this renders the same template the same way, so a prompt's
token count here equals vLLM's `usage.prompt_tokens`.
"""

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

ChatMessage = Mapping[str, object]

# Where a text splits into words whose token counts add up to the text's: before a single space between two
# other characters. A byte-level pre-tokenizer (Qwen's, GPT-2's) cuts there too: that space begins the next
# word's piece (or is one of its own), never ends the one before.
WORD_STARTS = re.compile(r"(?<=\S)(?= \S)")
# Words whose counts a process keeps (a class asks in the same few thousand; ~100 bytes each).
WORDS_KEPT = 50_000
# A text with more unseen words than this is counted whole (as fast as counting them one by one), and this
# many of them learned, so that a process's first questions, or a pupil typing nonsense, cost no more.
WORDS_LEARNED = 8


def _raise_exception(message: str) -> NoReturn:
    raise ValueError(message)


def _tojson(value: Any, indent: int | None = None) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent)


def load_chat_template(model_dir: Path) -> str:
    """Newer checkpoints keep the template in chat_template.jinja, older ones in tokenizer_config.json."""
    standalone = model_dir / "chat_template.jinja"
    if standalone.is_file():
        return standalone.read_text()
    config = json.loads((model_dir / "tokenizer_config.json").read_text())
    template = config.get("chat_template")
    if not isinstance(template, str):
        raise ValueError(f"{model_dir} has no chat template")
    return template


class ModelTokenizer:
    def __init__(self, tokenizer: Tokenizer, chat_template: str) -> None:
        self._tokenizer = tokenizer
        # The special tokens' spellings (`<|im_start|>`...): split out of any text before BPE, so text on
        # either side of one tokenises on its own.
        self.special_tokens = [t.content for t in tokenizer.get_added_tokens_decoder().values() if t.special]
        # The options transformers renders chat templates with; lenient about undefined names like it.
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        self._template = env.from_string(chat_template)
        described = json.loads(tokenizer.to_str())
        self._words_add_up = "ByteLevel" in json.dumps(described.get("pre_tokenizer")) and not any(
            re.search(r"\s", t.content) for t in tokenizer.get_added_tokens_decoder().values()
        )
        self._word_tokens: dict[str, int] = {}

    @classmethod
    def from_model_dir(cls, model_dir: Path) -> "ModelTokenizer":
        return cls(Tokenizer.from_file(str(model_dir / "tokenizer.json")), load_chat_template(model_dir))

    def encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def vocabulary(self) -> list[str]:
        """The tokens' own spellings (byte-level: a leading space is written "Ġ")."""
        return list(self._tokenizer.get_vocab())

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def count_words(self, text: str) -> int:
        """`count` of a short text (a question), added up from its words' counts, each word counted once and
        remembered: counting a whole question cost more CPU than anything else about it (benchmarks/results/
        gateway-issue25.md), and pupils ask in the same words. Exact (tests/test_token_counts.py)."""
        if not self._words_add_up:
            return self.count(text)
        words = WORD_STARTS.split(text)
        known = self._word_tokens
        unseen = [word for word in words if word not in known]
        if len(unseen) > WORDS_LEARNED:
            self._learn(unseen[:WORDS_LEARNED])
            return self.count(text)
        self._learn(unseen)
        return sum(known[word] for word in words)

    @property
    def words_known(self) -> int:
        return len(self._word_tokens)

    def _learn(self, words: list[str]) -> None:
        if len(self._word_tokens) + len(words) > WORDS_KEPT:
            self._word_tokens.clear()
        for word in words:
            self._word_tokens[word] = self.count(word)

    def count_long(self, text: str) -> int:
        """`count` for a text of any length, in a worker thread: `encode_batch` lets go of the GIL while it
        works (`encode` holds it, and a megabyte of text would hold the event loop for half a second)."""
        (encoding,) = self._tokenizer.encode_batch([text], add_special_tokens=False)
        return len(encoding.ids)

    def render_chat(self, messages: Sequence[ChatMessage]) -> str:
        """The prompt text vLLM builds for these messages, ending with the assistant's turn."""
        return self._template.render(messages=list(messages), add_generation_prompt=True, tools=None)

    def chat_ids(self, messages: Sequence[ChatMessage]) -> list[int]:
        return self.encode(self.render_chat(messages))
