"""The gateway benchmark's parts: Redis aside, the instant fake vLLM (`loadtest.fake_vllm`) and the service as
a real `classroom serve`; the CPU each uses, and py-spy profiles of the service."""

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

from benchmarks.parts import standin_dir
from service.local.processes import ManagedProcess, answers_ok, free_port
from service.settings import PROJECT_ROOT

STATE = PROJECT_ROOT / "var" / "bench-gateway"
MODEL_DIR = standin_dir("tiny")


def wait_http(url: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if answers_ok(url):
            return
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer 200")


def start_fake() -> tuple[ManagedProcess, str]:
    port = free_port()
    argv = [sys.executable, "-m", "loadtest.fake_vllm", "--port", str(port)]
    process = ManagedProcess("fake vLLM", argv, STATE / "logs" / f"fake-{port}.log")
    process.start()
    root = f"http://127.0.0.1:{port}"
    wait_http(f"{root}/health")
    return process, root


def configure_fake(root: str, **behaviour: float | None) -> None:
    httpx.post(f"{root}/fake/config", json=behaviour, timeout=5).raise_for_status()


def service_env(redis_url: str, fake_root: str, port: int) -> dict[str, str]:
    return dict(os.environ) | {
        "CLASSROOM_REDIS__URL": redis_url,
        "CLASSROOM_BACKEND__BASE_URL": f"{fake_root}/v1",
        "CLASSROOM_MODEL__DIR": str(MODEL_DIR),
        "CLASSROOM_STATE_DIR": str(STATE),
        "CLASSROOM_API__PORT": str(port),
        # Pupils here ask back to back for minutes: no per-pupil limit.
        "CLASSROOM_LIMITS__QUESTIONS_PER_MINUTE": "1000000",
    }


def start_service(classroom: Path, env: dict[str, str], workers: int) -> tuple[ManagedProcess, str]:
    argv = [str(classroom), "serve"] + (["--workers", str(workers)] if workers > 1 else [])
    port = env["CLASSROOM_API__PORT"]
    process = ManagedProcess("service", argv, STATE / "logs" / f"service-{port}.log", env=env)
    process.start()
    url = f"http://127.0.0.1:{port}"
    process.wait_until(lambda: answers_ok(f"{url}/readyz"), 60)
    return process, url


def cpu_s(pid: int, descendants: bool = True) -> float:
    """User and system CPU seconds of a process and, unless told not to, all its living descendants."""
    root = psutil.Process(pid)
    total = 0.0
    for proc in [root, *(root.children(recursive=True) if descendants else [])]:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


@dataclass
class Meter:
    """CPU seconds of each part over one measured stretch."""

    pids: dict[str, int]
    began: dict[str, float] = field(default_factory=dict)
    # The benchmark's own process started every other part: it is measured alone, else it would count them all.
    alone: tuple[str, ...] = ("client",)

    def _cpu(self, name: str) -> float:
        return cpu_s(self.pids[name], descendants=name not in self.alone)

    def start(self) -> None:
        self.began = {name: self._cpu(name) for name in self.pids}

    def stop(self) -> dict[str, float]:
        return {name: self._cpu(name) - self.began[name] for name in self.pids}


@contextlib.contextmanager
def profiled(pid: int, out: Path | None) -> Iterator[None]:
    """py-spy samples the service (and its workers) while the block runs, stopping it for each sample so
    that every stack is whole; `out` gets the shares of the samples in each function."""
    if out is None:
        yield
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    raw = out.with_suffix(".raw")
    py_spy = Path(sys.executable).with_name("py-spy")
    argv = [str(py_spy), "record", "-p", str(pid), "--subprocesses", "-r", "250", "-f", "raw", "-o", str(raw)]
    spy = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # py-spy attaches
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=60)
        out.write_text(top_frames(raw.read_text()))
        raw.unlink()


def top_frames(collapsed: str, count: int = 30) -> str:
    """Self and inclusive shares of the samples, by function, from py-spy's collapsed stacks (threads that
    only wait are left out: they hold no CPU)."""
    own: dict[str, int] = {}
    through: dict[str, int] = {}
    total = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        frames = [f.split(" (")[0] + " (" + f.split(" (")[-1].split("site-packages/")[-1] for f in stack.split(";")]
        if any(idle in frames[-1] for idle in ("Condition.wait", "_worker (concurrent", "Queue.get")):
            continue
        samples = int(count_text)
        total += samples
        own[frames[-1]] = own.get(frames[-1], 0) + samples
        for frame in set(frames):
            through[frame] = through.get(frame, 0) + samples
    lines = [f"{total} samples of the service's running threads", "", "self %  function"]
    lines += [f"{own[f] / total * 100:5.1f}  {f}" for f in sorted(own, key=own.__getitem__, reverse=True)[:count]]
    lines += ["", "inclusive %  function (below the frames every sample passes through)"]
    ranked = sorted((f for f in through if through[f] < total * 0.98), key=through.__getitem__, reverse=True)
    ranked = ranked[: count * 3]
    lines += [f"{through[f] / total * 100:5.1f}  {f}" for f in ranked]
    return "\n".join(lines) + "\n"
