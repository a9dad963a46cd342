"""The prompt of one question, the request that carries it to vLLM, and the token budget that decides how
long a passage may be.

The layout is what makes prefix caching work for a class: the system message holds the fixed
instructions and then the passage, byte-identical for every pupil; the question comes last, in the
user message. Nothing pupil-specific (name, time, question) stands before the passage. prompts/README.md
says why, and tests/test_prompt_layout.py holds the layout to it. The `question_first` layout, the
question ahead of the passage, exists only to measure what that buys.

A prompt goes to vLLM as chat messages, or (`backend.prompt_format: token_ids`) as the very token ids
vLLM would make of them: the passage's prefix is rendered and tokenised once per passage, up to and
including the special token that opens the user turn, and each question tokenises only the rest. A
special token is split out of the text before BPE sees it, so the two parts tokenise independently;
tests/test_token_prompts.py proves the ids equal the chat's.
"""

import secrets
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import orjson
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from openai.types.chat import ChatCompletionMessageParam

from service.backends.tokens import ModelTokenizer
from service.errors import FarTooLong, InvalidInput, PassageTooLong, QuestionTooLong
from service.settings import PromptFormat, PromptLayout, Settings

# Passages whose token prefix one process keeps, the least recently asked about going first: the active
# passages of a few hundred classes, each ~6 bytes a token (kept as the JSON the request carries).
PREFIXES_KEPT = 256


# A passage longer than this is first counted a piece of about this size at a time (`Prompts._count_in_pieces`);
# a cut between pieces, made at a space, changes their sum by a few tokens at most.
COUNTED_WHOLE_CHARS = 32_000
TOKENS_A_CUT_ADDS = 64


def _piece_end(text: str, start: int) -> int:
    """Where the piece of `text` from `start` ends: at most COUNTED_WHOLE_CHARS on, before a space if one is near."""
    end = start + COUNTED_WHOLE_CHARS
    if end >= len(text):
        return len(text)
    space = text.rfind(" ", end - 1000, end)
    return space if space > start else end


@dataclass(frozen=True, slots=True)
class TokenPrefix:
    """A passage's prompt in token ids, split where the question's part begins."""

    # The ids up to and including the special token that opens the user turn, as JSON, each with the comma
    # that follows it in the request's list ("1,2,3,").
    ids_json: bytes
    # The rendered text around the question in the rest of the prompt (for passage_first "user\n" and
    # "<|im_end|>\n<|im_start|>assistant\n"): tokenised with each question.
    head: str
    tail: str

    @property
    def ids(self) -> list[int]:
        ids: list[int] = orjson.loads(b"[" + self.ids_json.removesuffix(b",") + b"]")
        return ids


