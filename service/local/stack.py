"""`classroom up`: Redis, vLLM and the service on 127.0.0.1, each started unless already running, and kept
running: this process supervises all three. The service runs as a child (`classroom serve`) that is started
again if it dies, so a crash or the kernel's OOM killer costs pupils a few seconds, not the stack; if it keeps
dying, everything stops. Redis and vLLM are started with PR_SET_PDEATHSIG, so that they stop with this process
however it ends (Ctrl-C, SIGTERM, or SIGKILL), never left running without a parent."""

import asyncio
import os
import secrets
import signal
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from types import FrameType

from service.classroom.accounts import Accounts
from service.local.model.prepare import announce, hub_reachable, prepare_model
from service.local.processes import ManagedProcess, ProcessFailed, answers_ok
from service.local.redis_server import is_ready as redis_ready
from service.local.redis_server import start_redis
from service.local.vllm_server import server as vllm_server
from service.local.vllm_server.flags import detect_device
from service.local.vllm_server.venv import ensure_vllm_venv
from service.settings import PLACEHOLDER_SECRET, Settings
from service.store import open_store


def _ensure_redis(settings: Settings, stack: ExitStack, say: Callable[[str], None]) -> None:
    if redis_ready(settings.redis.url):
        say(f"Redis: using the server already at {settings.redis.url}")
        return
    data_dir = settings.state_dir / "redis"
    log = settings.state_dir / "logs" / "redis.log"
    process = start_redis(
        settings.redis.url,
        settings.redis.port,
        data_dir,
        log,
        maxmemory_mb=settings.redis.maxmemory_mb,
        die_with_parent=True,
    )
    stack.callback(process.stop)
    say(f"Redis: started on port {settings.redis.port}, append-only file in {data_dir}")


def _ensure_vllm(settings: Settings, stack: ExitStack, say: Callable[[str], None]) -> None:
    backend = settings.backend
    if vllm_server.is_ready(backend.root_url):
        say(f"vLLM: using the server already at {backend.root_url}")
        return
    device = detect_device(backend.device)
    if ensure_vllm_venv(backend.venv, device):
        say(f"vLLM: installed into {backend.venv}")
    say(f"vLLM: starting on {device.upper()} (log: {settings.state_dir / 'logs'}); this takes about a minute")
    process = vllm_server.start_vllm(settings, settings.model.dir, device, die_with_parent=True)
    stack.callback(process.stop)
    say(f"vLLM: ready at {backend.base_url}, serving as {settings.served_name()}")


DEMO_TEACHER = "teacher@example.org"


async def _demo_teacher(settings: Settings) -> str:
    """A teacher account for trying the pages locally, its password kept beside the Redis data."""
    password_file = settings.state_dir / "demo-teacher-password.txt"
    async with open_store(settings.redis.url) as store:
        if await store.teacher_by_email(DEMO_TEACHER) is not None:
            if password_file.is_file():
                return f"{DEMO_TEACHER}, password {password_file.read_text().strip()} (from {password_file})"
            return f"{DEMO_TEACHER} exists; add another with `classroom teacher add EMAIL`"
        password = secrets.token_urlsafe(12)
        await Accounts(store, settings.auth).add_teacher(DEMO_TEACHER, "Demo Teacher", password)
        password_file.write_text(password + "\n")
        password_file.chmod(0o600)
        return f"{DEMO_TEACHER}, password {password} (kept in {password_file})"


def _operator_token(settings: Settings) -> tuple[str, Path] | None:
    """In development with the placeholder operator token (`change-me`, which anyone can guess on a dev server a
    school exposes): a random one, kept beside the Redis data like the demo teacher's password, for the service
    this stack runs. None where a token is set, or outside development (where the placeholder is refused)."""
    auth = settings.auth
    if settings.environment != "development" or auth.operator_token.get_secret_value() != PLACEHOLDER_SECRET:
        return None
    path = settings.state_dir / "operator-token.txt"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(24) + "\n")
        path.chmod(0o600)
    return path.read_text().strip(), path


