"""Streams through proxies: the headers a proxy needs, keep-alives while a question waits, and a real
nginx (Debian's, with deploy/nginx/classroom.conf.template) between the pupil and the service."""

import json
import shutil
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from string import Template

import httpx
import pytest

from service.app import create_app
from service.local.processes import ManagedProcess, free_port
from service.settings import PROJECT_ROOT, AnswerSettings, Settings
from tests.fakes import FAKE_WORDS, fake_backend_slow_to_first_token
from tests.helpers import (
    Join,
    add_passage,
    ask_streaming,
    create_classroom,
    error_of,
    joined_pupil,
    passage_text,
    signed_in_teacher,
)
from tests.servers import STATE, ServerThread, isolated, service_process

pytestmark = pytest.mark.slow  # Debian's nginx in front of a service

TEMPLATE = PROJECT_ROOT / "deploy" / "nginx" / "classroom.conf.template"


@contextmanager
def nginx(upstream: str, read_timeout_s: int, folder: Path) -> Iterator[str]:
    """Debian's nginx with our server block, proxying to `upstream`; yields its URL."""
    port = free_port()
    server = Template(TEMPLATE.read_text()).safe_substitute(
        LISTEN=f"127.0.0.1:{port}", SERVICE=upstream.removeprefix("http://"), READ_TIMEOUT=f"{read_timeout_s}s"
    )
    temp = folder / "temp"
    temp.mkdir(parents=True, exist_ok=True)
    conf = folder / "nginx.conf"
    conf.write_text(
        f"""worker_processes 1;
daemon off;
error_log {folder}/error.log;
pid {folder}/nginx.pid;
events {{}}
http {{
    access_log off;
    client_body_temp_path {temp}/body;
    proxy_temp_path {temp}/proxy;
    fastcgi_temp_path {temp}/fastcgi;
    uwsgi_temp_path {temp}/uwsgi;
    scgi_temp_path {temp}/scgi;
{server}
}}
"""
    )
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    process = ManagedProcess("nginx", [binary, "-c", str(conf), "-p", str(folder)], folder / "nginx.log")
    process.start()
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            httpx.get(f"{url}/healthz", timeout=1)
        except httpx.HTTPError:
            return False
        return True

    process.wait_until(answers, 10)
    try:
        yield url
    finally:
        process.stop()


def test_a_stream_carries_the_headers_proxies_need(teacher: httpx.Client, join: Join) -> None:
    classroom = create_classroom(teacher)
    add_passage(teacher, classroom["id"], passage_text(60))
    pupil = join(classroom["join_code"], "Ada")
    with pupil.stream("POST", f"/api/classrooms/{classroom['id']}/questions", json={"question": "Why?"}) as response:
        headers = response.headers
        assert headers["content-type"].startswith("text/event-stream")
        assert headers["x-accel-buffering"] == "no"  # nginx: pass it through as it comes
        assert "no-store" in headers["cache-control"] and "no-transform" in headers["cache-control"]
        assert "content-length" not in headers and "content-encoding" not in headers
        response.read()


def test_a_slow_first_token_gets_keepalives_and_survives_an_idle_timeout(settings: Settings) -> None:
    folder = STATE / f"nginx-{free_port()}"
    with ServerThread(fake_backend_slow_to_first_token(delay_s=4.0)) as backend:
        slow = settings.backend.model_copy(update={"base_url": f"{backend.url}/v1"})
        for keepalive_s, survives in ((0.5, True), (30.0, False)):
            own = isolated(settings, backend=slow, answer=AnswerSettings(max_tokens=48, keepalive_s=keepalive_s))
            with (
                ServerThread(create_app(own)) as service,
                closing(signed_in_teacher(own, service.url)) as teacher,
                nginx(service.url, read_timeout_s=2, folder=folder) as proxy,
            ):
                classroom = create_classroom(teacher)
                add_passage(teacher, classroom["id"], passage_text(60))
                pupil = joined_pupil(proxy, classroom["join_code"], "Ada")
                url = f"/api/classrooms/{classroom['id']}/questions"
                comments, events, text = 0, [], ""
                try:
                    with pupil.stream("POST", url, json={"question": "Anyone there?"}) as response:
                        for line in response.iter_lines():
                            comments += line.startswith(":")
                            if line.startswith("event:"):
                                events.append(line.removeprefix("event:").strip())
                            elif line.startswith("data:") and events[-1] == "token":
                                text += json.loads(line.removeprefix("data:"))["text"]
                except httpx.RemoteProtocolError:
                    events.append("cut")  # nginx closed the idle stream mid-response
                pupil.close()
            if survives:
                # Keep-alive comments crossed nginx while nothing else did, so its 2 s timeout never fired.
                assert comments >= 4 and events[0] == "question" and events[-1] == "done"
                # The words came together, after the wait: they may go out as one event or several.
                assert text == "".join(FAKE_WORDS) and "token" in events
            else:
                # The control: without them nginx cuts the quiet stream, as any proxy would.
                assert events[0] == "question" and "done" not in events


