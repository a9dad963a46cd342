"""`classroom capacity`: the seed's KV arithmetic, held against the KV sizes vLLM itself reports."""

import json
import re
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from service.cli import app
from service.local import capacity as cap
from service.local.model.standin import SHAPES, model_config, parameter_count, random_weights
from service.local.vllm_server.flags import CPU_DTYPE, detect_device
from service.local.vllm_server.server import vllm_process
from service.settings import BackendSettings, Settings
from tests.figures import report
from tests.servers import STATE, Vllm

KIB, MIB = 1 << 10, 1 << 20

# The lent H200 as CUDA sees it (torch.cuda.mem_get_info()[1] there, 2026-12-02): 139.80 GiB.
H200_BYTES = 150_109_880_320
# shared/gpu/README.md: vLLM 0.26.0 on that H200, stand-in 1.5B in bf16, --gpu-memory-utilization 0.92.
H200_REFERENCE_TOKENS = 4_675_312
H200_REFERENCE_UTILIZATION = 0.92
# What vLLM keeps besides weights and cache there (activation peak of its profiling run, CUDA context,
# CUDA graphs) is a few hundred MiB to ~1 GiB, under 1% of the ~127 GiB the arithmetic hands the cache.
GPU_REFERENCE_TOLERANCE = 0.01


def facts(size: str) -> cap.ModelFacts:
    """The stand-in's facts without writing its weights: its config, and bf16 weights of its shapes."""
    shape = SHAPES[size]  # type: ignore[index]
    config = cap.HfConfig.model_validate(model_config(shape))
    return cap.ModelFacts.from_config(config, weight_bytes=parameter_count(shape) * cap.DTYPE_BYTES["bfloat16"])


def test_the_seeds_worked_example() -> None:
    # 32 layers, 8 KV heads, head dim 128, 2 bytes: 128 KiB a token, 512 MiB for 4,096 tokens.
    per_token = cap.kv_bytes_per_token(layers=32, kv_heads=8, head_dim=128, dtype_bytes=2)
    assert per_token == 128 * KIB
    assert per_token * 4096 == 512 * MIB


def test_the_seeds_worked_example_is_one_command_from_its_shape() -> None:
    shape = ["capacity", "--layers", "32", "--kv-heads", "8", "--head-dim", "128", "--kv-dtype", "bfloat16"]
    printed = CliRunner().invoke(app, [*shape, "--json", "--class-size", "30", "--passage-tokens", "1000"])
    assert printed.exit_code == 0, printed.output
    plan = cap.CapacityPlan.model_validate(json.loads(printed.output))
    assert plan.kv_bytes_per_token == 128 * KIB and plan.request_bytes == 512 * MIB and not plan.weight_bytes_read
    # 30 pupils of 1,000 + 128 + 256 tokens in 128-token blocks (vLLM-CPU): 11 blocks each, alone; sharing, the
    # passage's 7 whole blocks once and 4 blocks a pupil.
    block = 128 * 128 * KIB
    assert (plan.class_bytes_alone, plan.class_bytes_sharing) == (30 * 11 * block, (7 + 30 * 4) * block)
    text = CliRunner().invoke(app, shape).output
    assert "KV per token        131,072 B (128.00 KiB)" in text and "KV of one request   512.00 MiB" in text


def test_kv_bytes_per_token_of_qwen2_5_as_model_md_gives_them() -> None:
    # shared/MODEL.md: 1.5B -> 28,672 B (28 KiB), 0.5B -> 12,288 B (12 KiB) in bf16.
    for size, expected in (("1.5b", 28 * KIB), ("0.5b", 12 * KIB)):
        model = facts(size)
        assert model.dtype == "bfloat16"
        assert cap.kv_bytes_per_token(model.layers, model.kv_heads, model.head_dim, 2) == expected


def test_weight_bytes_from_the_safetensors_headers_are_the_arrays_bytes(model_dir: Path) -> None:
    model = cap.ModelFacts.from_dir(model_dir)
    arrays = random_weights(SHAPES["tiny"], seed=0)
    assert model.weight_bytes == sum(a.nbytes for a in arrays.values())
    assert model.weight_bytes == parameter_count(SHAPES["tiny"]) * cap.DTYPE_BYTES["bfloat16"]
    assert (model.layers, model.kv_heads, model.head_dim) == (2, 1, 128)


@given(
    cache_tokens=st.integers(0, 2_000_000),
    passage=st.integers(0, 4000),
    question=st.integers(1, 300),
    answer=st.integers(1, 600),
)
def test_pupils_with_one_token_blocks_follow_the_plain_formulas(
    cache_tokens: int, passage: int, question: int, answer: int
) -> None:
    shape = cap.ClassShape(passage=passage, question=question, answer=answer)
    # Each pupil alone: N x (passage + question + answer); sharing: passage + N x (question + answer).
    assert shape.pupils_alone(cache_tokens, 1) == cache_tokens // (passage + question + answer)
    assert shape.pupils_sharing(cache_tokens, 1) == max(0, cache_tokens - passage) // (question + answer)


@given(
    blocks=st.integers(0, 200_000),
    block=st.sampled_from([1, 16, 128]),
    passage=st.integers(0, 4000),
    question=st.integers(1, 300),
    answer=st.integers(1, 600),
)
def test_sharing_the_passage_never_fits_fewer_pupils(
    blocks: int, block: int, passage: int, question: int, answer: int
) -> None:
    shape = cap.ClassShape(passage=passage, question=question, answer=answer)
    alone, sharing = shape.pupils_alone(blocks, block), shape.pupils_sharing(blocks, block)
    assert sharing >= alone
    # Whole blocks: the shared passage and what the pupils hold never exceed the cache.
    if sharing:
        per_pupil = cap.blocks_for(passage % block + question + answer, block)
        assert passage // block + sharing * per_pupil <= blocks


