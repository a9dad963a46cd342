"""The one place where vLLM's command line and environment are decided, for every way we start it."""

import shutil
import subprocess
from pathlib import Path
from typing import Literal

from service.model_manifest import context_length, served_name
from service.settings import BackendSettings, Device

LAUNCHER = Path(__file__).with_name("launch_vllm_cpu.py")
# On AVX2-only CPUs bf16 falls back to kernels so slow that a 1.5B model takes minutes to start; the KV
# cache takes this dtype too, which `classroom capacity` needs to know.
CPU_DTYPE = "float32"


def detect_device(setting: Literal["auto", Device]) -> Device:
    if setting != "auto":
        return setting
    smi = shutil.which("nvidia-smi")
    if smi and subprocess.run([smi, "-L"], capture_output=True, check=False).returncode == 0:
        return "gpu"
    return "cpu"


def serve_flags(backend: BackendSettings, model_dir: Path, device: Device) -> list[str]:
    flags = [
        str(model_dir),
        "--host", backend.host,
        "--port", str(backend.port),
        "--served-model-name", served_name(model_dir, backend.served_model_name),
        "--max-model-len", str(context_length(model_dir, backend.max_model_len)),
        "--enable-prefix-caching",
        "--enable-prompt-tokens-details",  # usage carries prompt_tokens_details.cached_tokens
    ]  # fmt: skip
    if backend.max_num_seqs is not None:
        flags += ["--max-num-seqs", str(backend.max_num_seqs)]
    if device == "cpu":
        # Eager mode skips torch.compile (20-30 s faster start).
        flags += ["--enforce-eager", "--dtype", CPU_DTYPE]
    return flags


def serve_command(backend: BackendSettings, model_dir: Path, device: Device) -> list[str]:
    if device == "cpu":
        python = str(venv_python(backend.venv))
        return [python, str(LAUNCHER), "serve", *serve_flags(backend, model_dir, device)]
    return [str(backend.venv / "bin" / "vllm"), "serve", *serve_flags(backend, model_dir, device)]


def serve_env(backend: BackendSettings, device: Device, base: dict[str, str]) -> dict[str, str]:
    env = dict(base)
    env |= {
        "HF_HUB_OFFLINE": "1",  # the model folder is already local; never reach for the hub at start
        "VLLM_NO_USAGE_STATS": "1",
        "VLLM_HOST_IP": backend.host,
    }
    if device == "cpu":
        env |= {
            "VLLM_TARGET_DEVICE": "cpu",
            "VLLM_CPU_KVCACHE_SPACE": str(backend.cpu_kvcache_gib),
            "VLLM_CPU_OMP_THREADS_BIND": backend.cpu_omp_threads_bind,
            # Engine in the API server's process: ready in ~32 s instead of ~45 s on 2 cores.
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        }
    return env


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"
