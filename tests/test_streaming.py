"""A pupil watches the answer arrive token by token, and the stored answer is what they saw."""

import httpx

from tests.helpers import add_passage, ask_json, ask_streaming, create_classroom, passage_text, stored_questions


def test_answer_streams_in_many_events_and_is_stored_as_streamed(api: httpx.Client) -> None:
    classroom = create_classroom(api)
    add_passage(api, classroom["id"], passage_text(300))

    streamed = ask_streaming(api, classroom["id"], "Ada", "Why do bees dance?")

    assert streamed.error is None and streamed.done is not None
    assert len(streamed.tokens) > 1
    # Delivered as it was made, not buffered into one burst at the end: the model takes many
    # milliseconds per token, so the first and last token events arrive well apart.
    assert streamed.token_times[-1] - streamed.token_times[0] > 0.05
    done = streamed.done
    assert done["question_id"] == streamed.question_id
    assert done["status"] == "answered"
    assert done["answer"] == streamed.text
    assert done["usage"]["completion_tokens"] >= len(streamed.tokens)
    assert done["usage"]["prompt_tokens"] > 300
    assert 0 < done["ttft_ms"] <= done["total_ms"]

    [stored] = stored_questions(api, classroom["id"])
    assert stored["id"] == streamed.question_id
    assert stored["answer"] == streamed.text
    assert stored["usage"] == done["usage"]
    assert stored["pupil"] == "Ada" and stored["question"] == "Why do bees dance?"


def test_json_answer_carries_the_same_fields_as_the_final_event(api: httpx.Client) -> None:
    classroom = create_classroom(api)
    add_passage(api, classroom["id"], passage_text(150))
    response = ask_json(api, classroom["id"], "Ben", "What is nectar?")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"question_id", "status", "answer", "usage", "ttft_ms", "total_ms", "finish_reason"}
    assert body["status"] == "answered" and body["answer"]
    [stored] = stored_questions(api, classroom["id"])
    assert stored["answer"] == body["answer"]


def test_questions_are_listed_newest_first(api: httpx.Client) -> None:
    classroom = create_classroom(api)
    add_passage(api, classroom["id"], passage_text(100))
    for question in ("First?", "Second?", "Third?"):
        assert ask_json(api, classroom["id"], "Cy", question).status_code == 200
    assert [q["question"] for q in stored_questions(api, classroom["id"])] == ["Third?", "Second?", "First?"]
