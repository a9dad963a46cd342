"""deploy/'s scripts run as a person runs them after `make setup`: shared by test_deploy.py and test_fp8.py."""

import os
import subprocess
import sys
from pathlib import Path

from tests.servers import ROOT

DEPLOY = ROOT / "deploy"
SCRIPTS = DEPLOY / "scripts"


def run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, env=env, check=False, cwd=ROOT)


def script_env(**extra: str) -> dict[str, str]:
    """The environment a person has after `make setup`: this venv's `classroom` first on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLASSROOM_")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    return env | extra
