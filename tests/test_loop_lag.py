"""The event loop's lag as the service reports it: a loop held by blocking work shows in the histogram."""

import asyncio
import time

from prometheus_client import CollectorRegistry

from service.telemetry.loop_lag import LoopLag
from service.telemetry.prometheus import Metrics


def lag_buckets(registry: CollectorRegistry) -> dict[str, float]:
    """Observations of the lag histogram by bucket (`le`), cumulative."""
    [family] = [m for m in registry.collect() if m.name == "classroom_event_loop_lag_seconds"]
    return {s.labels["le"]: s.value for s in family.samples if s.name.endswith("_bucket")}


def test_a_loop_held_by_blocking_work_is_seen_late_by_as_long() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)

    async def scene() -> None:
        lag = LoopLag(metrics.loop_lag, interval_s=0.01)
        await lag.start()
        await asyncio.sleep(0.1)  # an idle loop: its timers fire on time
        idle = lag_buckets(registry)
        time.sleep(0.15)  # noqa: ASYNC251  # the very thing measured: work that holds the loop
        await asyncio.sleep(0.05)
        await lag.close()
        held = lag_buckets(registry)
        assert idle["+Inf"] >= 3
        assert idle["+Inf"] - idle["0.1"] == 0
        assert held["+Inf"] - held["0.1"] >= 1  # the timer due while the loop was held

    asyncio.run(scene())
