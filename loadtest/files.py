"""What a command reads, saved results and model folders: a missing, unreadable or wrong one is one sentence
and exit code 2 (typer's own `BadParameter`), never a traceback."""

import gzip
import zlib
from pathlib import Path
from typing import TypeVar

import typer
from pydantic import BaseModel, ValidationError

from service.classroom.prompting import Prompts
from service.settings import Settings

Saved = TypeVar("Saved", bound=BaseModel)


def read_saved(path: Path, kind: type[Saved], option: str) -> Saved:
    """`path` as a `kind` (JSON, or JSON gzipped as .json.gz), or a sentence that says what is wrong with it."""
    try:
        raw = path.read_bytes()
        return kind.model_validate_json(gzip.decompress(raw) if path.suffix == ".gz" else raw)
    except FileNotFoundError:
        where = "" if path.is_absolute() else f" (a path from the folder the command runs in, {Path.cwd()})"
        raise typer.BadParameter(f"{path} does not exist{where}", param_hint=option) from None
    except IsADirectoryError:
        raise typer.BadParameter(f"{path} is a folder, not a saved result", param_hint=option) from None
    except (OSError, EOFError, zlib.error) as exc:
        raise typer.BadParameter(f"{path} cannot be read: {exc}", param_hint=option) from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the file"
        raise typer.BadParameter(
            f"{path} is not {kind.__name__} JSON ({where}: {first['msg']}); is it the right file?", param_hint=option
        ) from None


def model_prompts(settings: Settings, folder: Path) -> Prompts:
    """The prompts and token budget of the model in `folder`, or a sentence saying that no model is there."""
    for needed in ("tokenizer.json", "config.json"):
        if not (folder / needed).is_file():
            raise typer.BadParameter(
                f"{folder} holds no model ({needed} is missing): make one with "
                f"`classroom model prepare --dest {folder}`",
                param_hint="--model-dir",
            )
    try:
        return Prompts.from_settings(settings, folder)
    except (OSError, ValueError) as exc:
        raise typer.BadParameter(f"the model in {folder} cannot be read: {exc}", param_hint="--model-dir") from None