class Prompts:
    def __init__(
        self,
        templates_dir: Path,
        tokenizer: ModelTokenizer,
        *,
        max_model_len: int,
        answer_max_tokens: int,
        question_max_chars: int,
        question_max_tokens: int,
        layout: PromptLayout = "passage_first",
        prompt_format: PromptFormat = "chat",
    ) -> None:
        env = Environment(loader=FileSystemLoader(templates_dir), undefined=StrictUndefined, autoescape=False)
        self._system = env.get_template("system.j2")
        self._question = env.get_template("question.j2")
        self._passage = env.get_template("passage.j2")
        self._question_first = env.get_template("question_first.j2")
        self._instructions = env.get_template("instructions.j2").render()
        self.layout = layout
        self.prompt_format = prompt_format
        self.tokenizer = tokenizer
        self._prefixes: OrderedDict[str, TokenPrefix] = OrderedDict()
        # Stands for the question while a passage's prefix is found; no passage holds it.
        self._placeholder = f"\x00{secrets.token_hex(8)}\x00"
        self.question_max_chars = question_max_chars
        self.question_max_tokens = question_max_tokens
        # Tokens of the whole chat prompt around an empty passage and an empty question.
        self.overhead_tokens = len(tokenizer.chat_ids(self.messages("", "", "")))
        self.passage_max_tokens = max_model_len - answer_max_tokens - question_max_tokens - self.overhead_tokens
        if self.passage_max_tokens <= 0:
            raise ValueError("max_model_len leaves no room for a passage: raise it or lower the answer budget")
        # No token spells more characters than the vocabulary's longest (128 in Qwen2.5's), so text longer than
        # this is longer than any passage, uncounted: reading an uploaded document stops there.
        self.passage_max_chars = (self.passage_max_tokens + 1) * max(map(len, tokenizer.vocabulary()))

    @classmethod
    def from_settings(cls, settings: Settings, model_dir: Path | None = None) -> "Prompts":
        """The service's templates and budget, with the tokenizer and chat template of `model_dir` (default:
        the settings' model folder), within the model's context length."""
        folder = model_dir or settings.model.dir
        return cls(
            settings.prompts_dir,
            ModelTokenizer.from_model_dir(folder),
            max_model_len=settings.context_length(folder),
            answer_max_tokens=settings.answer.max_tokens,
            question_max_chars=settings.limits.question_max_chars,
            question_max_tokens=settings.limits.question_max_tokens,
            layout=settings.answer.prompt_layout,
            prompt_format=settings.backend.prompt_format,
        )

    def system_message(self, title: str, text: str) -> str:
        """The passage's part of every prompt, rendered once per passage (the class cache keeps it): in the
        passage_first layout the system message, instructions and passage; in question_first the passage
        block that follows the question."""
        if self.layout == "question_first":
            return self._passage.render(title=title, text=text)
        return self._system.render(title=title, text=text)

    def question_message(self, question: str) -> str:
        return self._question.render(question=question)

    def messages(self, title: str, text: str, question: str) -> list[ChatCompletionMessageParam]:
        return self.chat(self.system_message(title, text), question)

    def chat(self, system_message: str, question: str) -> list[ChatCompletionMessageParam]:
        """The messages of one question, its passage's part (`system_message`) already rendered."""
        if self.layout == "question_first":
            return [
                {"role": "system", "content": self._instructions},
                {"role": "user", "content": self._question_first.render(question=question, passage=system_message)},
            ]
        return [
            {"role": "system", "content": system_message},
            {"role": "user", "content": self.question_message(question)},
        ]

    def request_body(
        self, system_message: str, question: str, *, model: str, sampling: Mapping[str, float | int]
    ) -> bytes:
        """The JSON body of one question's streamed request: chat messages for /v1/chat/completions, or
        token ids for /v1/completions (`ReplicaHttp.open_answer` posts to the one that goes with the format)."""
        if self.prompt_format == "chat":
            return orjson.dumps(
                {
                    "model": model,
                    "messages": self.chat(system_message, question),
                    **sampling,
                    "stream": True,
                    "stream_options": {"include_usage": True},
                }
            )
        prefix = self.token_prefix(system_message)
        rest = orjson.dumps(self.question_ids(prefix, question))
        options = orjson.dumps(
            {
                "model": model,
                **sampling,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
        )
        # {...options, "prompt": [the prefix's ids, the rest's]}; the rest is never empty (it ends the turn).
        return b"".join((options[:-1], b',"prompt":[', prefix.ids_json, rest[1:], b"}"))

    def token_prefix(self, system_message: str) -> TokenPrefix:
        """The passage's prompt prefix in token ids, tokenised the first time a question asks for it."""
        prefix = self._prefixes.get(system_message)
        if prefix is not None:
            self._prefixes.move_to_end(system_message)
            return prefix
        prefix = self._split(system_message)
        self._prefixes[system_message] = prefix
        if len(self._prefixes) > PREFIXES_KEPT:
            self._prefixes.popitem(last=False)
        return prefix

    def question_ids(self, prefix: TokenPrefix, question: str) -> list[int]:
        """The ids that follow `prefix` in the prompt of `question`."""
        return self.tokenizer.encode(prefix.head + question + prefix.tail)

    def _split(self, system_message: str) -> TokenPrefix:
        rendered = self.tokenizer.render_chat(self.chat(system_message, self._placeholder))
        if rendered.count(self._placeholder) != 1:
            raise ValueError("the chat template does not hold the question exactly once")
        at = rendered.index(self._placeholder)
        # Right after the last special token before the question (the `<|im_start|>` of the user turn).
        split = 0
        for token in self.tokenizer.special_tokens:
            found = rendered.rfind(token, 0, at)
            if found >= 0:
                split = max(split, found + len(token))
        tail = rendered[at + len(self._placeholder) :]
        if not tail:
            raise ValueError("the chat template ends the prompt with the question: no turn for the answer")
        ids = self.tokenizer.encode(rendered[:split])
        return TokenPrefix(ids_json=b"".join(b"%d," % i for i in ids), head=rendered[split:at], tail=tail)

    def passage_tokens(self, title: str, text: str) -> int:
        """What this passage adds to every prompt of the class, in the served model's tokens."""
        return (
            self.tokenizer.count_long(self.tokenizer.render_chat(self.messages(title, text, ""))) - self.overhead_tokens
        )

    def check_passage(self, title: str, text: str) -> int:
        if not title.strip():
            raise InvalidInput("Please give the passage a title.")
        if not text.strip():
            raise InvalidInput("The passage is empty. Please paste the text pupils should read.")
        if len(title) + len(text) > self.passage_max_chars:
            raise FarTooLong(self.passage_max_tokens)
        if len(text) > COUNTED_WHOLE_CHARS:
            counted, cuts = self._count_in_pieces(text)
            if counted > self.passage_max_tokens + cuts * TOKENS_A_CUT_ADDS:
                raise PassageTooLong(counted, self.passage_max_tokens, about=True)
        # Short, or long in characters but within the budget in tokens: counted whole, as the prompt will be.
        tokens = self.passage_tokens(title, text)
        if tokens > self.passage_max_tokens:
            raise PassageTooLong(tokens, self.passage_max_tokens)
        return tokens

    def _count_in_pieces(self, text: str) -> tuple[int, int]:
        """A long text's tokens counted a piece at a time, so that memory follows the piece, not the text (a
        tokenizer holds ~0.8 KB a token while it works: 460,000 characters of digits would be 350 MiB at once);
        and how many cuts between pieces that sum counts across."""
        counted, start, cuts = 0, 0, -1
        while start < len(text):
            end = _piece_end(text, start)
            counted += self.tokenizer.count_long(text[start:end])
            start, cuts = end, cuts + 1
        return counted, cuts

    def check_question(self, question: str) -> None:
        if not question.strip():
            raise InvalidInput("Please type a question before you send it.")
        if len(question) > self.question_max_chars:
            raise InvalidInput(
                f"Your question is too long ({len(question)} letters; the most is {self.question_max_chars}). "
                "Please ask it in fewer words."
            )
        # Every token is at least one byte of UTF-8: a question of no more bytes than the budget fits without
        # being counted (most do), and counting costs more than anything else about a question.
        if len(question.encode()) <= self.question_max_tokens:
            return
        tokens = self.tokenizer.count_words(question)
        if tokens > self.question_max_tokens:
            raise QuestionTooLong(tokens, self.question_max_tokens)