def test_only_whole_blocks_of_the_passage_are_shared() -> None:
    # 1,000-token passage in 128-token blocks: 7 shared blocks; each pupil holds the 104-token tail + 30 + 98.
    shape = cap.ClassShape(passage=1000, question=30, answer=98)
    assert shape.pupils_sharing(cache_blocks=7 + 2 * 10, block_tokens=128) == 10
    assert shape.pupils_sharing(cache_blocks=7 + 2 * 10 - 1, block_tokens=128) == 9


def test_gpu_arithmetic_is_an_upper_bound_within_1_percent_of_vllm_on_the_h200() -> None:
    model = facts("1.5b")
    cache = cap.gpu_cache_bytes(H200_BYTES, H200_REFERENCE_UTILIZATION, model.weight_bytes)
    result = cap.plan(
        Path("1.5b"),
        model,
        "gpu",
        cache,
        kv_dtype="bfloat16",
        block_tokens=cap.BLOCK_TOKENS["gpu"],
        max_model_len=4096,
        class_shape=cap.ClassShape(passage=1000, question=30, answer=128),
    )
    over = result.cache_tokens / H200_REFERENCE_TOKENS - 1
    unseen = (result.cache_tokens - H200_REFERENCE_TOKENS) * result.kv_bytes_per_token / cap.GIB
    figure = f"{result.cache_tokens:,} vs {H200_REFERENCE_TOKENS:,} (+{over:.2%}"
    report("capacity, 1.5B bf16 on the H200 at 0.92: ours vs vLLM 0.26 (tokens)",
           f"{figure}; {unseen:.2f} GiB vLLM keeps besides weights and cache)")  # fmt: skip
    assert 0 <= over <= GPU_REFERENCE_TOLERANCE


def test_capacity_matches_the_kv_cache_vllm_cpu_reports(vllm: Vllm, model_dir: Path) -> None:
    # The session's vLLM-CPU, started by tests/conftest.py with the default backend settings.
    settings = Settings(state_dir=STATE, backend=BackendSettings(base_url=vllm.base_url))
    device = detect_device(settings.backend.device)
    log_path = vllm_process(settings, model_dir, device).log_path
    assert log_path is not None
    log = log_path.read_text(errors="replace")
    # e.g. "CPU KV cache size: 524,288 tokens, Maximum concurrency for 4,096 tokens per request: 128.00x"
    found = re.findall(r"KV cache size: ([\d,]+) tokens, Maximum concurrency .* per request: ([\d.]+)x", log)
    assert found, f"no KV cache size line in vLLM's log {log_path}"
    vllm_tokens, vllm_concurrency = int(found[-1][0].replace(",", "")), float(found[-1][1])

    model = cap.ModelFacts.from_dir(model_dir)
    cache, _ = cap.cpu_cache(settings.backend.cpu_kvcache_gib)
    result = cap.plan(
        model_dir,
        model,
        "cpu",
        cache,
        kv_dtype=cap.resolve_kv_dtype("auto", model, "cpu"),
        block_tokens=vllm.block_size(),
        max_model_len=settings.context_length(model_dir),
        class_shape=cap.ClassShape(passage=600, question=30, answer=48),
    )
    report(
        "capacity, tiny stand-in on vLLM-CPU: ours vs vLLM's log (tokens)",
        f"{result.cache_tokens:,} vs {vllm_tokens:,}",
    )
    assert result.kv_dtype == CPU_DTYPE
    assert abs(result.cache_tokens - vllm_tokens) <= 0.05 * vllm_tokens
    assert abs(result.concurrency_at_max_model_len - vllm_concurrency) <= 0.05 * vllm_concurrency


def test_cli_prints_the_plan_of_the_module(model_dir: Path) -> None:
    runner = CliRunner()
    as_json = runner.invoke(app, ["capacity", "--model-dir", str(model_dir), "--json", "--cpu-kvcache-gib", "2"])
    assert as_json.exit_code == 0, as_json.output
    printed = cap.CapacityPlan.model_validate(json.loads(as_json.output))
    model = cap.ModelFacts.from_dir(model_dir)
    assert printed.cache_bytes == 2 * cap.GIB
    assert printed.kv_bytes_per_token == cap.kv_bytes_per_token(model.layers, model.kv_heads, model.head_dim, 4)
    assert printed.cache_tokens == 2 * cap.GIB // printed.kv_bytes_per_token

    text = runner.invoke(
        app, ["capacity", "--model-dir", str(model_dir), "--gpu-memory-gib", "80", "--kv-dtype", "fp8"]
    )
    assert text.exit_code == 0, text.output
    assert "upper bound" in text.output and "in fp8" in text.output
    assert f"{model.weight_bytes:,} B" in text.output

    refused = runner.invoke(app, ["capacity", "--model-dir", str(model_dir), "--kv-dtype", "int3"])
    assert refused.exit_code != 0
    not_a_model = runner.invoke(app, ["capacity", "--model-dir", str(model_dir / "nowhere")])
    assert not_a_model.exit_code == 2 and "config.json" in not_a_model.output
