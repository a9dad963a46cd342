"""Prompts sent as token ids (`backend.prompt_format: token_ids`): the passage's prefix tokenised once, each
question's part on its own, the ids exactly the chat's, and answers exactly the chat path's on a real vLLM."""

from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.app import create_app
from service.backends.vllm_stream import StreamReader
from service.classroom import prompting
from service.classroom.prompting import Prompts
from service.settings import AnswerSettings, BackendSettings, ModelSettings, PromptLayout, Settings
from tests.figures import report
from tests.helpers import (
    add_passage,
    ask_streaming,
    create_classroom,
    joined_pupil,
    operator_headers,
    passage_text,
    signed_in_teacher,
    wait_until_warmed,
)
from tests.servers import ServerThread, Vllm, isolated

pytestmark = pytest.mark.slow  # the stand-in's tokenizer and chat template

LAYOUTS: list[PromptLayout] = ["passage_first", "question_first"]
OPTIONS: dict[str, Any] = {"model": "Qwen/Qwen2.5-1.5B-Instruct", "max_tokens": 24, "temperature": 0.0}

chars = st.characters(codec="utf-8", exclude_categories=["Cs"])
blank = st.lists(st.sampled_from([" ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000"]), max_size=4).map("".join)
# Arbitrary text, with the chat template's own spellings among it now and then.
written = st.lists(
    st.one_of(st.text(chars, max_size=40), st.sampled_from(["<|im_start|>", "<|im_end|>", "user\n", "<|endoftext|>"])),
    max_size=6,
).map("".join)

padded = st.tuples(blank, written, blank).map("".join)


def body_of(prompts: Prompts, system_message: str, question: str) -> dict[str, Any]:
    sampling = {k: v for k, v in OPTIONS.items() if k != "model"}
    body: dict[str, Any] = orjson.loads(
        prompts.request_body(system_message, question, model=OPTIONS["model"], sampling=sampling)
    )
    return body


def token_prompts(model_dir: Path, layout: PromptLayout) -> Prompts:
    return Prompts.from_settings(
        Settings(
            model=ModelSettings(dir=model_dir),
            answer=AnswerSettings(prompt_layout=layout),
            backend=BackendSettings(prompt_format="token_ids"),
        )
    )


@pytest.fixture(scope="module")
def by_layout(model_dir: Path) -> dict[str, Prompts]:
    return {layout: token_prompts(model_dir, layout) for layout in LAYOUTS}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(layout=st.sampled_from(LAYOUTS), title=padded, passage=padded, question=padded)
def test_prefix_ids_and_question_ids_are_the_chat_prompts_ids(
    by_layout: dict[str, Prompts], layout: str, title: str, passage: str, question: str
) -> None:
    prompts = by_layout[layout]
    system_message = prompts.system_message(title, passage)
    expected = prompts.tokenizer.chat_ids(prompts.messages(title, passage, question))
    prefix = prompts.token_prefix(system_message)
    assert prefix.ids + prompts.question_ids(prefix, question) == expected
    assert body_of(prompts, system_message, question)["prompt"] == expected


def test_the_split_is_right_after_the_special_token_that_opens_the_user_turn(by_layout: dict[str, Prompts]) -> None:
    im_start = by_layout["passage_first"].tokenizer.encode("<|im_start|>")
    prefixes = {}
    for layout, prompts in by_layout.items():
        prefixes[layout] = [prompts.token_prefix(prompts.system_message("Bees", text)) for text in ("One.", "Two.")]
        for prefix in prefixes[layout]:
            assert prefix.ids[-len(im_start) :] == im_start
            assert prefix.head == "user\n"
    # Passage first, the prefix holds the passage; question first, only the instructions, the same for all.
    first, second = prefixes["passage_first"]
    assert first.ids != second.ids and first.tail == second.tail == "<|im_end|>\n<|im_start|>assistant\n"
    first, second = prefixes["question_first"]
    assert first.ids == second.ids and first.tail.endswith("One.<|im_end|>\n<|im_start|>assistant\n")


