"""vLLM's own prefix-cache counters, read from a replica's /metrics (Prometheus text), summed over engines."""

import httpx

from loadtest.results import CacheCounters
from service.vllm_metrics import root_url, sum_samples

# Sample names, as service.vllm_metrics.sum_samples keys them.
COUNTERS = {
    "vllm:prefix_cache_queries_total": "queries",
    "vllm:prefix_cache_hits_total": "hits",
    "vllm:prompt_tokens_total": "prompt_tokens",
    "vllm:generation_tokens_total": "generation_tokens",
}


def parse_counters(text: str) -> CacheCounters:
    samples = sum_samples(text)
    return CacheCounters.model_validate({field: samples[name] for name, field in COUNTERS.items() if name in samples})


async def read_counters(client: httpx.AsyncClient, base_url: str) -> CacheCounters:
    """The counters now, or all None where the server has no /metrics (the fake endpoint, a proxy)."""
    try:
        response = await client.get(f"{root_url(base_url)}/metrics", timeout=10)
    except httpx.HTTPError:
        return CacheCounters()
    if response.status_code != 200:
        return CacheCounters()
    return parse_counters(response.text)
