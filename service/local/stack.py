"""`classroom up`: Redis, vLLM and the service on 127.0.0.1, each started unless already running."""

import asyncio
import secrets
from collections.abc import Callable
from contextlib import ExitStack

from service.app import serve
from service.classroom.accounts import Accounts
from service.local.model.prepare import announce, prepare_model
from service.local.redis_server import is_ready as redis_ready
from service.local.redis_server import start_redis
from service.local.vllm_server import server as vllm_server
from service.local.vllm_server.flags import detect_device
from service.local.vllm_server.venv import ensure_vllm_venv
from service.settings import Settings
from service.store import open_store


def _ensure_redis(settings: Settings, stack: ExitStack, say: Callable[[str], None]) -> None:
    if redis_ready(settings.redis.url):
        say(f"Redis: using the server already at {settings.redis.url}")
        return
    data_dir = settings.state_dir / "redis"
    process = start_redis(settings.redis.url, settings.redis.port, data_dir, settings.state_dir / "logs" / "redis.log")
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
    process = vllm_server.start_vllm(settings, settings.model.dir, device)
    stack.callback(process.stop)
    say(f"vLLM: ready at {backend.base_url}, serving as {backend.served_model_name}")


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


def run_stack(settings: Settings, say: Callable[[str], None]) -> None:
    on_gpu = detect_device(settings.backend.device) == "gpu"
    size = settings.model.resolved_size(on_gpu)
    manifest = prepare_model(settings.model.dir, size, settings.model.seed, standin=settings.model.standin)
    say(announce(settings.model.dir, manifest))
    with ExitStack() as stack:
        _ensure_redis(settings, stack, say)
        _ensure_vllm(settings, stack, say)
        url = f"http://{settings.api.host}:{settings.api.port}"
        if settings.environment == "development":
            say(f"Teachers sign in at {url}/teacher as {asyncio.run(_demo_teacher(settings))}")
        say(f"Pupils join at {url}/ with a class's code. API docs: {url}/docs")
        say(f"\nclassroom-assistant is up at {url}/. Ctrl-C stops it all.\n")
        serve(settings)
