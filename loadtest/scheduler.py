"""When each request leaves: load profiles named as GuideLLM names them, and the loop that runs one.

- synchronous: one request at a time, the next when the last ended;
- concurrent N: N streams, each sending its next request when its last ended;
- throughput: every request at once (at most `streams` in flight): the most the server takes;
- constant R: arrivals evenly spaced, R a second;
- poisson R: exponential gaps drawn from the run's seed, rescaled so that n arrivals take n / R seconds,
  as `vllm bench serve` does (its --burstiness 1);
- sweep: synchronous, then throughput, then constant rates evenly spaced between the two (sweep.py).

An arrival is one request, or a class's burst: several sent at the same moment. The synchronous and
concurrent profiles send a burst's requests one by one, as they send everything.

The run stops when every capped request has ended. The duration cap is only a safety net: requests still
in flight then are cut and recorded as `cut_at_deadline`, never silently dropped from the figures.
"""

import asyncio
import os
import random
import time
from dataclasses import dataclass
from typing import TypeVar

from loadtest.client import Target, Timeline
from loadtest.results import Benchmark, LevelProfile, ProfileKind, RequestRecord, StoppedBy
from loadtest.workload import RequestSpec

T = TypeVar("T")

# Requests allowed in flight at once by the profiles that do not bound it themselves.
DEFAULT_MAX_IN_FLIGHT = 512


@dataclass(frozen=True)
class Profile:
    kind: LevelProfile
    rate: float | None = None
    streams: int | None = None

    @property
    def label(self) -> str:
        if self.kind in ("constant", "poisson"):
            return f"{self.kind} {self.rate:g} req/s"
        return f"concurrent {self.streams}" if self.kind == "concurrent" else self.kind

    def arrival_offsets(self, arrivals: int, seed: int) -> list[float]:
        """Seconds from the start at which each arrival leaves (rate profiles only)."""
        if self.kind == "throughput":
            return [0.0] * arrivals
        assert self.rate is not None and self.rate > 0, f"{self.kind} needs a positive rate"
        if self.kind == "constant":
            return [i / self.rate for i in range(arrivals)]
        rng = random.Random(seed)
        gaps = [rng.expovariate(self.rate) for _ in range(arrivals)]
        total, offsets, now = sum(gaps), [], 0.0
        for gap in gaps:
            offsets.append(now)
            now += gap * (arrivals / self.rate) / total
        return offsets


def cap(arrivals: list[list[T]], max_requests: int) -> list[list[T]]:
    """The arrivals holding the first `max_requests` requests (a burst is cut, not dropped)."""
    out: list[list[T]] = []
    left = max_requests
    for arrival in arrivals:
        if left <= 0:
            break
        out.append(arrival[:left])
        left -= len(out[-1])
    return out


async def run_profile(
    target: Target,
    arrivals: list[list[RequestSpec]],
    profile: Profile,
    *,
    seed: int,
    max_seconds: float,
) -> Benchmark:
    """Run the arrivals once under the profile; every request that was started ends up in the result."""
    records: list[RequestRecord] = []
    zero = time.perf_counter()
    started_wall = time.time()
    cpu0 = os.times()
    stopped_by: StoppedBy = "requests"
    tasks: list[asyncio.Task[None]] = []  # the rate profiles' requests, cancelled too at the deadline

    async def one(spec: RequestSpec, scheduled_at: float) -> None:
        timeline = Timeline(clock_zero=zero, scheduled_at=scheduled_at, sent_at=scheduled_at)
        try:
            await target.send(spec, timeline)
        except asyncio.CancelledError:
            timeline.fail("cut_at_deadline", "still running when the run's safety deadline came")
            raise
        finally:
            records.append(timeline.record(spec))

    async def drive() -> None:
        if profile.kind in ("synchronous", "concurrent"):
            queue = [spec for arrival in arrivals for spec in arrival]
            streams = 1 if profile.kind == "synchronous" else (profile.streams or 1)
            position = iter(range(len(queue)))

            async def stream() -> None:
                for i in position:
                    await one(queue[i], time.perf_counter() - zero)

            await asyncio.gather(*(stream() for _ in range(streams)))
            return
        in_flight = asyncio.Semaphore(profile.streams or DEFAULT_MAX_IN_FLIGHT)

        async def bounded(spec: RequestSpec, at: float) -> None:
            async with in_flight:
                await one(spec, at)

        for at, arrival in zip(profile.arrival_offsets(len(arrivals), seed), arrivals, strict=True):
            delay = zero + at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.extend(asyncio.create_task(bounded(spec, at)) for spec in arrival)
        await asyncio.gather(*tasks)

    task = asyncio.create_task(drive())
    done, _ = await asyncio.wait({task}, timeout=max_seconds)
    if not done:
        stopped_by = "deadline"
        for pending in (task, *tasks):
            pending.cancel()
        await asyncio.gather(task, *tasks, return_exceptions=True)
    else:
        task.result()
    cpu1 = os.times()
    records.sort(key=lambda r: r.index)
    return Benchmark(
        profile=_kind(profile),
        rate=profile.rate,
        streams=profile.streams,
        started_wall=started_wall,
        duration_s=max((r.ended_at for r in records), default=0.0),
        requests=records,
        client_cpu_s=(cpu1.user - cpu0.user) + (cpu1.system - cpu0.system),
        stopped_by=stopped_by,
    )


def _kind(profile: Profile) -> ProfileKind:
    return profile.kind
