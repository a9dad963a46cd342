"""What `GET /metrics` answers: this process's metrics, or all its sibling workers' added up.

Each service process counts what it served in its own registry (service/telemetry/prometheus.py). Run as several
worker processes behind one port (`classroom serve --workers N`), a scrape reaches any one of them, so each
worker also answers, on a Unix socket in a folder the workers share (`api.metrics_dir`), with its own
registry's text; the worker that the scrape reached reads every other's and adds them up, sample by sample
(the earliest `_created`). No question is left out or counted twice: the sum equals the stored records as
the one process's counters do. (prometheus-client's multiprocess mode shares files instead, but cannot
remove a series, and a class idle for an hour gives its label up.)
"""

import asyncio
import logging
import os
from collections.abc import Iterable
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

PEER_TIMEOUT_S = 2.0


class Summed(Collector):
    """The families of several expositions, each sample's values added up."""

    def __init__(self, texts: Iterable[str]) -> None:
        self._families: dict[str, Metric] = {}
        self._values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
        for text in texts:
            for family in text_string_to_metric_families(text):
                if family.name not in self._families:
                    self._families[family.name] = Metric(family.name, family.documentation, family.type)
                    self._values[family.name] = {}
                values = self._values[family.name]
                for sample in family.samples:
                    key = (sample.name, tuple(sample.labels.items()))
                    if key not in values:
                        values[key] = sample.value
                    elif sample.name.endswith("_created"):
                        values[key] = min(values[key], sample.value)
                    else:
                        values[key] += sample.value

    def collect(self) -> Iterable[Metric]:
        for name, family in self._families.items():
            for (sample, labels), value in self._values[name].items():
                family.add_sample(sample, dict(labels), value)
            yield family


class Scrape:
    def __init__(self, registry: CollectorRegistry, live: Collector, folder: Path | None) -> None:
        self._registry = registry  # what this process counted
        self._live = CollectorRegistry(auto_describe=False)  # what is read at scrape time (replica health)
        self._live.register(live)
        self._folder = folder
        self._socket = None if folder is None else folder / f"{os.getpid()}.sock"
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        if self._socket is not None:
            self._socket.unlink(missing_ok=True)
            self._server = await asyncio.start_unix_server(self._answer_sibling, path=self._socket)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        if self._socket is not None:
            self._socket.unlink(missing_ok=True)

    async def _answer_sibling(self, _reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(generate_latest(self._registry))
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    async def text(self) -> bytes:
        siblings = await self._siblings()
        if not siblings:
            return generate_latest(self._registry) + generate_latest(self._live)
        summed = CollectorRegistry(auto_describe=False)
        summed.register(Summed([generate_latest(self._registry).decode(), *siblings]))
        return generate_latest(summed) + generate_latest(self._live)

    async def _siblings(self) -> list[str]:
        if self._folder is None:
            return []
        texts = []
        for socket in sorted(self._folder.glob("*.sock")):
            if socket == self._socket:
                continue
            try:
                async with asyncio.timeout(PEER_TIMEOUT_S):
                    reader, writer = await asyncio.open_unix_connection(socket)
                    texts.append((await reader.read()).decode())
                    writer.close()
            except (ConnectionRefusedError, FileNotFoundError):
                socket.unlink(missing_ok=True)  # a worker that is gone (its successor has a socket of its own)
            except TimeoutError:
                log.warning("worker %s did not give its metrics within %.0f s", socket.stem, PEER_TIMEOUT_S)
        return texts
