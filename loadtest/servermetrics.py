"""vLLM's own counters, read from a replica's /metrics (Prometheus text), summed over engines: the prefix
cache's, and the sums and counts of its per-request latency histograms (the server's view of the requests
the client timed: stats.server_timing)."""

import httpx

from loadtest.results import CacheCounters
from service.backends.vllm_metrics import sum_samples
from service.settings import root_url

# Each field, and the sample names vLLM has used for it (the newest first, as service.backends.vllm_metrics keys them).
# vLLM's TTFT runs from the API server's arrival of the request to its first token leaving the engine; its
# ITL histogram observes every gap between two tokens of a request (`time_per_output_token` was its name
# before 0.11).
COUNTERS: dict[str, tuple[str, ...]] = {
    "queries": ("vllm:prefix_cache_queries_total",),
    "hits": ("vllm:prefix_cache_hits_total",),
    "prompt_tokens": ("vllm:prompt_tokens_total",),
    "generation_tokens": ("vllm:generation_tokens_total",),
    "ttft_sum": ("vllm:time_to_first_token_seconds_sum",),
    "ttft_count": ("vllm:time_to_first_token_seconds_count",),
    "itl_sum": ("vllm:inter_token_latency_seconds_sum", "vllm:time_per_output_token_seconds_sum"),
    "itl_count": ("vllm:inter_token_latency_seconds_count", "vllm:time_per_output_token_seconds_count"),
    "e2e_sum": ("vllm:e2e_request_latency_seconds_sum",),
    "e2e_count": ("vllm:e2e_request_latency_seconds_count",),
}


def parse_counters(text: str) -> CacheCounters:
    samples = sum_samples(text)
    found = {field: next((samples[n] for n in names if n in samples), None) for field, names in COUNTERS.items()}
    return CacheCounters.model_validate({k: v for k, v in found.items() if v is not None})


async def read_counters(client: httpx.AsyncClient, base_url: str) -> CacheCounters:
    """The counters now, or all None where the server has no /metrics (the fake endpoint, a proxy)."""
    try:
        response = await client.get(f"{root_url(base_url)}/metrics", timeout=10)
    except httpx.HTTPError:
        return CacheCounters()
    if response.status_code != 200:
        return CacheCounters()
    return parse_counters(response.text)
