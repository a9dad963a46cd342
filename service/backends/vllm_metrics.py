"""A vLLM server's own /metrics: where it lives and what it says, for the fleet's probes and the load
tester's cache counters alike."""

import re

from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel


def sum_samples(text: str, only: tuple[str, ...] = ()) -> dict[str, float]:
    """Each sample name's value summed over its labels: over a replica's engines (a replica may run
    several data-parallel engines). By sample name, not family name: how a family is named depends on
    its TYPE line, and the counters' `_created` timestamps have names of their own. With `only`, just the
    samples whose names start so: the fleet's probe runs on the event loop, and prometheus-client parses
    vLLM's whole /metrics (~60 kB, histograms) in 6 ms on the H200's host and 24 ms here."""
    if only:
        text = "\n".join(line for line in text.splitlines() if line.startswith(only))
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[sample.name] = samples.get(sample.name, 0.0) + sample.value
    return samples


class VllmFigures(BaseModel):
    """What a replica's own /metrics says, under the names of vLLM 0.26 (GPU) and 0.32 (CPU) alike."""

    running: float = 0.0
    waiting: float = 0.0
    kv_cache_usage: float = 0.0
    prefix_cache_queries: float = 0.0
    prefix_cache_hits: float = 0.0


# Each figure, and the names vLLM has used for it (V1 names first, older V0 names after).
VLLM_NAMES: dict[str, tuple[str, ...]] = {
    "running": ("vllm:num_requests_running",),
    "waiting": ("vllm:num_requests_waiting",),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "prefix_cache_queries": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    "prefix_cache_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
}


_WANTED = tuple(name for names in VLLM_NAMES.values() for name in names)


def parse_vllm_metrics(text: str) -> VllmFigures:
    """The fleet's figures of one replica, summed over its engines."""
    samples = sum_samples(text, only=_WANTED)
    figures: dict[str, float] = {}
    for figure, names in VLLM_NAMES.items():
        found = next((samples[name] for name in names if name in samples), None)
        if found is not None:
            figures[figure] = found
    return VllmFigures(**figures)


_STARTED = re.compile(r"^process_start_time_seconds (\S+)$", re.MULTILINE)


def started_at(text: str) -> str:
    """When the replica's server process started, as its /metrics says (prometheus-client's process
    figures, there where vLLM runs one API server): which run of the replica this is; "" where not said."""
    found = _STARTED.search(text)
    return found.group(1) if found else ""
