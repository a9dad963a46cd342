"""Make a model folder: the real checkpoint from the hub where it is reachable, else the stand-in.

Every folder carries a manifest (`classroom-model.json`) that says which of the two it holds, so the
backend and the service can announce it; a stand-in is never passed off as the real model.
"""

import os
import shutil
from pathlib import Path
from typing import Literal

import httpx
from pydantic import BaseModel

from service.local.model.standin import SHAPES, build_standin, parameter_count
from service.settings import StandinSize

MANIFEST = "classroom-model.json"
HUB_REPOS: dict[StandinSize, str] = {
    "0.5b": "Qwen/Qwen2.5-0.5B-Instruct",
    "1.5b": "Qwen/Qwen2.5-1.5B-Instruct",
}
HUB_FILES = ["*.json", "*.safetensors", "*.txt", "*.jinja"]


class ModelManifest(BaseModel):
    kind: Literal["hub", "standin"]
    size: StandinSize
    seed: int | None = None
    repo: str | None = None
    parameters: int | None = None

    def describe(self) -> str:
        if self.kind == "hub":
            return f"the real checkpoint {self.repo}"
        return (
            f"the OFFLINE STAND-IN of Qwen2.5-{self.size.upper()}-Instruct (seed {self.seed}): the real "
            "tokenizer and shapes with random weights, so token counts and speed are real and the words "
            "are gibberish"
        )


def announce(model_dir: Path, manifest: ModelManifest) -> str:
    """A banner no one can miss, above all when the words will be gibberish."""
    rule = "=" * 78
    return f"{rule}\n{model_dir} holds {manifest.describe()}.\n{rule}"


def read_manifest(model_dir: Path) -> ModelManifest | None:
    path = model_dir / MANIFEST
    if not path.is_file():
        return None
    return ModelManifest.model_validate_json(path.read_text())


def hub_reachable(timeout_s: float = 5.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0"):
        return False
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    try:
        httpx.head(endpoint, timeout=timeout_s)
    except httpx.HTTPError:
        return False
    return True


def _download(repo: str, dest: Path) -> None:
    from huggingface_hub import snapshot_download  # imported late: it is only needed online

    snapshot_download(repo_id=repo, local_dir=dest, allow_patterns=HUB_FILES)


def prepare_model(dest: Path, size: StandinSize, seed: int, standin: bool = False) -> ModelManifest:
    """Fill `dest` with the requested model, reusing what is there when it already matches."""
    use_hub = size in HUB_REPOS and not standin and hub_reachable()
    existing = read_manifest(dest)
    if existing is not None and existing.size == size:
        if existing.kind == "hub" and not standin:
            return existing
        if existing.kind == "standin" and existing.seed == seed and not use_hub:
            return existing
    if dest.exists():
        shutil.rmtree(dest)

    if use_hub:
        repo = HUB_REPOS[size]
        _download(repo, dest)
        manifest = ModelManifest(kind="hub", size=size, repo=repo)
    else:
        build_standin(dest, size, seed)
        manifest = ModelManifest(kind="standin", size=size, seed=seed, parameters=parameter_count(SHAPES[size]))
    (dest / MANIFEST).write_text(manifest.model_dump_json(indent=2) + "\n")
    return manifest
