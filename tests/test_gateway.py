"""The service in front of a backend faster than itself (benchmarks/gateway.py measures how fast): a class's
burst gets every answer while other answers stream, a slow connection is not taken for a dead replica, and
the instant fake vLLM that stands in for a fast GPU streams exactly as the real vLLM does."""

import asyncio
import socket
import subprocess
import sys
from collections.abc import Awaitable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import orjson
import pytest

from benchmarks.gateway_client import Answer, ask_service
from loadtest.results import RunResult
from service.app import create_app
from service.backends.replica_http import AiohttpTransport, ReplicaHttp, ReplicaNotAnswering, ReplicaRefused
from service.settings import AnswerSettings, BackendSettings, Settings, root_url
from tests.helpers import add_passage, create_classroom, joined_pupil, passage_text, signed_in_teacher, stored_questions
from tests.servers import ServerThread, Vllm, isolated, service_process


def raw_stream(base_url: str, model: str) -> list[dict[str, Any] | str]:
    body = {
        "model": model,
        "messages": [{"role": "system", "content": passage_text(60)}, {"role": "user", "content": "Why?"}],
        "max_tokens": 5,
        "min_tokens": 5,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.stream("POST", f"{base_url}/chat/completions", json=body, timeout=60) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["transfer-encoding"] == "chunked"
        raw = response.read()
    events = [e.removeprefix(b"data: ") for e in raw.split(b"\n\n") if e]
    return [e.decode() if e == b"[DONE]" else orjson.loads(e) for e in events]


def shape(event: dict[str, Any] | str) -> tuple[str, ...]:
    """The keys of a chunk and of its choice and delta, and whether the finish reason is set."""
    if isinstance(event, str):
        return (event,)
    choices = event["choices"]
    keys = tuple(sorted(event))
    if not choices:
        return (*keys, "usage:", *sorted(event["usage"]), "details:", *sorted(event["usage"]["prompt_tokens_details"]))
    [choice] = choices
    return (*keys, "choice:", *sorted(choice), "delta:", *sorted(choice["delta"]), str(choice["finish_reason"]))


def test_the_instant_fake_streams_in_the_real_vllms_shape(vllm: Vllm, instant_vllm: str) -> None:
    real = raw_stream(vllm.base_url, vllm.model)
    fake = raw_stream(instant_vllm, vllm.model)
    # Role chunk, five token chunks (the last with its finish reason), the usage, [DONE]: key for key.
    assert len(real) == len(fake) == 8
    assert [shape(e) for e in fake] == [shape(e) for e in real]


def busy_listener() -> Iterator[int]:
    """A port whose listener never accepts and whose queue is full: a connection to it is never made."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port: int = listener.getsockname()[1]
    waiting = []
    for _ in range(3):
        client = socket.socket()
        client.setblocking(False)
        try:
            client.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        waiting.append(client)
    yield port
    for client in waiting:
        client.close()
    listener.close()


@pytest.fixture()
def unaccepting_port() -> Iterator[int]:
    yield from busy_listener()


def test_a_connection_not_made_in_time_is_not_a_refused_one(unaccepting_port: int) -> None:
    """Only a refused connection marks a replica down (service/classroom/answering.py); one that is merely not made
    within the connect timeout, as when this process's event loop runs late, leaves that to the prober."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        refusing = closed.getsockname()[1]  # bound, not listening: connections are refused

    async def open_both() -> tuple[BaseException | None, BaseException | None]:
        backend = BackendSettings(connect_timeout_s=0.3)
        http = ReplicaHttp(AiohttpTransport(backend), backend, probe_timeout_s=1.0)
        outcomes: list[BaseException | None] = []
        try:
            for port in (refusing, unaccepting_port):
                try:
                    await http.open_answer(f"http://127.0.0.1:{port}/v1", b"{}")
                    outcomes.append(None)
                except Exception as exc:
                    outcomes.append(exc)
        finally:
            await http.close()
        return outcomes[0], outcomes[1]

    refused, timed_out = asyncio.run(open_both())
    assert isinstance(refused, ReplicaRefused)
    assert isinstance(timed_out, ReplicaNotAnswering)


async def _class_bursts_while_another_streams(
    url: str, burst_cookies: list[str], streaming_cookies: list[str], ids: tuple[str, str]
) -> tuple[list[list[Answer]], list[Answer]]:
    """The benchmark's client (aiohttp): lean enough that the service, not the client, is the slowest part."""
    timeout = aiohttp.ClientTimeout(total=None, sock_read=60)
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=timeout, cookie_jar=aiohttp.DummyCookieJar()
    ) as session:

        def ask(classroom_id: str, cookie: str, question: str) -> Awaitable[Answer]:
            body = orjson.dumps({"question": question})
            return ask_service(session, f"{url}/api/classrooms/{classroom_id}/questions", cookie, body)

        async def keep_asking(cookie: str) -> list[Answer]:
            return [await ask(ids[1], cookie, f"More {n}?") for n in range(4)]

        background = asyncio.gather(*(keep_asking(c) for c in streaming_cookies))
        await asyncio.sleep(0.5)  # the other class's answers are streaming
        bursts = []
        for round_ in range(2):  # the whole class presses "ask" at once, twice
            bursts.append(list(await asyncio.gather(*(ask(ids[0], c, f"Why {round_}?") for c in burst_cookies))))
        others = [answer for answers in await background for answer in answers]
        return bursts, others


