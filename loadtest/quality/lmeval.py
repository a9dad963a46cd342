"""(c) lm-eval (EleutherAI's lm-evaluation-harness) against a served variant, offline: two local tasks built
from the project's own passages (passages.json), run through vLLM's completions API (lm-eval's
`local-completions`, tokenising with the model folder's own tokenizer):

- `classroom_passages`: perplexity of the model on the passages themselves (word and byte perplexity, bits
  per byte): how surprised the model is by the texts a class reads. FP8 moving it is damage a pupil never
  sees directly but every answer rests on.
- `classroom_comprehension`: a multiple-choice comprehension test made of the rubric questions: the passage,
  the question, four answers (the right one, the misconception, two plausible others; "The passage does not
  say." is right where it does not), scored by the loglikelihood of each answer (accuracy, and accuracy
  normalised by length).

Both are lm-eval YAML tasks over local JSON Lines files, written into the output folder at run time (the data
files' paths are absolute), so nothing is fetched from the hub. lm-eval lives in a venv of its own
(.venv-lmeval, pinned in lmeval-requirements.txt): it is a tool of the load tester, never of the service.
Its hub tasks (wikitext, hellaswag) can still be named where the hub answers.
"""

import json
import os
import random
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from loadtest.quality.rubric import Rubrics

LOCAL_TASKS = ("classroom_passages", "classroom_comprehension")
VENV = Path(".venv-lmeval")
REQUIREMENTS = Path(__file__).with_name("lmeval-requirements.txt")
LM_EVAL = "lm-eval==0.4.13"  # installed without its dependencies: its core pins scikit-learn, rouge, ...
NOT_TOLD_CHOICE = "The passage does not say."


@dataclass(frozen=True)
class Check:
    ok: bool
    message: str


def comprehension_docs(rubrics: Rubrics, seed: int = 0) -> list[dict[str, object]]:
    """Each rubric question as a multiple-choice item; the right answer's place is shuffled (seeded)."""
    shuffle = random.Random(seed)
    docs: list[dict[str, object]] = []
    for passage in rubrics.passages:
        for q in passage.questions:
            order = list(range(len(q.choices)))
            shuffle.shuffle(order)
            choices = [q.choices[i] for i in order]
            docs.append(
                {"title": passage.title, "text": passage.text, "question": q.question, "kind": q.kind,
                 "choices": choices, "answer": order.index(0)}
            )  # fmt: skip
    return docs


def write_tasks(rubrics: Rubrics, folder: Path) -> Path:
    """The two tasks' YAML and data files in `folder` (lm-eval's --include_path)."""
    folder.mkdir(parents=True, exist_ok=True)
    passages = folder / "classroom_passages.jsonl"
    passages.write_text("".join(json.dumps({"title": p.title, "text": p.text}) + "\n" for p in rubrics.passages))
    questions = folder / "classroom_comprehension.jsonl"
    questions.write_text("".join(json.dumps(d) + "\n" for d in comprehension_docs(rubrics)))
    local = {"dataset_path": "json", "test_split": "train"}
    tasks = {
        "classroom_passages": {
            **local,
            "dataset_kwargs": {"data_files": str(passages.resolve())},
            "output_type": "loglikelihood_rolling",
            "doc_to_text": "",
            "doc_to_target": "{{text}}",
            "metric_list": [{"metric": m} for m in ("word_perplexity", "byte_perplexity", "bits_per_byte")],
        },
        "classroom_comprehension": {
            **local,
            "dataset_kwargs": {"data_files": str(questions.resolve())},
            "output_type": "multiple_choice",
            "doc_to_text": "Passage: {{title}}\n\n{{text}}\n\nQuestion: {{question}}\nAnswer:",
            "doc_to_choice": "{{choices}}",
            "doc_to_target": "{{answer}}",
            "metric_list": [
                {"metric": m, "aggregation": "mean", "higher_is_better": True} for m in ("acc", "acc_norm")
            ],
        },
    }
    for name, spec in tasks.items():
        # JSON is YAML: lm-eval reads these as its own task files.
        (folder / f"{name}.yaml").write_text(json.dumps({"task": name, **spec}, indent=1) + "\n")
    return folder


def lm_eval_program(venv: Path = VENV) -> Path:
    return venv / "bin" / "lm_eval"


def ensure_installed(venv: Path = VENV) -> Path:
    """lm-eval and the few packages its local-completions path imports, pinned, in a venv of its own."""
    program = lm_eval_program(venv)
    marker = venv / ".installed"
    if program.is_file() and marker.is_file() and marker.read_text() == REQUIREMENTS.read_text():
        return program
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "--no-deps", LM_EVAL], check=True)
    subprocess.run([*pip, "--no-warn-conflicts", "-r", str(REQUIREMENTS)], check=True)
    marker.write_text(REQUIREMENTS.read_text())
    return program


@dataclass(frozen=True)
class LmEvalRun:
    """One lm-eval run of some tasks against a served model."""

    lm_eval: Path
    base_url: str
    model: str
    tokenizer_dir: Path  # the served model's folder: nothing is fetched from the hub
    tasks: list[str]
    include: Path
    output: Path
    limit: int | None = None

    def command(self) -> list[str]:
        model_args = ",".join(
            [
                f"model={self.model}",
                f"base_url={self.base_url.rstrip('/')}/completions",
                f"tokenizer={self.tokenizer_dir}",
                "tokenizer_backend=huggingface",
                "tokenized_requests=False",
                "num_concurrent=4",
                "max_retries=1",
            ]
        )
        return [
            str(self.lm_eval), "run", "--model", "local-completions", "--model_args", model_args,
            "--tasks", ",".join(self.tasks), "--include_path", str(self.include), "--output_path", str(self.output),
            *(["--limit", str(self.limit)] if self.limit else []),
        ]  # fmt: skip


def run_lm_eval(run: LmEvalRun) -> Check:
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    if any(task not in LOCAL_TASKS for task in run.tasks):
        env.pop("HF_DATASETS_OFFLINE")
        env.pop("HF_HUB_OFFLINE")
    done = subprocess.run(run.command(), capture_output=True, text=True, check=False, env=env)
    if done.returncode == 0:
        return Check(True, done.stdout[-4000:])
    return Check(False, "lm-eval failed:\n" + (done.stdout + done.stderr)[-3000:])


def read_results(output: Path) -> dict[str, dict[str, float]]:
    """lm-eval's figures per task, from the newest results file it wrote under `output`."""
    files = sorted(output.rglob("results_*.json"), key=lambda p: p.stat().st_mtime)
    if not files:
        return {}
    results: dict[str, dict[str, object]] = json.loads(files[-1].read_text())["results"]
    return {
        task: {k.split(",")[0]: float(v) for k, v in figures.items() if isinstance(v, int | float)}
        for task, figures in results.items()
    }