def test_bodies_carry_the_same_options_either_way(model_dir: Path, by_layout: dict[str, Prompts]) -> None:
    chat = Prompts.from_settings(Settings(model=ModelSettings(dir=model_dir)))
    tokens = by_layout["passage_first"]
    system_message = chat.system_message("Bees", "Bees make honey.")
    chat_body, token_body = body_of(chat, system_message, "Why?"), body_of(tokens, system_message, "Why?")
    options = OPTIONS | {"stream": True, "stream_options": {"include_usage": True}}
    assert chat_body == options | {"messages": chat.chat(system_message, "Why?")}
    assert token_body == options | {"prompt": chat.tokenizer.chat_ids(chat.chat(system_message, "Why?"))}


def test_prefixes_are_kept_for_the_passages_asked_about_most_recently(
    monkeypatch: pytest.MonkeyPatch, model_dir: Path
) -> None:
    monkeypatch.setattr(prompting, "PREFIXES_KEPT", 2)
    prompts = token_prompts(model_dir, "passage_first")
    a, b, c = (prompts.system_message("Bees", text) for text in ("A.", "B.", "C."))
    kept_a = prompts.token_prefix(a)
    kept_b = prompts.token_prefix(b)
    assert prompts.token_prefix(a) is kept_a  # a hit, and now the most recent
    prompts.token_prefix(c)  # b goes: asked about least recently
    assert prompts.token_prefix(a) is kept_a
    assert prompts.token_prefix(b) is not kept_b and prompts.token_prefix(b) == kept_b


def completion_chunk(text: str, finish_reason: str | None = None) -> bytes:
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason, "stop_reason": None}
    return b"data: " + orjson.dumps({"id": "cmpl-1", "object": "text_completion", "choices": [choice]}) + b"\n\n"


def test_stream_reader_reads_a_streamed_completion_as_it_reads_a_chat() -> None:
    usage = {"prompt_tokens": 390, "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": 256}}
    stream = b"".join(
        [
            completion_chunk(" Bees"),
            completion_chunk(""),  # a token that ends inside a character: no text yet
            completion_chunk(" dance\u00e9"),
            completion_chunk(".", "length"),
            b"data: " + orjson.dumps({"id": "cmpl-1", "choices": [], "usage": usage}) + b"\n\n",
            b"data: [DONE]\n\n",
        ]
    )
    for size in (1, 7, len(stream)):  # the reads end anywhere, inside an event or a character's bytes
        reader, text, tokens, pieces = StreamReader(), "", 0, []
        for at in range(0, len(stream), size):
            piece = reader.feed(stream[at : at + size])
            text, tokens = text + piece.text, tokens + piece.tokens
            pieces.append(piece)
        assert reader.done and text == " Bees dance\u00e9." and tokens == 4
        assert [p.finish_reason for p in pieces if p.finish_reason] == ["length"]
        [read_usage] = [p.usage for p in pieces if p.usage]
        assert (read_usage.prompt_tokens, read_usage.cached_tokens, read_usage.completion_tokens) == (390, 256, 4)


QUESTIONS = ["Why do bees dance?", "What is pollen?", "  who is the queen\n", "Wie viele Bienen? 🐝"]


def one_block_passage(prompts: Prompts, block: int) -> str:
    """A passage whose prompt prefix ends a little past a cache block's start, and every question's prompt
    inside that block: each question then finds the same whole blocks cached, whichever path asks first,
    and computes the same tokens itself, so both paths run the very same computation."""
    text = passage_text(300, seed=7)
    for _ in range(block):
        prefix = prompts.token_prefix(prompts.system_message("The honeybee", text))
        longest = max(len(prompts.question_ids(prefix, q)) for q in QUESTIONS)
        if len(prefix.ids) % block + longest < block and len(prefix.ids) >= block:
            return text
        text += " bee"
    pytest.fail(f"no passage found whose questions fit in one {block}-token cache block after the prefix")


def requests_to(vllm: Vllm, path: str) -> float:
    return sum(
        value
        for labels, value in vllm.metrics().get("http_requests_total", [])
        if labels.get("handler") == path and labels.get("status") == "2xx"
    )


@pytest.fixture()
def two_services(settings: Settings) -> Iterator[tuple[Settings, str, str]]:
    """The service twice on one Redis database and the one vLLM, answering at temperature 0: by chat and by
    token ids."""
    chat = isolated(settings, answer=settings.answer.model_copy(update={"temperature": 0.0}))
    tokens = chat.model_copy(update={"backend": chat.backend.model_copy(update={"prompt_format": "token_ids"})})
    with ServerThread(create_app(chat)) as by_chat, ServerThread(create_app(tokens)) as by_tokens:
        yield chat, by_chat.url, by_tokens.url


