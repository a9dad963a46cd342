"""Small clients of the service's API, shared by the tests: a signed-in teacher, joined pupils."""

import asyncio
import csv
import io
import json
import random
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import httpx
from httpx_sse import connect_sse
from prometheus_client.parser import text_string_to_metric_families

from service.backends.warmup import BURST_MAX_TOKENS
from service.classroom.accounts import add_teacher
from service.local.processes import answers_ok
from service.records import Passage, PupilSession, QuestionRecord, QuestionStatus, Usage
from service.settings import Settings
from service.store import RateLimit, Store, open_store
from service.store.ids import new_id

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
PASSWORD = "correct horse battery staple"

T = TypeVar("T")


def eventually(
    probe: Callable[[], T],
    what: str,
    timeout_s: float = 60,
    *,
    until: Callable[[T], object] = bool,
    every_s: float = 0.2,
) -> T:
    """Call `probe()` every `every_s` until `until` holds of what it returns (by default: until it is truthy), and
    return that; fail after `timeout_s`, naming `what` was awaited and what `probe()` returned last."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if until(value):
            return value
        if time.monotonic() >= deadline:
            # A bare True/False says nothing more than the failure itself; a record or a list may say why.
            last = "" if isinstance(value, bool) else f"; last seen: {repr(value)[:2000]}"
            raise AssertionError(f"waited {timeout_s:g} s in vain until {what}{last}")
        time.sleep(every_s)


def passage_text(approx_tokens: int, seed: int | None = None) -> str:
    """English prose of about `approx_tokens` tokens, different on every call (a run id opens it), so no
    run finds its prompts already in vLLM's prefix cache from an earlier one."""
    rng = random.Random(seed)
    words: list[str] = [f"(Reading {uuid.uuid4().hex[:8]}.)"]
    while len(" ".join(words)) < approx_tokens * 4.6:
        words.append(rng.choice(SENTENCES))
    return " ".join(words)


def new_teacher_account(settings: Settings, name: str = "Ms Rivera") -> str:
    """A teacher account made as `classroom teacher add` makes it; returns its email. Runs in a thread
    of its own, so it works beside Playwright's event loop too."""
    email = f"{uuid.uuid4().hex[:10]}@school.example"
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, add_teacher(settings, email, name, PASSWORD)).result()
    return email


def signed_in_teacher(settings: Settings, base_url: str, name: str = "Ms Rivera") -> httpx.Client:
    """A new teacher account, signed in through the API."""
    email = new_teacher_account(settings, name)
    client = httpx.Client(base_url=base_url, timeout=60)
    response = client.post("/api/teacher/session", json={"email": email, "password": PASSWORD})
    assert response.status_code == 200, response.text
    return client


# What the `join` fixture hands a test: `join(join_code, name)` is a client carrying that pupil's session cookie.
Join = Callable[[str, str], httpx.Client]


def joined_pupil(base_url: str, join_code: str, name: str) -> httpx.Client:
    client = httpx.Client(base_url=base_url, timeout=60)
    response = client.post("/api/join", json={"join_code": join_code, "name": name})
    assert response.status_code == 201, response.text
    return client


def create_classroom(teacher: httpx.Client, name: str = "Class 4B") -> dict[str, Any]:
    response = teacher.post("/api/classrooms", json={"name": name})
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def add_passage(
    teacher: httpx.Client, classroom_id: str, text: str, title: str = "The honeybee", publish: bool = True
) -> dict[str, Any]:
    """Add a passage; published at once unless `publish` is False (adding and publishing are two steps)."""
    response = teacher.post(
        f"/api/classrooms/{classroom_id}/passages", json={"title": title, "text": text, "publish": publish}
    )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def seed_questions(
    settings: Settings, classroom_id: str, passage_id: str, pupils: list[tuple[str, int]], count: int, answer: str
) -> list[str]:
    """`count` answered questions stored straight into the class's Redis, as a finished answer is stored and
    indexed (one a second, oldest first, by `pupils` in turn), without asking the model: for pages of many
    questions. Returns their ids, oldest first."""
    start = time.time() - count

    async def store_them() -> list[str]:
        async with open_store(settings.redis.url) as store:
            ids = []
            for i in range(count):
                name, number = pupils[i % len(pupils)]
                record = QuestionRecord(
                    id=uuid.uuid4().hex, classroom_id=classroom_id, passage_id=passage_id,
                    pupil_id=f"seeded-{name}-{number}", pupil=name, pupil_number=number,
                    question=f"Question {i + 1} from {name}?", status=QuestionStatus.ANSWERED, answer=answer,
                    usage=Usage(prompt_tokens=400, cached_tokens=384, completion_tokens=40),
                    ttft_ms=420.0, total_ms=2100.0, asked_at=datetime.fromtimestamp(start + i, UTC),
                )  # fmt: skip
                await store.refuse_question(record)  # stores and indexes it as it is (the status is ours)
                ids.append(record.id)
            return ids

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, store_them()).result()


