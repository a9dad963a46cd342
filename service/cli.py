"""The `classroom` command as the deployed service has it: `serve`, and an operator's `teacher` and `backends`.

Other packages add their commands by entry point (`classroom.commands`): the local stack (`up`, `model`,
`backend`, `capacity`: service/local/cli.py) and the load tester (`classroom loadtest`). The service imports
neither, so its image, which installs neither's dependencies, still starts and serves.
"""

import asyncio
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from pydantic import ValidationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from service.backends.fleet import load_backends, replicas_answering, shared_backends
from service.classroom.accounts import add_teacher
from service.errors import InvalidInput, ServiceError, VariantNotServing
from service.records import BackendConfig
from service.settings import Settings

app = typer.Typer(help="classroom-assistant: a reading assistant for classrooms.", no_args_is_help=True)
teacher_app = typer.Typer(help="Teachers' accounts: an operator's job.", no_args_is_help=True)
backends_app = typer.Typer(
    help="The variants and replicas the service routes to (shared in Redis).", no_args_is_help=True
)
app.add_typer(backends_app, name="backends")
app.add_typer(teacher_app, name="teacher")


def settings_of(ctx: typer.Context) -> Settings:
    """The settings, read once for the command (and for a plugin's commands too)."""
    if ctx.obj is None:
        ctx.obj = Settings()
    settings: Settings = ctx.obj
    return settings


@app.command()
def serve(
    ctx: typer.Context,
    workers: Annotated[
        int | None, typer.Option(min=1, help="service processes behind the port (default: the settings')")
    ] = None,
) -> None:
    """Only the service (Redis and vLLM already running where the settings say)."""
    from service.app import serve as serve_app

    serve_app(settings_of(ctx), workers)


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
            show_default=False,  # else the prompt reads "Password []:"
            envvar="CLASSROOM_NEW_TEACHER_PASSWORD",
            help="asked for when not given",
        ),
    ] = "",
) -> None:
    """Create a teacher's account in the Redis the settings name."""
    try:
        teacher = asyncio.run(add_teacher(settings_of(ctx), email, name, password))
    except InvalidInput as exc:
        raise typer.BadParameter(exc.message) from exc
    print(f"teacher {teacher.email} added")


@backends_app.command("show")
def backends_show(ctx: typer.Context) -> None:
    """The configuration every service process routes by."""
    config = asyncio.run(shared_backends(settings_of(ctx)))
    print(config.model_dump_json(indent=2) if config else "no configuration yet: the service seeds it at start")


@backends_app.command("load")
def backends_load(
    ctx: typer.Context,
    file: Path,
    force: Annotated[bool, typer.Option(help="load it even where no replica of its active variant answers")] = False,
) -> None:
    """Replace the shared configuration by a file's (deploy/backends.yaml's form); processes follow within 1 s.
    Refused where no replica of the file's active variant answers: every class would be sent to nothing."""
    try:
        declared = BackendConfig.from_file(file)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise typer.BadParameter(sentence(exc), param_hint="FILE") from exc
    settings = settings_of(ctx)
    if not force:
        found = asyncio.run(replicas_answering(settings, declared.variants[declared.active].replicas))
        if all(error is not None for error in found.values()):
            refused = VariantNotServing(declared.active, {url: error or "" for url, error in found.items()})
            raise typer.BadParameter(f"{refused.message} (--force loads it anyway)", param_hint="FILE")
    config = asyncio.run(load_backends(settings, declared))
    print(
        f"backends configuration version {config.version}: active {config.active}, variants {sorted(config.variants)}"
    )


# What a command meets from outside it (a file missing, unreadable or malformed, a value out of range, a server
# not there): said in one sentence with exit 2, as a usage error is. Anything else is a bug and keeps its traceback.
OUTSIDE = (OSError, ValueError, yaml.YAMLError, RedisError, ServiceError)


def sentence(exc: BaseException) -> str:
    """An outside error as one line a person can act on."""
    if isinstance(exc, ServiceError):
        return exc.message
    if isinstance(exc, RedisConnectionError):
        return f"Redis cannot be reached ({exc}): is it running where CLASSROOM_REDIS__URL says?"
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.strerror or type(exc).__name__}: {exc.filename}"
    if isinstance(exc, ValidationError):
        return "; ".join(_problem(e) for e in exc.errors())
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"not valid YAML: {exc.problem} (line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(exc).split()) or type(exc).__name__


def _problem(error: Mapping[str, Any]) -> str:
    """One of pydantic's errors: where, and our check's own sentence rather than its "Value error, ..." wrapping."""
    message = str(error["ctx"]["error"]) if error["type"] == "value_error" and "ctx" in error else error["msg"]
    where = ".".join(map(str, error["loc"]))
    return f"{where}: {message}" if where else message


def run_cli(command: Callable[[], object]) -> None:
    """Run a Typer app as a console script: an outside error is one sentence on stderr and exit 2."""
    try:
        command()
    except OUTSIDE as exc:
        typer.echo(f"Error: {sentence(exc)}", err=True)
        raise SystemExit(2) from None


def main() -> None:
    """The `classroom` console script."""
    run_cli(app)


def _add_plugins(group: str = "classroom.commands") -> None:
    """Commands that installed packages offer by entry point: a Typer with a name is a group of its own
    (`classroom loadtest ...`), one without adds its commands here (`classroom up`). One whose dependencies are
    not installed (the image installs only the service's) is left out."""
    for plugin in entry_points(group=group):
        try:
            app.add_typer(plugin.load())
        except ImportError:
            continue


_add_plugins()