# The service is started again after it dies, unless it died this many times within the window: then something
# is wrong that a restart does not mend (a port taken, a broken setting), and the stack stops whole.
MOST_RESTARTS = 5
RESTART_WINDOW_S = 60.0
SERVICE_START_S = 60.0


def _ended(returncode: int) -> str:
    if returncode >= 0:
        return f"exited with code {returncode}"
    name = signal.Signals(-returncode).name
    return f"was killed by {name}" + (
        " (the kernel's out-of-memory killer sends it, among others)" if name == "SIGKILL" else ""
    )


def supervise_service(settings: Settings, say: Callable[[str], None], env: dict[str, str] | None = None) -> None:
    """Run `classroom serve` (its output on this terminal, `env` its environment) until this process is told to
    stop; start it again each time it dies, unless it died `MOST_RESTARTS` times within `RESTART_WINDOW_S`."""
    argv = [str(Path(sys.executable).with_name("classroom")), "serve"]
    alive = f"http://{settings.api.host}:{settings.api.port}/healthz"
    deaths: list[float] = []
    while True:
        service = ManagedProcess("the service", argv, None, env=env, die_with_parent=True)
        service.start()
        assert service.popen is not None
        try:
            service.wait_until(lambda: answers_ok(alive), SERVICE_START_S)
            service.popen.wait()
        except ProcessFailed:  # it died before it answered, or never answered (then it was stopped)
            pass
        except BaseException:  # Ctrl-C, SIGTERM: stop it, then the rest (the caller's ExitStack)
            service.stop()
            raise
        why = f"The service {_ended(service.popen.wait())}."
        now = time.monotonic()
        deaths = [t for t in deaths if now - t < RESTART_WINDOW_S] + [now]
        if len(deaths) > MOST_RESTARTS:
            say(f"{why} It died {len(deaths)} times within {RESTART_WINDOW_S:.0f} s: stopping everything.")
            raise SystemExit(1)
        say(f"{why} Starting it again.")


def _stop_on_sigterm() -> None:
    """SIGTERM (a `kill`, a container's stop) ends the stack as Ctrl-C does: children stopped, in order."""

    def stop(signum: int, _: FrameType | None) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, stop)


def run_stack(settings: Settings, say: Callable[[str], None]) -> None:
    _stop_on_sigterm()
    device = detect_device(settings.backend.device)
    size = settings.model.resolved_size(device == "gpu", hub=hub_reachable())
    if ensure_vllm_venv(settings.backend.venv, device):  # before the model: the small one is converted there
        say(f"vLLM: installed into {settings.backend.venv}")
    model = settings.model
    manifest = prepare_model(
        model.dir,
        size,
        model.seed,
        standin=model.standin,
        vllm_venv=settings.backend.venv,
        cache=settings.state_dir / "cache",
    )
    say(announce(settings.model.dir, manifest))
    with ExitStack() as stack:
        _ensure_redis(settings, stack, say)
        _ensure_vllm(settings, stack, say)
        url = f"http://{settings.api.host}:{settings.api.port}"
        env = dict(os.environ)
        if settings.environment == "development":
            say(f"Teachers sign in at {url}/teacher as {asyncio.run(_demo_teacher(settings))}")
        if (operator := _operator_token(settings)) is not None:
            token, path = operator
            env["CLASSROOM_AUTH__OPERATOR_TOKEN"] = token
            say(
                f"Operators open {url}/operator with the token {token} "
                f"(kept in {path}; CLASSROOM_AUTH__OPERATOR_TOKEN sets your own)"
            )
        say(f"Pupils join at {url}/ with a class's code. API docs: {url}/docs")
        say(f"\nclassroom-assistant is up at {url}/. Ctrl-C stops it all.\n")
        try:
            supervise_service(settings, say, env)
        except KeyboardInterrupt:
            say("Stopping the service, vLLM and Redis.")
