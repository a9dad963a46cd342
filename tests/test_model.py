"""The stand-in: Qwen2.5's tokenizer and shapes, reproducible, and never passed off as the real model."""

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from service.backends.tokens import ModelTokenizer
from service.cli import app
from service.local.model.standin import SHAPES, parameter_count, random_weights
from service.model_manifest import read_manifest

pytestmark = pytest.mark.slow  # builds the stand-in's folder and loads its tokenizer

# ../shared/MODEL.md: Qwen2.5's default system turn, as the real tokenizer encodes it.
DEFAULT_SYSTEM_TURN = (
    "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
)
DEFAULT_SYSTEM_IDS = [151644, 8948, 198, 2610, 525, 1207, 16948, 11, 3465, 553, 54364, 14817, 13, 1446, 525, 264,
                      10950, 17847, 13, 151645, 198]  # fmt: skip


def test_tokenizer_encodes_the_default_system_turn_like_qwen(model_dir: Path) -> None:
    tokenizer = ModelTokenizer.from_model_dir(model_dir)
    assert tokenizer.encode(DEFAULT_SYSTEM_TURN) == DEFAULT_SYSTEM_IDS


def test_chat_template_inserts_qwens_default_system_prompt_when_none_is_given(model_dir: Path) -> None:
    tokenizer = ModelTokenizer.from_model_dir(model_dir)
    ids = tokenizer.chat_ids([{"role": "user", "content": "Why do bees dance?"}])
    assert ids[: len(DEFAULT_SYSTEM_IDS)] == DEFAULT_SYSTEM_IDS
    assert tokenizer.render_chat([{"role": "system", "content": "S"}]).startswith("<|im_start|>system\nS<|im_end|>")


def test_special_tokens_have_qwens_ids(model_dir: Path) -> None:
    tokenizer = ModelTokenizer.from_model_dir(model_dir)
    assert tokenizer.encode("<|endoftext|><|im_start|><|im_end|><|file_sep|>") == [151643, 151644, 151645, 151664]


def test_shapes_have_the_real_parameter_counts() -> None:
    # Qwen2.5-0.5B-Instruct and -1.5B-Instruct, as their model cards count them (embedding tied).
    assert parameter_count(SHAPES["0.5b"]) == 494_032_768
    assert parameter_count(SHAPES["1.5b"]) == 1_543_714_304
    assert all(shape.head_dim in (64, 128) for shape in SHAPES.values())


def test_weights_depend_only_on_the_seed() -> None:
    first, again, other = (random_weights(SHAPES["tiny"], seed) for seed in (7, 7, 8))
    name = "model.layers.1.mlp.down_proj.weight"
    assert np.array_equal(first[name], again[name])
    assert not np.array_equal(first[name], other[name])
    assert first[name].dtype.name == "bfloat16"


def test_prepare_says_loudly_that_it_built_the_standin(tmp_path: Path) -> None:
    dest = tmp_path / "m"
    result = CliRunner().invoke(app, ["model", "prepare", "--size", "tiny", "--dest", str(dest)])
    assert result.exit_code == 0, result.output
    assert "OFFLINE STAND-IN of Qwen2.5-TINY-Instruct" in result.output
    manifest = read_manifest(dest)
    assert manifest is not None and manifest.kind == "standin"
    config = json.loads((dest / "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForCausalLM"] and config["vocab_size"] == 151936
