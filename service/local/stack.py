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
from service.local.model.fp8 import current_copy, prepare_fp8_copy
from service.local.model.prepare import announce, hub_reachable, prepare_model
from service.local.processes import ManagedProcess, ProcessFailed, answers_ok
from service.local.redis_server import is_ready as redis_ready
from service.local.redis_server import start_redis
from service.local.vllm_server import server as vllm_server
from service.local.vllm_server.flags import detect_device
from service.local.vllm_server.venv import ensure_vllm_venv
from service.model_manifest import ModelManifest
from service.records import BackendConfig, Variant
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


def _ensure_vllm(
    settings: Settings, model_dir: Path, stack: ExitStack, say: Callable[[str], None], variant: str = "original"
) -> None:
    """vLLM serving `model_dir` on `settings.backend.base_url` (the variant `variant`), unless one serves there."""
    backend = settings.backend
    if vllm_server.is_ready(backend.root_url):
        say(f"vLLM ({variant}): using the server already at {backend.root_url}")
        return
    device = detect_device(backend.device)
    if ensure_vllm_venv(backend.venv, device):
        say(f"vLLM: installed into {backend.venv}")
    say(f"vLLM ({variant}): starting on {device.upper()} (log: {settings.state_dir / 'logs'}); about a minute")
    process = vllm_server.start_vllm(settings, model_dir, device, die_with_parent=True)
    stack.callback(process.stop)
    say(f"vLLM ({variant}): ready at {backend.base_url}, serving {model_dir} as {settings.served_name(model_dir)}")


def _on_fp8_port(settings: Settings) -> Settings:
    """The settings of the FP8 variant's vLLM: the same but for its address."""
    backend = settings.backend.model_copy(update={"base_url": settings.backend.fp8_base_url})
    return settings.model_copy(update={"backend": backend})


def stack_variants(settings: Settings, original: ModelManifest, fp8: ModelManifest | None) -> dict[str, Variant]:
    """The variants this stack serves, each described as what it is."""
    model = settings.model
    served = {"original": Variant(replicas=[settings.backend.base_url], description=f"{original.name} ({model.dir})")}
    if fp8 is not None:
        served["fp8"] = Variant(
            replicas=[settings.backend.fp8_base_url],
            description=f"{fp8.name}, its FP8_DYNAMIC copy by llmcompressor ({model.fp8_dir})",
        )
    return served


async def declare_variants(settings: Settings, served: dict[str, Variant], say: Callable[[str], None]) -> None:
    """The shared configuration holds the variants this stack serves, as served now; the operator's choices
    (active, canary) stay, unless they name the stack's FP8 variant and this run does not serve it (`make run`
    after `make run FP8=1`): then the original is active again."""
    fp8 = Variant(replicas=[settings.backend.fp8_base_url])

    def declare(config: BackendConfig) -> BackendConfig:
        for name, variant in served.items():
            config = config.with_variant(name, variant)
        if "fp8" in served or config.variants.get("fp8", fp8).replicas != fp8.replicas:
            return config
        if config.canary is not None and config.canary.variant == "fp8":
            config = config.with_canary(None)
        return config.with_active("original") if config.active == "fp8" else config

    async with open_store(settings.redis.url) as store:
        await store.seed_backend_config(BackendConfig(active="original", variants=served))
        before = await store.backend_config()
        after = await store.update_backend_config(declare)
    if before is not None and before.active != after.active:
        say(f"The active variant was '{before.active}', which this run does not serve: now '{after.active}'.")


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
    fp8 = None
    if model.fp8:
        if current_copy(model.dir, model.fp8_dir) is None:
            say(f"FP8: making the copy of {model.dir} in {model.fp8_dir} (llmcompressor: ~1.5 GB the first time)")
        fp8 = prepare_fp8_copy(model.dir, model.fp8_dir)
        say(announce(model.fp8_dir, fp8))
    with ExitStack() as stack:
        _ensure_redis(settings, stack, say)
        _ensure_vllm(settings, model.dir, stack, say)
        if fp8 is not None:
            _ensure_vllm(_on_fp8_port(settings), model.fp8_dir, stack, say, variant="fp8")
        if settings.routing.backends_file is None:  # a file declares its own variants
            asyncio.run(declare_variants(settings, stack_variants(settings, manifest, fp8), say))
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