def test_answers_stream_token_by_token_through_nginx(teacher: httpx.Client, service: str) -> None:
    classroom = create_classroom(teacher)
    add_passage(teacher, classroom["id"], passage_text(200))
    with nginx(service, read_timeout_s=60, folder=STATE / f"nginx-{free_port()}") as proxy:
        with closing(joined_pupil(proxy, classroom["join_code"], "Ada")) as pupil:
            streamed = ask_streaming(pupil, classroom["id"], "Why do bees dance?")
    assert streamed.done is not None and streamed.done["answer"] == streamed.text
    # Not buffered into one burst: the first and last tokens crossed nginx well apart.
    assert streamed.token_times[-1] - streamed.token_times[0] > 0.05


def school(proxy: str, address: str) -> httpx.Client:
    """A client whose connections come from `address` (any of 127.0.0.0/8 is this machine's): a school of its own."""
    return httpx.Client(base_url=proxy, timeout=30, transport=httpx.HTTPTransport(local_address=address))


def test_behind_a_proxy_one_guesser_is_stopped_and_another_school_is_not(settings: Settings, instant_vllm: str) -> None:
    """Two schools reach the service through nginx, which names each in X-Forwarded-For. Trusting nginx's address
    (the default, loopback), the failed-join limit counts each school; trusting nobody, it counts nginx, and one
    guesser locks every school out."""
    backend = settings.backend.model_copy(update={"base_url": instant_vllm})
    outcomes: dict[str, tuple[int, int]] = {}
    for trusted in ("127.0.0.1", "192.0.2.1"):
        own = isolated(settings, backend=backend)
        env = {"CLASSROOM_AUTH__FAILED_ATTEMPTS_PER_CLIENT": "5", "CLASSROOM_API__FORWARDED_ALLOW_IPS": trusted}
        with (
            service_process(own, env=env) as service,
            closing(signed_in_teacher(own, service.url)) as teacher,
            nginx(service.url, read_timeout_s=60, folder=STATE / f"nginx-{free_port()}") as proxy,
            closing(school(proxy, "127.0.0.2")) as guesser,
            closing(school(proxy, "127.0.0.3")) as other,
        ):
            code = create_classroom(teacher)["join_code"]
            wrong = {"join_code": "WRONG999", "name": "Bot"}
            # The guesser also claims other addresses itself: nginx appends the one it saw, which is believed.
            tried = [
                guesser.post("/api/join", json=wrong, headers={"X-Forwarded-For": f"10.9.9.{n}"}) for n in range(7)
            ]
            assert [r.status_code for r in tried[:5]] == [404] * 5, [r.text for r in tried]
            assert tried[-1].status_code == 429 and error_of(tried[-1])["code"] == "too_many_attempts"
            joined = other.post("/api/join", json={"join_code": code, "name": "Ada"})
            outcomes[trusted] = (tried[-1].status_code, joined.status_code)
    assert outcomes["127.0.0.1"] == (429, 201)  # the guesser waits; the other school's pupil joins
    assert outcomes["192.0.2.1"] == (429, 429)  # the control: every school is nginx's address, all wait
