"""Workloads: the requests a run sends, built with the served model's own tokenizer and chat template.

- synthetic: prompts of exactly P tokens after the chat template (vLLM's usage.prompt_tokens), outputs of
  exactly O tokens (ignore_eos with min_tokens = max_tokens), every prompt different from the start;
- classroom: C classes of N pupils, each class one passage of exactly L tokens placed first (the service's
  own prompt layout, service/classroom/prompting.py); each class asks as a burst (every pupil at once, when the
  teacher says "now ask"), then as a trickle of single questions;
- seed: the bee passage and its two questions, a smoke test.

A workload also makes its warm-up requests: the same shapes with other random text (and, for classroom,
other passages), so the warm-up never puts the measured prompts into the prefix cache.
"""

import json
import random
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from loadtest.results import ClassInfo, WorkloadKind
from service.backends.tokens import ModelTokenizer
from service.classroom.prompting import Prompts

DATA = Path(__file__).with_name("data")
# Words that are one token with their leading space ("Ġword" in the vocabulary): text made of them has
# exactly one token per word, whatever the neighbours, so a prompt can be cut to an exact length.
WORD = re.compile(r"^ [a-z]{3,12}$")


@dataclass(frozen=True)
class Seed:
    title: str
    text: str
    questions: list[str]
    class_questions: list[str]


def seed_data() -> Seed:
    return Seed(**json.loads((DATA / "seed.json").read_text()))


@dataclass
class RequestSpec:
    index: int
    messages: list[dict[str, str]]
    prompt_tokens: int  # after the chat template, as vLLM counts it
    group: str | None = None  # the class
    question: str | None = None  # what a pupil types (the pupil API builds the prompt itself)
    pupil: int | None = None


@dataclass
class ClassSpec:
    group: str
    title: str
    text: str
    passage_tokens: int
    pupils: int


