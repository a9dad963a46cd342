"""A local Redis for `classroom up` and the tests, with every write in its append-only file."""

import shutil
from pathlib import Path

import redis
import redis.exceptions

from service.local.processes import ManagedProcess, ProcessFailed

STARTUP_TIMEOUT_S = 20.0


def is_ready(url: str) -> bool:
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=1.0)
        with client:
            return bool(client.ping())
    except (redis.exceptions.ConnectionError, OSError):
        return False


def redis_process(
    port: int,
    data_dir: Path,
    log_path: Path,
    pid_path: Path | None = None,
    databases: int = 16,
    *,
    maxmemory_mb: int = 0,
    die_with_parent: bool = False,
) -> ManagedProcess:
    """Redis as the stack runs it; `maxmemory_mb` bounds its memory (0: unbounded), and at the bound it refuses
    writes rather than evict anything (noeviction: no question is dropped that was not archived)."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise ProcessFailed("redis-server is not installed. On Debian or Ubuntu: sudo apt-get install redis-server")
    data_dir.mkdir(parents=True, exist_ok=True)
    argv = [
        binary,
        "--bind", "127.0.0.1",
        "--port", str(port),
        "--dir", str(data_dir.resolve()),
        # Every write reaches the disk before Redis answers: a classroom's questions are few and small,
        # and losing the last second of them on a crash is not acceptable.
        "--appendonly", "yes",
        "--appendfsync", "always",
        "--save", "",
        "--daemonize", "no",
        "--databases", str(databases),
        "--maxmemory", f"{maxmemory_mb}mb",
        "--maxmemory-policy", "noeviction",
    ]  # fmt: skip
    return ManagedProcess(f"Redis on port {port}", argv, log_path, pid_path=pid_path, die_with_parent=die_with_parent)


def start_redis(
    url: str,
    port: int,
    data_dir: Path,
    log_path: Path,
    pid_path: Path | None = None,
    databases: int = 16,
    *,
    maxmemory_mb: int = 0,
    die_with_parent: bool = False,
) -> ManagedProcess:
    process = redis_process(
        port, data_dir, log_path, pid_path, databases, maxmemory_mb=maxmemory_mb, die_with_parent=die_with_parent
    )
    process.start()
    process.wait_until(lambda: is_ready(url), STARTUP_TIMEOUT_S)
    return process
