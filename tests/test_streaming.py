"""A pupil watches the answer arrive token by token, and the stored answer is what they saw."""

import httpx

from tests.helpers import Join, add_passage, ask_json, ask_streaming, create_classroom, passage_text, stored_questions


def test_answer_streams_in_many_events_and_is_stored_as_streamed(teacher: httpx.Client, join: Join) -> None:
    classroom = create_classroom(teacher)
    add_passage(teacher, classroom["id"], passage_text(300))
    ada = join(classroom["join_code"], "Ada")

    streamed = ask_streaming(ada, classroom["id"], "Why do bees dance?")

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

    [stored] = stored_questions(teacher, classroom["id"])
    assert stored["id"] == streamed.question_id
    assert stored["answer"] == streamed.text
    assert stored["usage"] == done["usage"]
    assert stored["pupil"] == "Ada" and stored["question"] == "Why do bees dance?"


def test_json_answer_carries_the_same_fields_as_the_final_event(teacher: httpx.Client, join: Join) -> None:
    classroom = create_classroom(teacher)
    add_passage(teacher, classroom["id"], passage_text(150))
    response = ask_json(join(classroom["join_code"], "Ben"), classroom["id"], "What is nectar?")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"question_id", "status", "answer", "usage", "ttft_ms", "total_ms", "finish_reason"}
    assert body["status"] == "answered" and body["answer"]
    [stored] = stored_questions(teacher, classroom["id"])
    assert stored["answer"] == body["answer"]


def test_questions_are_listed_newest_first_and_filter_by_pupil_and_passage(teacher: httpx.Client, join: Join) -> None:
    classroom = create_classroom(teacher)
    first = add_passage(teacher, classroom["id"], passage_text(100), title="Bees")
    cy, di = join(classroom["join_code"], "Cy"), join(classroom["join_code"], "Di")
    assert ask_json(cy, classroom["id"], "First?").status_code == 200
    assert ask_json(di, classroom["id"], "Second?").status_code == 200
    second = add_passage(teacher, classroom["id"], passage_text(100), title="Ants")
    assert ask_json(cy, classroom["id"], "Third?").status_code == 200

    def asked(**filters: str) -> list[str]:
        return [q["question"] for q in stored_questions(teacher, classroom["id"], **filters)]

    assert asked() == ["Third?", "Second?", "First?"]
    assert asked(pupil="cy") == ["Third?", "First?"]
    assert asked(passage_id=first["id"]) == ["Second?", "First?"]
    assert asked(passage_id=second["id"], pupil="Cy") == ["Third?"]
    assert asked(pupil="Nobody") == []
