"""Start, probe and stop a vLLM server with the flags of `service.local.vllm_server.flags`."""

import os
from pathlib import Path

from service.local.processes import ManagedProcess, answers_ok
from service.local.vllm_server.flags import serve_command, serve_env
from service.settings import Device, Settings


def is_ready(root_url: str) -> bool:
    """vLLM opens its port only when the engine is ready; then /health answers 200 at once."""
    return answers_ok(f"{root_url}/health")


def vllm_process(
    settings: Settings, model_dir: Path, device: Device, *, pid_file: bool = False, die_with_parent: bool = False
) -> ManagedProcess:
    backend = settings.backend
    return ManagedProcess(
        "vLLM",
        serve_command(backend, model_dir, device),
        settings.state_dir / "logs" / f"vllm-{backend.port}.log",
        env=serve_env(backend, device, dict(os.environ)),
        pid_path=pid_path(settings) if pid_file else None,
        die_with_parent=die_with_parent,
    )


def pid_path(settings: Settings) -> Path:
    return settings.state_dir / "run" / f"vllm-{settings.backend.port}.pid"


def pid_paths(settings: Settings) -> list[Path]:
    """The pid files of every vLLM `classroom backend start` left running, on any port."""
    return sorted((settings.state_dir / "run").glob("vllm-*.pid"))


def port_of(path: Path) -> int:
    return int(path.stem.removeprefix("vllm-"))


def start_vllm(
    settings: Settings, model_dir: Path, device: Device, *, pid_file: bool = False, die_with_parent: bool = False
) -> ManagedProcess:
    """Start vLLM and wait until it serves; returns the running process."""
    process = vllm_process(settings, model_dir, device, pid_file=pid_file, die_with_parent=die_with_parent)
    process.start()
    process.wait_until(lambda: is_ready(settings.backend.root_url), settings.backend.startup_timeout_s)
    return process
