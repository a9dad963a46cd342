"""vLLM's own prefix-cache counters, read from a replica's /metrics (Prometheus text), summed over engines."""

import httpx
from prometheus_client.parser import text_string_to_metric_families

from loadtest.results import CacheCounters

# Sample names (not family names: how a family is named depends on its TYPE line).
COUNTERS = {
    "vllm:prefix_cache_queries_total": "queries",
    "vllm:prefix_cache_hits_total": "hits",
    "vllm:prompt_tokens_total": "prompt_tokens",
    "vllm:generation_tokens_total": "generation_tokens",
}


def root_of(base_url: str) -> str:
    """http://host:port/v1 -> http://host:port (where vLLM serves /metrics)."""
    return base_url.rstrip("/").removesuffix("/v1")


def parse_counters(text: str) -> CacheCounters:
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:  # one per engine; the _created timestamps have other names
            if (field := COUNTERS.get(sample.name)) is not None:
                totals[field] = totals.get(field, 0.0) + sample.value
    return CacheCounters.model_validate(totals)


async def read_counters(client: httpx.AsyncClient, base_url: str) -> CacheCounters:
    """The counters now, or all None where the server has no /metrics (the fake endpoint, a proxy)."""
    try:
        response = await client.get(f"{root_of(base_url)}/metrics", timeout=10)
    except httpx.HTTPError:
        return CacheCounters()
    if response.status_code != 200:
        return CacheCounters()
    return parse_counters(response.text)
