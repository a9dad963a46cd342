"""vLLM's own prefix-cache counters, read from a replica's /metrics (Prometheus text), summed over engines."""

import httpx
from prometheus_client.parser import text_string_to_metric_families

from loadtest.results import CacheCounters

COUNTERS = {
    "vllm:prefix_cache_queries": "queries",
    "vllm:prefix_cache_hits": "hits",
    "vllm:prompt_tokens": "prompt_tokens",
    "vllm:generation_tokens": "generation_tokens",
}


def root_of(base_url: str) -> str:
    """http://host:port/v1 -> http://host:port (where vLLM serves /metrics)."""
    return base_url.rstrip("/").removesuffix("/v1")


def parse_counters(text: str) -> CacheCounters:
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        field = COUNTERS.get(family.name)
        if field is None:
            continue
        for sample in family.samples:
            if sample.name.endswith("_total"):  # not the _created timestamps
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
