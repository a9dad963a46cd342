"""The load tester's own cost, measured against fake_vllm (an instant fake vLLM in another process):
the rate one client process sustains, how late it sends against the schedule, and its CPU per request.
On 2 shared cores the fake and the client compete for the same CPU, so these are conservative."""

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import httpx
from pydantic import BaseModel

from loadtest.client import VllmTarget
from loadtest.scheduler import Profile, run_profile
from loadtest.stats import Figures, figures
from loadtest.workload import Workload, synthetic
from service.backends.tokens import ModelTokenizer
from service.local.processes import free_port


class OverheadResult(BaseModel):
    profile: str
    requests: int
    output_tokens: int
    achieved_rps: float
    errors: dict[str, int]
    send_lag_p50_ms: float | None
    send_lag_p99_ms: float | None
    client_cpu_ms_per_request: float | None
    ttft_p50_ms: float | None  # client + fake: an upper bound on what the client adds to a TTFT
    e2e_p50_ms: float | None
    figures: Figures


def start_fake(tokens: int) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "loadtest.fake_vllm", "--port", str(port), "--answer-tokens", str(tokens)]
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return process, f"{url}/v1"
        except httpx.HTTPError:
            time.sleep(0.1)
    process.terminate()
    raise RuntimeError("fake_vllm did not start")


async def measure(url: str, workload: Workload, profile: Profile) -> OverheadResult:
    target = VllmTarget(url, "fake", connections=512)
    await target.prepare(workload)
    try:
        bench = await run_profile(target, workload.arrivals, profile, seed=0, max_seconds=120)
    finally:
        await target.close()
    f = figures(bench, ttft_target_ms=1000)
    return OverheadResult(
        profile=profile.label,
        requests=f.requests,
        output_tokens=workload.output_tokens,
        achieved_rps=f.request_throughput,
        errors=f.errors,
        send_lag_p50_ms=f.send_lag_ms.p50,
        send_lag_p99_ms=f.send_lag_ms.p99,
        client_cpu_ms_per_request=f.client_cpu_ms_per_request,
        ttft_p50_ms=f.ttft_ms.p50,
        e2e_p50_ms=f.e2e_ms.p50,
        figures=f,
    )


def run_overhead(
    model_dir: Path, *, rate: float, requests: int, output_tokens: int, prompt_tokens: int
) -> list[OverheadResult]:
    tokenizer = ModelTokenizer.from_model_dir(model_dir)
    process, url = start_fake(output_tokens)
    try:
        results: list[OverheadResult] = []
        for profile in (Profile("constant", rate=rate), Profile("throughput", streams=256)):
            workload = synthetic(
                tokenizer,
                prompt_tokens=prompt_tokens,
                output_tokens=output_tokens,
                requests=requests,
                warmup=0,
                seed=len(results),
            )
            results.append(asyncio.run(measure(url, workload, profile)))
        return results
    finally:
        process.terminate()
        process.wait(timeout=10)
