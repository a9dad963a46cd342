"""Soak: minutes of classroom load through the service on vLLM-CPU, with the memory of the service and of
Redis read at the start, every minute and at the end, every error counted, and every question sent
looked for among the stored records.

    .venv/bin/python -m benchmarks.soak [--minutes 10] [--rate 2] [--out benchmarks/results/soak.json]

Starts its own Redis (append-only file, fsync on every write, as the stack), vLLM-CPU on the tiny
stand-in and the service (`classroom serve`); the load is `classroom loadtest run --target service`:
classes of pupils who burst once and then ask one at a time, at a constant rate, for the whole time.
"""

import argparse
import json
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import redis

from loadtest.results import RunResult
from loadtest.stats import error_kind
from service.local.processes import ManagedProcess, answers_ok, free_port
from service.local.redis_server import start_redis
from service.local.vllm_server.flags import detect_device
from service.local.vllm_server.server import start_vllm
from service.settings import PROJECT_ROOT, BackendSettings, Settings

from .parts import CLASSROOM, standin_model

STATE = PROJECT_ROOT / "var" / "soak"
PASSWORD = "soak test password of a teacher"
TEACHER = "soak@school.example"


def rss_mib(pid: int) -> float:
    """Resident memory of a process and its living descendants (the service's workers)."""
    root = psutil.Process(pid)
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        try:
            total += proc.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total / 2**20


def sample(service_pid: int, redis_pid: int, redis_url: str, began: float) -> dict[str, float]:
    used = float(redis.Redis.from_url(redis_url).info("memory")["used_memory"]) / 2**20
    return {
        "at_s": round(time.monotonic() - began, 1),
        "service_rss_mib": round(rss_mib(service_pid), 1),
        "redis_rss_mib": round(rss_mib(redis_pid), 1),
        "redis_used_memory_mib": round(used, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=2.0, help="arrivals a second (a class's burst is one)")
    parser.add_argument("--classes", type=int, default=4)
    parser.add_argument("--pupils", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/soak.json"))
    args = parser.parse_args()
    model_dir, _ = standin_model()
    STATE.mkdir(parents=True, exist_ok=True)
    redis_port = free_port()
    redis_url = f"redis://127.0.0.1:{redis_port}/0"
    redis_process = start_redis(redis_url, redis_port, STATE / f"redis-{redis_port}", STATE / "redis.log")
    settings = Settings(state_dir=STATE, backend=BackendSettings(base_url=f"http://127.0.0.1:{free_port()}/v1"))
    vllm = start_vllm(settings, model_dir, detect_device(settings.backend.device))
    port = free_port()
    env = dict(os.environ) | {
        "CLASSROOM_REDIS__URL": redis_url,
        "CLASSROOM_BACKEND__BASE_URL": settings.backend.base_url,
        "CLASSROOM_MODEL__DIR": str(model_dir),
        "CLASSROOM_STATE_DIR": str(STATE),
        "CLASSROOM_API__PORT": str(port),
        "CLASSROOM_ANSWER__MAX_TOKENS": "32",
        "CLASSROOM_LIMITS__QUESTIONS_PER_MINUTE": "1000",
        "CLASSROOM_NEW_TEACHER_PASSWORD": PASSWORD,
        "CLASSROOM_LOADTEST_TEACHER_PASSWORD": PASSWORD,
    }
    subprocess.run([CLASSROOM, "teacher", "add", TEACHER], env=env, check=True, capture_output=True)
    service = ManagedProcess("service", [CLASSROOM, "serve"], STATE / f"service-{port}.log", env=env)
    service.start()
    url = f"http://127.0.0.1:{port}"
    service.wait_until(lambda: answers_ok(f"{url}/readyz"), 60)
    try:
        began = time.monotonic()
        samples = [sample(service.pid, redis_process.pid, redis_url, began)]
        stop = threading.Event()

        def every_minute() -> None:
            while not stop.wait(60):
                samples.append(sample(service.pid, redis_process.pid, redis_url, began))

        sampler = threading.Thread(target=every_minute, daemon=True)
        sampler.start()
        seconds = args.minutes * 60
        trickle = int(seconds * args.rate / args.classes)
        run_file = STATE / "soak-run.json"
        load = [
            CLASSROOM, "loadtest", "run", "--target", "service", "--url", url, "--teacher-email", TEACHER,
            "--workload", "classroom", "--classes", str(args.classes), "--pupils", str(args.pupils),
            "--trickle", str(trickle), "--profile", "constant", "--rate", str(args.rate),
            "--requests", str(args.classes * (args.pupils + trickle)), "--max-seconds", str(seconds + 120),
            "--model-dir", str(model_dir), "--out", str(run_file),
        ]  # fmt: skip
        subprocess.run(load, env=env, check=True, capture_output=True)
        stop.set()
        samples.append(sample(service.pid, redis_process.pid, redis_url, began))
        result = RunResult.load(run_file)
        records = result.benchmarks[0].requests
        # empty_answer: the stand-in's random tokens all decoded to nothing (stats.error_kind), not a fault.
        errors: dict[str, int] = {}
        for r in records:
            if not r.ok:
                errors[error_kind(r)] = errors.get(error_kind(r), 0) + 1
        stored = _stored_questions(url, settings)
        sent = len(records) + result.config.warmup_requests
        summary: dict[str, Any] = {
            "minutes": round((time.monotonic() - began) / 60, 1),
            "questions_sent": sent,
            "questions_stored": stored,
            "answered": sum(1 for r in records if r.ok),
            "errors": errors,
            "samples": samples,
            "service_rss_start_end_mib": [samples[0]["service_rss_mib"], samples[-1]["service_rss_mib"]],
            "redis_rss_start_end_mib": [samples[0]["redis_rss_mib"], samples[-1]["redis_rss_mib"]],
            "setup": f"{args.classes} classes of {args.pupils} pupils, a burst each then single questions at "
            f"{args.rate:g} arrivals/s, 32-token answers, the tiny stand-in on vLLM-CPU, 1 service worker, "
            f"Redis with fsync always, on {os.cpu_count()} cores",
        }
    finally:
        service.stop()
        vllm.stop()
        redis_process.stop()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "samples"}, indent=1))  # noqa: T201


def _stored_questions(url: str, settings: Settings) -> int:
    """Every question the service holds, as its operators' figures count them over the last hours."""
    token = settings.auth.operator_token.get_secret_value()
    stats = httpx.get(
        f"{url}/api/operator/stats", params={"window_s": 24 * 3600}, headers={"Authorization": f"Bearer {token}"}
    )
    stats.raise_for_status()
    questions: int = stats.json()["overall"]["questions"]
    return questions


if __name__ == "__main__":
    main()
