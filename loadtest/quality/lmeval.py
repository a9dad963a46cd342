"""(c) lm-eval (EleutherAI's lm-evaluation-harness) against a served variant: wikitext (word perplexity)
and hellaswag (accuracy), `--limit 100`, through vLLM's completions API (lm-eval's `local-completions`).

lm-eval downloads both datasets from the Hugging Face hub when it runs. Where the hub cannot be reached
(these build machines, CI, an offline school) nothing can be measured: this says so plainly and exits 2,
rather than letting a connection traceback pass for a result. lm-eval is not one of our dependencies
(it pulls torch and datasets): install it in a venv of its own, e.g.
    python3.11 -m venv .venv-lmeval && .venv-lmeval/bin/pip install 'lm-eval[api]'
"""

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import httpx

TASKS = ("wikitext", "hellaswag")
LIMIT = 100
# Where each task's dataset lives on the hub (lm-eval's task configs).
DATASETS = {"wikitext": "EleutherAI/wikitext_document_level", "hellaswag": "Rowan/hellaswag"}
UNREACHABLE = (
    "lm-eval cannot run here: its datasets ({datasets}) are downloaded from {endpoint} at run time, and {why}. "
    "Nothing was measured. Run this on a machine that reaches the hub (or with the datasets in the "
    "Hugging Face cache and HF_DATASETS_OFFLINE=1)."
)


@dataclass(frozen=True)
class Check:
    ok: bool
    message: str


def datasets_reachable(timeout_s: float = 5.0) -> Check:
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    names = ", ".join(DATASETS.values())
    if os.environ.get("HF_DATASETS_OFFLINE", "") not in ("", "0"):
        return Check(True, "HF_DATASETS_OFFLINE is set: lm-eval will read the local Hugging Face cache")
    if os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0"):
        return Check(False, UNREACHABLE.format(datasets=names, endpoint=endpoint, why="HF_HUB_OFFLINE is set"))
    try:
        response = httpx.get(f"{endpoint}/api/datasets/{DATASETS['hellaswag']}", timeout=timeout_s)
    except httpx.HTTPError as exc:
        return Check(False, UNREACHABLE.format(datasets=names, endpoint=endpoint, why=f"it is unreachable ({exc!r})"))
    if response.status_code != 200:
        why = f"it answered {response.status_code}"
        return Check(False, UNREACHABLE.format(datasets=names, endpoint=endpoint, why=why))
    return Check(True, f"{endpoint} answers")


def find_lm_eval(explicit: Path | None) -> Path | None:
    for candidate in (explicit, Path(".venv-lmeval/bin/lm_eval"), shutil.which("lm_eval")):
        if candidate is not None and Path(candidate).is_file():
            return Path(candidate)
    return None


def command(lm_eval: Path, base_url: str, model: str, tokenizer_dir: Path, output: Path) -> list[str]:
    model_args = ",".join(
        [
            f"model={model}",
            f"base_url={base_url.rstrip('/')}/completions",
            f"tokenizer={tokenizer_dir}",  # our local folder: lm-eval would fetch it from the hub otherwise
            "tokenizer_backend=huggingface",
            "tokenized_requests=False",
            "num_concurrent=1",
        ]
    )
    return [
        str(lm_eval), "--model", "local-completions", "--model_args", model_args,
        "--tasks", ",".join(TASKS), "--limit", str(LIMIT), "--output_path", str(output),
    ]  # fmt: skip


def run_lm_eval(lm_eval: Path, base_url: str, model: str, tokenizer_dir: Path, output: Path) -> Check:
    done = subprocess.run(
        command(lm_eval, base_url, model, tokenizer_dir, output), capture_output=True, text=True, check=False
    )
    if done.returncode == 0:
        return Check(True, done.stdout[-4000:])
    tail = (done.stdout + done.stderr)[-3000:]
    if any(
        word in tail
        for word in ("ConnectionError", "ConnectTimeout", "LocalEntryNotFoundError", "OfflineModeIsEnabled")
    ):
        return Check(
            False, "lm-eval could not fetch its datasets (the hub is unreachable): nothing was measured.\n" + tail
        )
    return Check(False, "lm-eval failed:\n" + tail)
