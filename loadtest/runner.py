"""One run: warm-up, the server's counters before, the profile (or the sweep's levels), the counters after
(a moment later: /metrics lags), everything saved in one RunResult."""

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx

from loadtest.client import Target, Timeline, VllmTarget
from loadtest.results import Benchmark, Environment, ModelInfo, RunConfig, RunResult, ServerCache, WorkloadInfo
from loadtest.scheduler import Profile, cap, run_profile
from loadtest.servermetrics import read_counters
from loadtest.workload import Workload


@dataclass(frozen=True)
class SweepPlan:
    """GuideLLM's sweep: synchronous, then throughput, then `steps` constant rates evenly spaced between
    the synchronous rate and the throughput rate (both ends excluded), the highest the server held."""

    steps: int


async def warm_up(target: Target, workload: Workload) -> None:
    """Requests of the workload's shape on other prompts, one by one; their figures are thrown away."""
    for spec in workload.warmup:
        await target.send(spec, Timeline(clock_zero=0.0, scheduled_at=0.0))


async def prime_passages(target: Target, workload: Workload) -> None:
    """Each class's prompt prefix once, for one token, as the service's warm-up does when a passage
    becomes active (the pupil API target gets this from the service itself)."""
    if isinstance(target, VllmTarget):
        for cls in workload.classes:
            first = next(s for a in workload.arrivals for s in a if s.group == cls.group)
            system = [m for m in first.messages if m["role"] == "system"]
            await target.prime([*system, {"role": "user", "content": ""}])


async def measure(
    target: Target,
    workload: Workload,
    profile: Profile,
    *,
    cache_urls: list[str],
    seed: int,
    max_requests: int,
    max_seconds: float,
    settle_s: float,
) -> Benchmark:
    async with httpx.AsyncClient() as scraper:
        before = [await read_counters(scraper, url) for url in cache_urls]
        bench = await run_profile(
            target, cap(workload.arrivals, max_requests), profile, seed=seed, max_seconds=max_seconds
        )
        await asyncio.sleep(settle_s)
        after = [await read_counters(scraper, url) for url in cache_urls]
    bench.cache = [ServerCache(url=u, before=b, after=a) for u, b, a in zip(cache_urls, before, after, strict=True)]
    return bench


async def run(
    target: Target,
    make_workload: Callable[[int], Workload],
    profile: Profile | SweepPlan,
    config: RunConfig,
    *,
    workload_info: WorkloadInfo,
    model: ModelInfo,
    environment: Environment,
    cache_urls: list[str],
) -> RunResult:
    """Warm up, then measure each level. Each level of a sweep runs on a workload of its own (the seed
    plus the level's number), so no level finds the prompts of the one before it in the cache."""
    first = make_workload(config.seed)
    await target.prepare(first)
    await warm_up(target, first)

    async def level(level_profile: Profile, k: int) -> Benchmark:
        workload = first if k == 0 else make_workload(config.seed + k)
        if k:
            await target.prepare(workload)
        if workload_info.primed_passages:
            await prime_passages(target, workload)
        return await measure(
            target,
            workload,
            level_profile,
            cache_urls=cache_urls,
            seed=config.seed + k,
            max_requests=config.max_requests,
            max_seconds=config.max_seconds,
            settle_s=config.settle_s,
        )

    if isinstance(profile, Profile):
        benchmarks = [await level(profile, 0)]
    else:
        benchmarks = [await level(Profile("synchronous"), 0), await level(Profile("throughput"), 1)]
        low, high = (achieved_rate(b) for b in benchmarks)
        for k in range(profile.steps):
            rate = low + (high - low) * (k + 1) / (profile.steps + 1)
            benchmarks.append(await level(Profile("constant", rate=round(rate, 3)), 2 + k))
    return RunResult(
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        config=config,
        workload=workload_info,
        model=model,
        environment=environment,
        benchmarks=benchmarks,
    )


def achieved_rate(bench: Benchmark) -> float:
    done = sum(1 for r in bench.requests if r.ok)
    return done / bench.duration_s if bench.duration_s > 0 else 0.0
