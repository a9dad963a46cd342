"""The service's image starts: exactly what deploy/Dockerfile copies, installed as it installs it, started
with its CMD and ENV against the test Redis and vLLM, until /readyz says 200. (No container engine here:
the image's file set and commands, run on this machine's Python.)"""

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import dockerfile
import httpx

from service.local.processes import ManagedProcess, free_port
from service.settings import Settings
from tests.helpers import answers_readyz

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"


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
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps", "--no-cache-dir", str(app)]
    subprocess.run(pip, check=True, cwd=app)
    # What the image holds and what it does not.
    probe = "import importlib.util as u; print(u.find_spec('service') is not None, u.find_spec('loadtest') is None)"
    assert subprocess.check_output([venv / "bin" / "python", "-c", probe], cwd=app, text=True).split() == ["True"] * 2

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