@pytest.mark.slow  # a service process of its own and the instant fake vLLM
def test_a_class_pressing_ask_at_once_while_another_class_streams_gets_every_answer(
    settings: Settings, instant_vllm: str
) -> None:
    """Against a backend that answers at once, the service is the slowest part: a burst of 30 while 30 other
    answers stream must still find the replica up (no false 503) and answer everyone."""
    own = isolated(
        settings,
        backend=settings.backend.model_copy(update={"base_url": instant_vllm}),
        answer=AnswerSettings(max_tokens=256),
    )
    with service_process(own) as service, closing(signed_in_teacher(own, service.url)) as teacher:
        url = service.url
        made = []
        for name in ("4B", "4C"):
            classroom = create_classroom(teacher, name)
            add_passage(teacher, classroom["id"], passage_text(1000))
            pupils = [joined_pupil(url, classroom["join_code"], f"Pupil {i}") for i in range(30)]
            made.append((classroom, ["; ".join(f"{k}={v}" for k, v in p.cookies.items()) for p in pupils]))
            for pupil in pupils:
                pupil.close()
        (burst_class, burst_cookies), (other_class, other_cookies) = made
        bursts, others = asyncio.run(
            _class_bursts_while_another_streams(
                url, burst_cookies, other_cookies, (burst_class["id"], other_class["id"])
            )
        )
        for burst in bursts:
            assert [a.error for a in burst] == [None] * 30, {a.error for a in burst}
            assert [a.tokens for a in burst] == [256] * 30
        assert [a.error for a in others] == [None] * 120, {a.error for a in others}
        stored = stored_questions(teacher, burst_class["id"], limit="100")
        assert len(stored) == 60 and {q["status"] for q in stored} == {"answered"}
        assert len(stored_questions(teacher, other_class["id"], limit="200")) == 120
        assert "is down" not in service.log.read_text()  # the replica was never taken for dead


@pytest.mark.slow  # a service process of its own and the instant fake vLLM
def test_the_load_tester_lets_every_request_of_four_bursts_be_in_flight_at_once(
    instant_vllm: str, model_dir: Path, tmp_path: Path
) -> None:
    """4 classes of 30 at once are 120 requests in flight: a client pool of fewer connections would hold
    the rest back until earlier answers end, and time that wait as the server's TTFT."""
    root = root_url(instant_vllm)
    httpx.post(f"{root}/fake/config", json={"tpot_ms": 50.0}).raise_for_status()  # answers last ~1 s
    httpx.delete(f"{root}/fake/connections").raise_for_status()
    try:
        argv = [sys.executable, "-m", "loadtest", "run", "--url", instant_vllm, "--model-dir", str(model_dir)]
        argv += ["--workload", "classroom", "--classes", "4", "--pupils", "30", "--trickle", "0", "--no-prime"]
        argv += ["--profile", "throughput", "--requests", "120", "--output-tokens", "20", "--warmup", "0"]
        subprocess.run([*argv, "--out", str(tmp_path / "run.json")], check=True, capture_output=True, timeout=120)
    finally:
        httpx.post(f"{root}/fake/config", json={"tpot_ms": 0.0}).raise_for_status()
    assert httpx.get(f"{root}/fake/connections").json()["most"] >= 120
    assert all(r.ok for r in RunResult.load(tmp_path / "run.json").benchmarks[0].requests)


def test_a_backend_too_slow_to_answer_gets_keep_alives_then_a_sentence(settings: Settings, instant_vllm: str) -> None:
    """vLLM takes longer than `backend.read_timeout_s` to send anything (the fake, set slow: a real vLLM
    cannot be made slow on demand): the pupil's stream carries keep-alive comments meanwhile, then one
    `error` event with a sentence; the question is stored, cut short, with that sentence."""
    own = isolated(
        settings,
        backend=settings.backend.model_copy(update={"base_url": instant_vllm, "read_timeout_s": 2.0}),
        answer=settings.answer.model_copy(update={"keepalive_s": 0.5}),
    )
    root = root_url(instant_vllm)
    with ServerThread(create_app(own)) as service, closing(signed_in_teacher(own, service.url)) as teacher:
        classroom = create_classroom(teacher)
        add_passage(teacher, classroom["id"], passage_text(100))
        pupil = joined_pupil(service.url, classroom["join_code"], "Ada")
        httpx.post(f"{root}/fake/config", json={"ttft_ms": 6000.0}).raise_for_status()
        try:
            with pupil.stream("POST", f"/api/classrooms/{classroom['id']}/questions", json={"question": "Why?"}) as r:
                lines = [line for line in r.iter_lines() if line]
        finally:
            httpx.post(f"{root}/fake/config", json={"ttft_ms": 0.0}).raise_for_status()
            pupil.close()
        keep_alives = [line for line in lines if line.startswith(":")]
        assert len(keep_alives) >= 2, lines  # ~4 in the 2 s of silence
        events = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
        assert events == ["question", "error"]
        error = orjson.loads(lines[-1].removeprefix("data: "))
        assert error["message"] == "The answering service took too long to answer. Please ask again in a moment."
        [stored] = stored_questions(teacher, classroom["id"])
        assert (stored["status"], stored["error"], stored["answer"]) == ("incomplete", error["message"], "")