@dataclass
class Workload:
    kind: WorkloadKind
    # Arrivals in order: each is one request, or several sent together (a class's burst).
    arrivals: list[list[RequestSpec]]
    warmup: list[RequestSpec]
    output_tokens: int
    ignore_eos: bool
    temperature: float
    prompt_tokens: int | None = None
    classes: list[ClassSpec] = field(default_factory=list)
    trickle_per_class: int = 0
    warmup_class: ClassSpec | None = None  # the warm-up's own passage (classroom)

    @property
    def size(self) -> int:
        return sum(len(a) for a in self.arrivals)

    def class_infos(self) -> list[ClassInfo]:
        return [
            ClassInfo(group=c.group, title=c.title, passage_tokens=c.passage_tokens, pupils=c.pupils)
            for c in self.classes
        ]

    def body(self, spec: RequestSpec, model: str) -> dict[str, Any]:
        """The chat-completions request for vLLM's OpenAI API."""
        body: dict[str, Any] = {
            "model": model,
            "messages": spec.messages,
            "max_tokens": self.output_tokens,
            "temperature": self.temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.ignore_eos:  # vLLM's extra sampling parameters: exactly O tokens
            body |= {"ignore_eos": True, "min_tokens": self.output_tokens}
        return body


class TextMaker:
    """Random text of an exact token count, from one-token words of the model's own vocabulary."""

    def __init__(self, tokenizer: ModelTokenizer) -> None:
        self.tokenizer = tokenizer

    @cached_property
    def words(self) -> list[str]:
        # Byte-level BPE writes a leading space as "Ġ" in the vocabulary.
        candidates = sorted(" " + key[1:] for key in self.tokenizer.vocabulary() if key.startswith("Ġ"))
        return [
            w for w in candidates if WORD.match(w) and self.tokenizer.count(w) == 1 and self.tokenizer.count(w[1:]) == 1
        ]

    def text(self, rng: random.Random, tokens: int) -> str:
        """`tokens` tokens of words; the first word has no leading space and is one token too."""
        if tokens <= 0:
            return ""
        return "".join(rng.choice(self.words) for _ in range(tokens)).lstrip()


def synthetic_messages(maker: TextMaker, rng: random.Random, prompt_tokens: int) -> list[dict[str, str]]:
    """One user message whose prompt is exactly `prompt_tokens` after the chat template (which, without a
    system message, puts Qwen's default one first)."""
    overhead = len(maker.tokenizer.chat_ids([{"role": "user", "content": ""}]))
    if prompt_tokens <= overhead:
        raise ValueError(f"a prompt needs more than the chat template's own {overhead} tokens")
    messages = [{"role": "user", "content": maker.text(rng, prompt_tokens - overhead)}]
    counted = len(maker.tokenizer.chat_ids(messages))
    if counted != prompt_tokens:  # never expected: one-token words stay one token each
        raise AssertionError(f"made a {counted}-token prompt instead of {prompt_tokens}")
    return messages


def synthetic(
    tokenizer: ModelTokenizer, *, prompt_tokens: int, output_tokens: int, requests: int, warmup: int, seed: int
) -> Workload:
    maker = TextMaker(tokenizer)
    rng = random.Random(seed)
    warm_rng = random.Random(f"warmup-{seed}")  # other words: the warm-up shares no prefix with the run

    def spec(i: int, r: random.Random) -> RequestSpec:
        return RequestSpec(index=i, messages=synthetic_messages(maker, r, prompt_tokens), prompt_tokens=prompt_tokens)

    return Workload(
        kind="synthetic",
        arrivals=[[spec(i, rng)] for i in range(requests)],
        warmup=[spec(i, warm_rng) for i in range(warmup)],
        output_tokens=output_tokens,
        ignore_eos=True,
        temperature=0.0,
        prompt_tokens=prompt_tokens,
    )


def passage_of(prompts: Prompts, maker: TextMaker, rng: random.Random, title: str, tokens: int) -> str:
    """Prose (the seed passage's sentences, shuffled, after a random opening) cut to exactly `tokens`
    passage tokens as the service counts them (title included), topped up with one-token words."""
    seed = seed_data()
    sentences = re.split(r"(?<=\.) ", seed.text)
    opening = maker.text(rng, 4).capitalize() + "."
    parts = [opening]
    while prompts.passage_tokens(title, " ".join(parts)) < tokens:
        parts.append(rng.choice(sentences))
    words = " ".join(parts).split(" ")
    while words and prompts.passage_tokens(title, " ".join(words)) > tokens:
        words.pop()
    text = " ".join(words)
    while prompts.passage_tokens(title, text) < tokens:
        text += rng.choice(maker.words)
    counted = prompts.passage_tokens(title, text)
    if counted != tokens:
        raise AssertionError(f"made a {counted}-token passage instead of {tokens}")
    return text


def classroom(
    prompts: Prompts,
    *,
    classes: int,
    pupils: int,
    passage_tokens: int,
    trickle_per_class: int,
    output_tokens: int,
    temperature: float,
    warmup: int,
    seed: int,
    ignore_eos: bool = False,
) -> Workload:
    maker = TextMaker(prompts.tokenizer)
    rng = random.Random(seed)
    bank = seed_data().class_questions
    specs: list[ClassSpec] = []
    for c in range(classes):
        title = f"Reading {c + 1}"
        text = passage_of(prompts, maker, rng, title, passage_tokens)
        specs.append(ClassSpec(f"class-{c + 1}", title, text, passage_tokens, pupils))

    counter = iter(range(10**9))

    def ask(cls: ClassSpec, pupil: int, question: str) -> RequestSpec:
        messages = [dict(m) for m in prompts.messages(cls.title, cls.text, question)]
        ids = prompts.tokenizer.chat_ids(messages)
        return RequestSpec(next(counter), messages, len(ids), cls.group, question, pupil)  # type: ignore[arg-type]

    arrivals: list[list[RequestSpec]] = []
    for cls in specs:  # each class's "now ask": every pupil at once
        arrivals.append([ask(cls, p, bank[(p + rng.randrange(len(bank))) % len(bank)]) for p in range(pupils)])
    for k in range(trickle_per_class):  # then single questions, the classes in turn
        for cls in specs:
            pupil = (k + rng.randrange(pupils)) % pupils
            arrivals.append([ask(cls, pupil, bank[rng.randrange(len(bank))])])

    warm_class = ClassSpec(
        "warmup",
        "Warm-up",
        passage_of(prompts, maker, random.Random(f"warmup-{seed}"), "Warm-up", passage_tokens),
        passage_tokens,
        pupils,
    )
    return Workload(
        kind="classroom",
        arrivals=arrivals,
        warmup=[ask(warm_class, i % pupils, bank[i % len(bank)]) for i in range(warmup)],
        output_tokens=output_tokens,
        ignore_eos=ignore_eos,
        temperature=temperature,
        classes=specs,
        trickle_per_class=trickle_per_class,
        warmup_class=warm_class,
    )


def seed_workload(prompts: Prompts, *, output_tokens: int, temperature: float) -> Workload:
    """The bee passage and its two questions, asked one after the other by two pupils of one class."""
    data = seed_data()
    tokens = prompts.passage_tokens(data.title, data.text)
    cls = ClassSpec("seed", data.title, data.text, tokens, len(data.questions))
    arrivals = []
    for i, question in enumerate(data.questions):
        messages = [dict(m) for m in prompts.messages(data.title, data.text, question)]
        spec = RequestSpec(i, messages, len(prompts.tokenizer.chat_ids(messages)), cls.group, question, i)  # type: ignore[arg-type]
        arrivals.append([spec])
    return Workload(
        kind="seed",
        arrivals=arrivals,
        warmup=[],
        output_tokens=output_tokens,
        ignore_eos=False,
        temperature=temperature,
        classes=[cls],
    )
