"""`classroom up` supervises what it starts: the service is started again when it dies (as when the kernel's OOM
killer ends it), everything stops if it keeps dying, and Redis and vLLM never outlive the stack however it ends
(PR_SET_PDEATHSIG): Ctrl-C, SIGTERM or SIGKILL. Each test runs a real `classroom up` on ports of its own."""

import re
import signal
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil
import pytest

from service.local.processes import answers_ok, free_port
from service.local.stack import MOST_RESTARTS
from tests.figures import report
from tests.helpers import eventually
from tests.local_stack import classroom_up
from tests.servers import Vllm

pytestmark = pytest.mark.slow  # a stack of its own: Redis, the service, and in one test vLLM


def seconds_until(check: Callable[[], bool], what: str, timeout_s: float) -> float:
    """Seconds until `check()` held, for the figures reported; fails as eventually() does after `timeout_s`."""
    began = time.monotonic()
    eventually(check, what, timeout_s)
    return time.monotonic() - began


def gone(processes: list[psutil.Process]) -> Callable[[], bool]:
    def check() -> bool:
        return not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in processes)

    return check


def test_the_service_is_started_again_when_it_is_killed_and_nothing_outlives_a_killed_stack() -> None:
    # A vLLM of the stack's own, on a port nobody serves, so that the stack starts it.
    with classroom_up(f"http://127.0.0.1:{free_port()}/v1") as stack:
        children = stack.children()
        assert set(children) == {"redis", "vllm", "service"}, children
        children["service"].send_signal(signal.SIGKILL)  # as the kernel's OOM killer does
        restarted_s = seconds_until(
            lambda: stack.ready() and stack.children()["service"].pid != children["service"].pid,
            "the killed service was started again",
            60,
        )
        report("classroom up: the killed service answers again after (s)", round(restarted_s, 1))
        assert "was killed by SIGKILL" in stack.log.read_text()
        everything = [*psutil.Process(stack.process.pid).children(recursive=True)]

        stack.process.send_signal(signal.SIGKILL)
        stopped_s = seconds_until(gone(everything), "Redis, vLLM and the service ended with the killed stack", 60)
        report("classroom up killed: its Redis, vLLM and service gone after (s)", round(stopped_s, 1))


def test_a_service_that_keeps_dying_stops_the_whole_stack(vllm: Vllm) -> None:
    with classroom_up(vllm.base_url) as stack:  # the session's vLLM serves already: the stack starts only Redis
        redis = stack.children()["redis"]
        killed: set[int] = set()

        def new_service() -> psutil.Process | None:
            service = stack.children().get("service") if stack.process.poll() is None else None
            return service if service is not None and service.pid not in killed else None

        while stack.process.poll() is None:
            eventually(
                lambda: stack.process.poll() is not None or new_service() is not None,
                "a new service was started (or the stack ended)",
                60,
            )
            if (service := new_service()) is not None:
                service.send_signal(signal.SIGKILL)
                killed.add(service.pid)
        assert stack.process.wait(30) == 1 and len(killed) == MOST_RESTARTS + 1
        assert "stopping everything" in stack.log.read_text()
        eventually(gone([redis]), "Redis ended with the stack", 30)
        assert answers_ok(f"{vllm.root_url}/health"), "a vLLM the stack did not start is left alone"


def test_sigterm_stops_the_service_and_redis_in_order(vllm: Vllm) -> None:
    with classroom_up(vllm.base_url) as stack:
        # In development the stack makes the operator token (no well-known placeholder) and says it.
        said = re.search(r"Operators open \S+ with the token (\S+) \(kept in (\S+);", stack.log.read_text())
        assert said is not None, stack.log.read_text()
        token, kept = said.groups()
        assert Path(kept).read_text().strip() == token and Path(kept).stat().st_mode & 0o777 == 0o600
        status = f"{stack.url}/api/operator/status"
        assert httpx.get(status, headers={"Authorization": f"Bearer {token}"}).status_code == 200
        assert httpx.get(status, headers={"Authorization": "Bearer change-me"}).status_code == 403
        children = stack.children()
        stack.process.send_signal(signal.SIGTERM)  # as Ctrl-C, or a container's stop
        assert stack.process.wait(60) == 0
        eventually(gone(list(children.values())), "the service and Redis ended with the stopped stack", 30)
        assert "Stopping the service, vLLM and Redis." in stack.log.read_text()
        assert answers_ok(f"{vllm.root_url}/health")