@dataclass
class Streamed:
    question_id: str | None = None
    places: list[int] = field(default_factory=list)  # in line for a turn
    tokens: list[str] = field(default_factory=list)
    token_times: list[float] = field(default_factory=list)
    done: dict[str, Any] | None = None
    error: dict[str, Any] | None = None

    @property
    def text(self) -> str:
        return "".join(self.tokens)


def ask_streaming(pupil: httpx.Client, classroom_id: str, question: str) -> Streamed:
    result = Streamed()
    url = f"/api/classrooms/{classroom_id}/questions"
    with connect_sse(pupil, "POST", url, json={"question": question}) as source:
        assert source.response.status_code == 200, source.response.read()
        assert source.response.headers["content-type"].startswith("text/event-stream")
        for event in source.iter_sse():
            data = json.loads(event.data)
            if event.event == "question":
                result.question_id = data["question_id"]
            elif event.event == "queued":
                result.places.append(data["place"])
            elif event.event == "token":
                result.tokens.append(data["text"])
                result.token_times.append(time.perf_counter())
            elif event.event == "done":
                result.done = data
            elif event.event == "error":
                result.error = data
    return result


def ask_then_stop(pupil: httpx.Client, classroom_id: str, question: str) -> str:
    """Asks, and presses Stop after the first words: the answer ends cut short (leaving would not cut it)."""
    url = f"/api/classrooms/{classroom_id}/questions"
    with connect_sse(pupil, "POST", url, json={"question": question}) as source:
        for event in source.iter_sse():
            if event.event == "question":
                question_id: str = json.loads(event.data)["question_id"]
            elif event.event == "token":
                assert pupil.post(f"/api/pupil/questions/{question_id}/stop").status_code == 204
                return question_id
    raise AssertionError("the answer ended before its first words could be stopped")


def ask_json(pupil: httpx.Client, classroom_id: str, question: str) -> httpx.Response:
    return pupil.post(
        f"/api/classrooms/{classroom_id}/questions",
        json={"question": question},
        headers={"Accept": "application/json"},
    )


def stored_questions(teacher: httpx.Client, classroom_id: str, **filters: str) -> list[dict[str, Any]]:
    response = teacher.get(f"/api/classrooms/{classroom_id}/questions", params=filters)
    assert response.status_code == 200, response.text
    questions: list[dict[str, Any]] = response.json()["questions"]
    return questions


def exported_rows(teacher: httpx.Client, classroom_id: str, file: str = "questions.csv") -> list[dict[str, str]]:
    """The questions' CSV (or the archived ones', `archive.csv`) as a spreadsheet reads it: Excel's byte-order
    mark dropped, one dict per row."""
    response = teacher.get(f"/api/classrooms/{classroom_id}/{file}")
    assert response.status_code == 200, response.text
    return list(csv.DictReader(io.StringIO(response.content.decode("utf-8-sig"))))


def error_of(response: httpx.Response) -> dict[str, str]:
    error: dict[str, str] = response.json()["error"]
    return error


def operator_headers(settings: Settings) -> dict[str, str]:
    return {"Authorization": f"Bearer {settings.auth.operator_token.get_secret_value()}"}


