"""The local stack's second variant: an FP8_DYNAMIC copy of its model folder, made by the deployment's own script
(deploy/scripts/compress-fp8.sh: llmcompressor in a virtual environment of its own, ~1.5 GB the first time) and
kept, like the model itself, for as long as the source is the same model."""

import os
import subprocess
import sys
from pathlib import Path

from service.model_manifest import ModelManifest, read_manifest
from service.settings import PROJECT_ROOT

COMPRESS = PROJECT_ROOT / "deploy" / "scripts" / "compress-fp8.sh"


class CopyFailed(RuntimeError):
    pass


def current_copy(src: Path, dst: Path) -> ModelManifest | None:
    """`dst`'s manifest if it is a quantized copy of the model `src` holds now (its manifest names the
    quantization, and says the rest as the source's does); None if it must be made (again)."""
    source, copy = read_manifest(src), read_manifest(dst)
    if source is None or copy is None or copy.quantization is None:
        return None
    return copy if copy.model_copy(update={"quantization": None}) == source else None


def prepare_fp8_copy(src: Path, dst: Path) -> ModelManifest:
    """The FP8 copy of `src` in `dst`, made if it is not there (the script's output on this terminal)."""
    if (copy := current_copy(src, dst)) is not None:
        return copy
    env = os.environ | {"PYTHON": os.environ.get("PYTHON", sys.executable)}  # the venv's Python makes its venv
    done = subprocess.run([str(COMPRESS), str(src), str(dst)], env=env, check=False)
    if done.returncode != 0:
        raise CopyFailed(f"{COMPRESS.relative_to(PROJECT_ROOT)} {src} {dst} ended with code {done.returncode}")
    if (copy := current_copy(src, dst)) is None:
        raise CopyFailed(f"{dst} holds no FP8 copy of {src} after {COMPRESS.name}: its manifest does not say so")
    return copy
