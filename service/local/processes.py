"""Child servers (Redis, vLLM) run the same way for `classroom up`, the CLI and the tests.

Each runs in its own process group, so stopping it stops its children too (vLLM spawns engine
processes); its output goes to a log file whose tail is shown when it fails to start.
"""

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx

POLL_S = 0.5


def free_port() -> int:
    """A TCP port nobody listens on now, on 127.0.0.1, for a child server of our own."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def answers_ok(url: str, timeout_s: float = 2.0) -> bool:
    """A GET of `url` (a server's /health, the service's /readyz) answers 200 now; no answer is a no."""
    try:
        return httpx.get(url, timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        return False


class ProcessFailed(RuntimeError):
    pass


def log_tail(path: Path, lines: int = 40) -> str:
    if not path.is_file():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


class ManagedProcess:
    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        *,
        env: dict[str, str] | None = None,
        pid_path: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = env
        self.pid_path = pid_path
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,
            )
        if self.pid_path is not None:
            self.pid_path.parent.mkdir(parents=True, exist_ok=True)
            self.pid_path.write_text(str(self.popen.pid))

    @property
    def pid(self) -> int:
        if self.popen is None:
            raise ProcessFailed(f"{self.name} was never started")
        return self.popen.pid

    def wait_until(self, ready: Callable[[], bool], timeout_s: float) -> float:
        """Block until `ready()` holds; return the seconds it took. Fails early if the process dies."""
        began = time.monotonic()
        while not ready():
            if self.popen is not None and self.popen.poll() is not None:
                raise ProcessFailed(
                    f"{self.name} exited with code {self.popen.returncode} before it was ready. "
                    f"Its log ({self.log_path}) ends with:\n{log_tail(self.log_path)}"
                )
            if time.monotonic() - began > timeout_s:
                self.stop()
                raise ProcessFailed(
                    f"{self.name} was not ready after {timeout_s:.0f} s. "
                    f"Its log ({self.log_path}) ends with:\n{log_tail(self.log_path)}"
                )
            time.sleep(POLL_S)
        return time.monotonic() - began

    def stop(self, timeout_s: float = 20.0) -> None:
        if self.popen is None:
            return
        _signal_group(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            _signal_group(self.popen.pid, signal.SIGKILL)
            self.popen.wait()
        if self.pid_path is not None:
            self.pid_path.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def stop_pidfile(pid_path: Path, timeout_s: float = 20.0) -> bool:
    """Stop a server that an earlier command started and left running. False if none was running."""
    if not pid_path.is_file():
        return False
    pid = int(pid_path.read_text().strip())
    running = _alive(pid)
    if running:
        _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        _signal_group(pid, signal.SIGKILL)
    pid_path.unlink(missing_ok=True)
    return running