def routing_of(operator: httpx.Client, classroom_id: str) -> dict[str, Any]:
    """The operators' view of a class: its stored records whole (replica, variant) and its warmed replicas."""
    response = operator.get(f"/api/operator/classrooms/{classroom_id}", params={"limit": 1000})
    assert response.status_code == 200, response.text
    routing: dict[str, Any] = response.json()
    return routing


def routed_questions(operator: httpx.Client, classroom_id: str) -> list[dict[str, Any]]:
    questions: list[dict[str, Any]] = routing_of(operator, classroom_id)["questions"]
    return questions


def wait_until_warmed(operator: httpx.Client, classroom_id: str, timeout_s: float = 60) -> list[str]:
    """The replicas holding the class's active passage in their cache, once warm-up has sent it."""

    def warmed_on() -> list[str]:
        replicas: list[str] = routing_of(operator, classroom_id)["warmed_on"]
        return replicas

    return eventually(warmed_on, "the active passage was warmed", timeout_s)


def metric_samples(text: str, classroom_id: str) -> dict[tuple[str, str], float]:
    """(metric, outcome) -> value, for the one classroom's series."""
    samples: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("classroom") == classroom_id:
                key = (sample.name, sample.labels.get("outcome", ""))
                samples[key] = samples.get(key, 0.0) + sample.value
    return samples


def answers_readyz(url: str) -> bool:
    """The service at `url` says it can answer (Redis and vLLM reachable)."""
    return answers_ok(f"{url}/readyz?answering=true")


def requests_asking_for(vllm_metrics: dict[str, list[tuple[dict[str, str], float]]], low: int, high: int) -> float:
    """Requests a replica finished whose max_tokens was above `low` and at most `high`, two bounds of vLLM's
    histogram of the parameter (1, 2, 5, 10, 20, 50, ...), from `Vllm.metrics()`. Passages' warm-ups ask for
    1 token, warm-up bursts for BURST_MAX_TOKENS (6 to 10), pupils for far more."""
    below: dict[float, float] = {}
    for labels, value in vllm_metrics["vllm:request_params_max_tokens_bucket"]:
        below[float(labels["le"])] = below.get(float(labels["le"]), 0.0) + value
    return below[float(high)] - below.get(float(low), 0.0)


def pupils_questions(vllm_metrics: dict[str, list[tuple[dict[str, str], float]]]) -> float:
    """Requests a replica finished with a pupil's max_tokens (48 in the tests: above warm-ups and bursts)."""
    return requests_asking_for(vllm_metrics, 20, 50)


def warmup_burst_requests(vllm_metrics: dict[str, list[tuple[dict[str, str], float]]]) -> float:
    """Requests a replica finished that a warm-up burst sent (service/backends/warmup.py)."""
    assert 5 < BURST_MAX_TOKENS <= 10
    return requests_asking_for(vllm_metrics, 5, 10)


async def admitted(store: Store, names: list[str], lease_s: int) -> list[QuestionRecord]:
    """A class with a published passage, and a question of each pupil `names` holds admitted straight into the
    store (a lease of `lease_s`), as a service process admits it: for the sweeper's and the leases' rules."""
    classroom = await store.create_classroom("teacher", "4B")
    passage = Passage(id=new_id(), classroom_id=classroom.id, title="t", text="x", tokens=2)
    await store.add_passage(passage, publish=True)
    await store.set_active_passage(classroom.id, passage.id)
    asked = []
    for name in names:
        pupil = PupilSession(pupil_id=new_id(), classroom_id=classroom.id, name=name)
        token = await store.start_pupil_session(pupil, timedelta(hours=1))
        record = QuestionRecord(
            id=new_id(), classroom_id=classroom.id, passage_id=passage.id, pupil_id=pupil.pupil_id, pupil=name,
            question="Why?",
        )  # fmt: skip
        version = (await store.class_state(classroom.id)).version
        assert (await store.admit_question(token, record, version, RateLimit(most=10), lease_s)).outcome == "ok"
        asked.append(record)
    return asked