def test_token_ids_answer_byte_for_byte_as_chat_and_hit_the_warmed_passage(
    two_services: tuple[Settings, str, str], vllm: Vllm, model_dir: Path
) -> None:
    chat_settings, by_chat, by_tokens = two_services
    prompts = token_prompts(model_dir, "passage_first")
    block = vllm.block_size()
    text = one_block_passage(prompts, block)
    prefix_tokens = len(prompts.token_prefix(prompts.system_message("The honeybee", text)).ids)
    with closing(signed_in_teacher(chat_settings, by_tokens)) as teacher:
        classroom = create_classroom(teacher)
        add_passage(teacher, classroom["id"], text)
        with httpx.Client(base_url=by_tokens, headers=operator_headers(chat_settings)) as operator:
            # Warm-up sends the prefix by chat; the token path's prompts begin with the same ids.
            assert wait_until_warmed(operator, classroom["id"]) == [vllm.base_url]

    completions_before = requests_to(vllm, "/v1/completions")
    answers: dict[str, list[dict[str, Any]]] = {by_tokens: [], by_chat: []}
    for i, question in enumerate(QUESTIONS):
        for url in (by_tokens, by_chat):  # the token path first: its first question is the first after warm-up
            with closing(joined_pupil(url, classroom["join_code"], f"pupil {i}")) as pupil:
                streamed = ask_streaming(pupil, classroom["id"], question)
            assert streamed.error is None and streamed.done is not None and streamed.done["status"] == "answered"
            assert streamed.text == streamed.done["answer"]
            answers[url].append(streamed.done)
    assert requests_to(vllm, "/v1/completions") - completions_before == len(QUESTIONS)

    for by_token_ids, by_messages in zip(answers[by_tokens], answers[by_chat], strict=True):
        assert by_token_ids["answer"].encode() == by_messages["answer"].encode()
        assert by_token_ids["finish_reason"] == by_messages["finish_reason"]
        # Same prompt tokens, same generated tokens, the same whole blocks from the cache.
        assert by_token_ids["usage"] == by_messages["usage"]
        assert by_token_ids["usage"]["cached_tokens"] == prefix_tokens // block * block > 0
    report(
        "token ids vs chat, answers at temperature 0",
        {
            "questions": len(QUESTIONS),
            "identical": True,
            "cached_tokens": [a["usage"]["cached_tokens"] for a in answers[by_tokens]],
            "prompt_tokens": [a["usage"]["prompt_tokens"] for a in answers[by_tokens]],
            "answer_chars": [len(a["answer"]) for a in answers[by_tokens]],
        },
    )


def test_vllm_makes_the_same_prompt_ids_from_the_messages_and_generates_the_same_ids(
    vllm: Vllm, model_dir: Path
) -> None:
    """Straight to vLLM, the service's two bodies with vLLM's token ids returned: vLLM's own ids of the chat
    prompt are the token path's, and the answer is the same, token id by token id."""
    chat = Prompts.from_settings(Settings(model=ModelSettings(dir=model_dir)))
    tokens = token_prompts(model_dir, "passage_first")
    text = one_block_passage(tokens, vllm.block_size())
    system_message = chat.system_message("The honeybee", text)
    with httpx.Client(base_url=vllm.base_url, timeout=120) as client:
        for question in QUESTIONS:
            replies = []
            for prompts, path in ((tokens, "/completions"), (chat, "/chat/completions")):
                body = body_of(prompts, system_message, question) | {"stream": False, "return_token_ids": True}
                del body["stream_options"]
                response = client.post(path, json=body)
                assert response.status_code == 200, response.text
                replies.append(response.json())
            by_tokens, by_chat = replies
            assert by_chat["prompt_token_ids"] == body_of(tokens, system_message, question)["prompt"]
            assert by_tokens["choices"][0]["token_ids"] == by_chat["choices"][0]["token_ids"]
            assert by_tokens["choices"][0]["text"] == by_chat["choices"][0]["message"]["content"]
