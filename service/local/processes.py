"""Child servers (Redis, vLLM) run the same way for `classroom up`, the CLI and the tests.

Each runs in its own process group, so stopping it stops its children too (vLLM spawns engine
processes); its output goes to a log file whose tail is shown when it fails to start.
"""

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

import httpx
import psutil

POLL_S = 0.5
PR_SET_PDEATHSIG = 1  # prctl(2)


def free_port() -> int:
    """A TCP port nobody listens on now, on 127.0.0.1, for a child server of our own."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def port_holder(host: str, port: int) -> str | None:
    """What listens on `host:port` now ("pid 123: vllm serve ..." where this user may see it), or None if nothing
    does: a server started there would die while the one already there answered in its place."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a closed connection's TIME_WAIT is no holder
        try:
            probe.bind((host, port))
            return None
        except OSError:
            pass
    with contextlib.suppress(psutil.Error):
        for held in psutil.net_connections(kind="tcp"):
            if held.status == psutil.CONN_LISTEN and held.laddr and held.laddr.port == port and held.pid:
                with contextlib.suppress(psutil.Error):
                    return f"pid {held.pid}: {' '.join(psutil.Process(held.pid).cmdline())[:120]}"
    return "a process this user cannot see"


def answers_ok(url: str, timeout_s: float = 2.0) -> bool:
    """A GET of `url` (a server's /health, the service's /readyz) answers 200 now; no answer is a no."""
    try:
        return httpx.get(url, timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        return False


class ProcessFailed(RuntimeError):
    pass


def log_tail(path: Path | None, lines: int = 40) -> str:
    if path is None or not path.is_file():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _die_with(parent: int) -> Callable[[], None]:
    """Run in the child between fork and exec: the kernel sends it SIGTERM when its parent dies, however the
    parent dies (SIGKILL and the OOM killer included), so that no server outlives the stack that started it."""
    libc = ctypes.CDLL(None, use_errno=True)  # loaded before the fork: the child only calls it

    def arrange() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before the call: nobody will send the signal
            os._exit(1)

    return arrange


class ManagedProcess:
    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path | None,
        *,
        env: dict[str, str] | None = None,
        pid_path: Path | None = None,
        die_with_parent: bool = False,
    ) -> None:
        """`log_path`: where its output goes (None: this process's own). `die_with_parent`: it gets SIGTERM when
        this process dies (Linux's PR_SET_PDEATHSIG); only from a process that starts it from its main thread and
        runs no other threads (the signal follows the thread that started it; forking beside threads is unsafe)."""
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = env
        self.pid_path = pid_path
        self.die_with_parent = die_with_parent
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with contextlib.ExitStack() as files:
            log: IO[bytes] | None = None
            if self.log_path is not None:
                self.log_path.parent.mkdir(parents=True, exist_ok=True)
                log = files.enter_context(self.log_path.open("ab"))
            self.popen = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT if log else None,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,
                preexec_fn=_die_with(os.getpid()) if self.die_with_parent else None,
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
