"""A service of the test's own on a backends configuration of the test's making, and the operator's view of its
replicas: shared by the tests of variants and replicas (test_backends, test_console, test_faults)."""

from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import httpx
import yaml

from service.app import create_app
from service.settings import Settings
from tests.helpers import operator_headers, signed_in_teacher
from tests.servers import ServerThread


def backends_file(tmp_path: Path, variants: dict[str, list[str]], active: str) -> Path:
    path = tmp_path / "backends.yaml"
    path.write_text(yaml.safe_dump({"active": active, "variants": {k: {"replicas": v} for k, v in variants.items()}}))
    return path


@contextmanager
def running(settings: Settings) -> Iterator[tuple[str, httpx.Client, httpx.Client]]:
    """A service process on its own Redis database: its URL, a signed-in teacher, an operator."""
    with (
        ServerThread(create_app(settings)) as service,
        closing(signed_in_teacher(settings, service.url)) as teacher,
        httpx.Client(base_url=service.url, headers=operator_headers(settings), timeout=30) as operator,
    ):
        yield service.url, teacher, operator


def replica_healthy(operator: httpx.Client, url: str) -> bool:
    replicas = operator.get("/api/operator/backends").json()["replicas"]
    return any(r["url"] == url and r["healthy"] for r in replicas)
