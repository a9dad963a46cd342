"""`classroom up` for real, on ports and a Redis of its own: what test_supervision and test_both_variants drive."""

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from service.local.processes import answers_ok, free_port
from tests.helpers import eventually
from tests.servers import STATE, TINY_MODEL

CLASSROOM = str(Path(sys.executable).with_name("classroom"))


class Stack:
    def __init__(self, process: subprocess.Popen[bytes], api_port: int, log: Path, env: dict[str, str]) -> None:
        self.process = process
        self.url = f"http://127.0.0.1:{api_port}"
        self.log = log
        self.env = env  # the settings it runs with (CLASSROOM_*)

    def children(self) -> dict[str, psutil.Process]:
        """The stack's own children by what they are: redis, vllm, service."""
        found = {}
        for child in psutil.Process(self.process.pid).children():
            try:
                command = " ".join(child.cmdline())
            except psutil.Error:  # gone, or a zombie not reaped yet: not running any more
                continue
            kind = "redis" if "redis-server" in command else "service" if command.endswith(" serve") else "vllm"
            found[kind] = child
        return found

    def ready(self) -> bool:
        return answers_ok(f"{self.url}/readyz?answering=true")


@contextmanager
def classroom_up(backend_url: str, *args: str, ready_s: float = 300, **settings: str) -> Iterator[Stack]:
    """`classroom up ARGS` with a Redis of its own, on the tiny stand-in unless `settings` (CLASSROOM_*
    variables) say otherwise; it starts vLLM too unless one already serves `backend_url`. `ready_s` bounds a
    hang: the wait ends when the stack answers /readyz or ends."""
    api_port = free_port()
    state = STATE / f"up-{api_port}"
    env = (
        dict(os.environ)
        | {
            "CLASSROOM_STATE_DIR": str(state),
            "CLASSROOM_REDIS__URL": f"redis://127.0.0.1:{free_port()}/0",
            "CLASSROOM_BACKEND__BASE_URL": backend_url,
            "CLASSROOM_MODEL__DIR": str(TINY_MODEL),
            "CLASSROOM_MODEL__SIZE": "tiny",
            "CLASSROOM_MODEL__STANDIN": "true",
            "CLASSROOM_API__PORT": str(api_port),
            "CLASSROOM_API__WORKERS": "1",
            "CLASSROOM_ROUTING__WARMUP_BURST": "0",  # as the tests' routing(): 32 requests of both cores, unasked
        }
        | settings
    )
    log = STATE / "logs" / f"classroom-up-{api_port}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        process = subprocess.Popen([CLASSROOM, "up", *args], env=env, stdout=out, stderr=subprocess.STDOUT)
    stack = Stack(process, api_port, log, env)
    everything: list[psutil.Process] = []
    try:
        eventually(lambda: stack.ready() or process.poll() is not None, "classroom up was ready (or ended)", ready_s)
        assert process.poll() is None, log.read_text()
        everything = [psutil.Process(process.pid), *psutil.Process(process.pid).children(recursive=True)]
        yield stack
    finally:
        process.kill()
        process.wait()
        for left in everything:  # whatever a failed test left behind
            try:
                left.kill()
            except psutil.NoSuchProcess:
                pass
