"""Five pupils, one ~600-token passage: the layout is what lets every pupil reuse the passage computed
once (by the warm-up, or else by the first pupil)."""

import httpx
from openai import OpenAI

from service.classroom.prompting import Prompts
from service.settings import Settings
from tests.figures import report
from tests.helpers import (
    Join,
    add_passage,
    ask_json,
    create_classroom,
    operator_headers,
    passage_text,
    wait_until_warmed,
)
from tests.servers import Vllm

QUESTIONS = [
    "Why do bees visit flowers?",
    "What is pollination?",
    "How do bees tell each other where food is?",
    "What do bees do in winter?",
    "Why do farmers bring hives to orchards?",
]


def shared_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_passage_first_layout_reuses_the_cached_passage_and_question_first_does_not(
    teacher: httpx.Client, join: Join, vllm: Vllm, settings: Settings
) -> None:
    block = vllm.block_size()
    prompts = Prompts.from_settings(settings)
    tokenizer = prompts.tokenizer
    text = passage_text(600)
    classroom = create_classroom(teacher)
    passage = add_passage(teacher, classroom["id"], text)
    assert 550 <= passage["tokens"] <= 700
    # The service sends the passage ahead of the pupils (warm-up), so even the first finds it cached.
    with httpx.Client(base_url=teacher.base_url, headers=operator_headers(settings)) as operator:
        assert wait_until_warmed(operator, classroom["id"]) == [vllm.base_url]

    # Passage first, through the service, as pupils ask.
    passage_first = []
    for i, question in enumerate(QUESTIONS):
        response = ask_json(join(classroom["join_code"], f"pupil {i + 1}"), classroom["id"], question)
        assert response.status_code == 200, response.text
        passage_first.append(response.json()["usage"])
    ids = [tokenizer.chat_ids(prompts.messages("The honeybee", text, q)) for q in QUESTIONS]
    shared = min(shared_prefix(ids[0], other) for other in ids[1:])
    assert shared >= passage["tokens"]
    expected = shared // block * block
    for usage in passage_first:
        assert usage["cached_tokens"] >= expected

    # The same questions placed before the passage, sent straight to vLLM.
    system = prompts.system_message("", "").split("Passage:")[0].strip()
    question_first = []
    # Closed when done: the client left to the garbage collector left its socket open (the throttled run found
    # it, CLASSROOM_TEST_TRACE_SOCKETS named this line).
    with OpenAI(base_url=vllm.base_url, api_key="EMPTY") as client:
        for question in QUESTIONS:
            reply = client.chat.completions.create(
                model=vllm.model,
                messages=[
                    {"role": "system", "content": system},
                    {"role": "user", "content": f"{question}\n\nPassage: The honeybee\n\n{text}"},
                ],
                max_tokens=8,
            )
            assert reply.usage is not None and reply.usage.prompt_tokens_details is not None
            question_first.append(reply.usage.prompt_tokens_details.cached_tokens or 0)
    assert all(cached < block for cached in question_first)

    figures = {
        "block_size": block,
        "passage_tokens": passage["tokens"],
        "shared_prefix_tokens": shared,
        "expected_cached_per_follower": expected,
        "passage_first_cached": [u["cached_tokens"] for u in passage_first],
        "passage_first_prompt": [u["prompt_tokens"] for u in passage_first],
        "question_first_cached": question_first,
    }
    report("five pupils on one passage, prefix cache", figures)


def test_service_counts_prompt_tokens_exactly_as_vllm(teacher: httpx.Client, join: Join, settings: Settings) -> None:
    prompts = Prompts.from_settings(settings)
    text, question = passage_text(200), "What is a drone?"
    classroom = create_classroom(teacher)
    passage = add_passage(teacher, classroom["id"], text)
    usage = ask_json(join(classroom["join_code"], "Ada"), classroom["id"], question).json()["usage"]
    ours = len(prompts.tokenizer.chat_ids(prompts.messages("The honeybee", text, question)))
    assert usage["prompt_tokens"] == ours
    assert passage["tokens"] == prompts.passage_tokens("The honeybee", text)
