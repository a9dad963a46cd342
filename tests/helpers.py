"""Small clients of the service's API, shared by the tests."""

import json
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
from httpx_sse import connect_sse

SENTENCES = [
    "Honeybees live in colonies of many thousands, with one queen, a few hundred drones and many workers.",
    "Worker bees fly from flower to flower to collect nectar, which they turn into honey back in the hive.",
    "As a bee feeds, pollen sticks to the hairs on its body and is carried to the next flower it visits.",
    "When pollen reaches the right part of another flower of the same kind, the flower can make seeds.",
    "This moving of pollen is called pollination, and many fruits and vegetables depend on it.",
    "Bees tell each other where food is by dancing: the angle and length of the dance give the way.",
    "In winter the bees cluster together inside the hive and shiver their muscles to keep the queen warm.",
    "Farmers sometimes bring hives into orchards in spring so that the apple blossoms are pollinated.",
]


def passage_text(approx_tokens: int, seed: int | None = None) -> str:
    """English prose of about `approx_tokens` tokens, different on every call (a run id opens it), so no
    run finds its prompts already in vLLM's prefix cache from an earlier one."""
    rng = random.Random(seed)
    words: list[str] = [f"(Reading {uuid.uuid4().hex[:8]}.)"]
    while len(" ".join(words)) < approx_tokens * 4.6:
        words.append(rng.choice(SENTENCES))
    return " ".join(words)


def create_classroom(api: httpx.Client, name: str = "Class 4B") -> dict[str, Any]:
    response = api.post("/api/classrooms", json={"name": name})
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def add_passage(api: httpx.Client, classroom_id: str, text: str, title: str = "The honeybee") -> dict[str, Any]:
    response = api.post(f"/api/classrooms/{classroom_id}/passages", json={"title": title, "text": text})
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


@dataclass
class Streamed:
    question_id: str | None = None
    tokens: list[str] = field(default_factory=list)
    token_times: list[float] = field(default_factory=list)
    done: dict[str, Any] | None = None
    error: dict[str, Any] | None = None

    @property
    def text(self) -> str:
        return "".join(self.tokens)


def ask_streaming(api: httpx.Client, classroom_id: str, pupil: str, question: str) -> Streamed:
    result = Streamed()
    payload = {"pupil": pupil, "question": question}
    with connect_sse(api, "POST", f"/api/classrooms/{classroom_id}/questions", json=payload) as source:
        assert source.response.status_code == 200, source.response.read()
        assert source.response.headers["content-type"].startswith("text/event-stream")
        for event in source.iter_sse():
            data = json.loads(event.data)
            if event.event == "question":
                result.question_id = data["question_id"]
            elif event.event == "token":
                result.tokens.append(data["text"])
                result.token_times.append(time.perf_counter())
            elif event.event == "done":
                result.done = data
            elif event.event == "error":
                result.error = data
    return result


def ask_json(api: httpx.Client, classroom_id: str, pupil: str, question: str) -> httpx.Response:
    return api.post(
        f"/api/classrooms/{classroom_id}/questions",
        json={"pupil": pupil, "question": question},
        headers={"Accept": "application/json"},
    )


def stored_questions(api: httpx.Client, classroom_id: str) -> list[dict[str, Any]]:
    response = api.get(f"/api/classrooms/{classroom_id}/questions")
    assert response.status_code == 200, response.text
    questions: list[dict[str, Any]] = response.json()["questions"]
    return questions
