"""Chat messages for one question, and the token budget that decides how long a passage may be.

The layout is what makes prefix caching work for a class: the system message holds the fixed
instructions and then the passage, byte-identical for every pupil; the question comes last, in the
user message. Nothing pupil-specific (name, time, question) stands before the passage. prompts/README.md
says why, and tests/test_prompt_layout.py holds the layout to it.
"""

from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from openai.types.chat import ChatCompletionMessageParam

from service.errors import InvalidInput, PassageTooLong, QuestionTooLong
from service.settings import Settings
from service.tokens import ModelTokenizer


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
    ) -> None:
        env = Environment(loader=FileSystemLoader(templates_dir), undefined=StrictUndefined, autoescape=False)
        self._system = env.get_template("system.j2")
        self._question = env.get_template("question.j2")
        self.tokenizer = tokenizer
        self.question_max_chars = question_max_chars
        self.question_max_tokens = question_max_tokens
        # Tokens of the whole chat prompt around an empty passage and an empty question.
        self.overhead_tokens = len(tokenizer.chat_ids(self.messages("", "", "")))
        self.passage_max_tokens = max_model_len - answer_max_tokens - question_max_tokens - self.overhead_tokens
        if self.passage_max_tokens <= 0:
            raise ValueError("max_model_len leaves no room for a passage: raise it or lower the answer budget")

    @classmethod
    def from_settings(cls, settings: Settings, model_dir: Path | None = None) -> "Prompts":
        """The service's templates and budget, with the tokenizer and chat template of `model_dir` (default:
        the settings' model folder)."""
        return cls(
            settings.prompts_dir,
            ModelTokenizer.from_model_dir(model_dir or settings.model.dir),
            max_model_len=settings.backend.max_model_len,
            answer_max_tokens=settings.answer.max_tokens,
            question_max_chars=settings.limits.question_max_chars,
            question_max_tokens=settings.limits.question_max_tokens,
        )

    def system_message(self, title: str, text: str) -> str:
        return self._system.render(title=title, text=text)

    def question_message(self, question: str) -> str:
        return self._question.render(question=question)

    def messages(self, title: str, text: str, question: str) -> list[ChatCompletionMessageParam]:
        return self.chat(self.system_message(title, text), question)

    def chat(self, system_message: str, question: str) -> list[ChatCompletionMessageParam]:
        """The messages of one question, its passage's system message already rendered."""
        return [
            {"role": "system", "content": system_message},
            {"role": "user", "content": self.question_message(question)},
        ]

    def passage_tokens(self, title: str, text: str) -> int:
        """What this passage adds to every prompt of the class, in the served model's tokens."""
        return len(self.tokenizer.chat_ids(self.messages(title, text, ""))) - self.overhead_tokens

    def check_passage(self, title: str, text: str) -> int:
        if not title.strip():
            raise InvalidInput("Please give the passage a title.")
        if not text.strip():
            raise InvalidInput("The passage is empty. Please paste the text pupils should read.")
        tokens = self.passage_tokens(title, text)
        if tokens > self.passage_max_tokens:
            raise PassageTooLong(tokens, self.passage_max_tokens)
        return tokens

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
        tokens = self.tokenizer.count(question)
        if tokens > self.question_max_tokens:
            raise QuestionTooLong(tokens, self.question_max_tokens)
