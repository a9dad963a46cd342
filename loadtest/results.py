"""What a run saves: every request's timeline and the run's context, as pydantic models written to JSON.

Figures and reports are computed from these files only (stats.py, report.py, compare.py), so a report can
be re-made, or a figure redefined, without running the load again.
"""

import gzip
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

TargetKind = Literal["vllm", "service"]
WorkloadKind = Literal["synthetic", "classroom", "seed"]
# A load level's profile (scheduler.py); a sweep is a run of levels of the others (runner.py).
LevelProfile = Literal["synchronous", "concurrent", "throughput", "constant", "poisson"]
ProfileKind = Literal[LevelProfile, "sweep"]
StoppedBy = Literal["requests", "deadline"]


class RequestRecord(BaseModel):
    """One request as the client saw it. Times are seconds on the client's monotonic clock, from the
    benchmark's start; `token_times` are when each streamed piece of text arrived (vLLM sends one token per
    piece when it streams; `output_tokens` is the server's own count from usage)."""

    index: int
    group: str | None = None  # the class, for the classroom workload
    scheduled_at: float  # when the profile meant it to leave
    # Through the pupil API: when the pupil was free to ask it (their previous answer had ended); a pupil asks one
    # question at a time, so a question due while the last still streams waits for it.
    pupil_free_at: float | None = None
    sent_at: float  # when the client began sending it
    first_token_at: float | None = None
    token_times: list[float] = Field(default_factory=list)
    ended_at: float
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    output_tokens: int | None = None
    finish_reason: str | None = None
    error: str | None = None  # a kind (http_503, timeout, connection, incomplete, cut_at_deadline, ...)
    error_detail: str | None = None
    # Reported by the service in its final event (pupil API only): its own timings of the backend call.
    service_ttft_ms: float | None = None
    service_total_ms: float | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.first_token_at is not None


class CacheCounters(BaseModel):
    """The server's own counters (vLLM's /metrics), summed over engines: its prefix cache, and the sums and
    counts of its per-request latency histograms, whose changes over a run are the server's own truth about
    the same requests the client timed (servermetrics.py names the samples)."""

    queries: float | None = None  # vllm:prefix_cache_queries_total (tokens looked up)
    hits: float | None = None  # vllm:prefix_cache_hits_total (tokens found)
    prompt_tokens: float | None = None  # vllm:prompt_tokens_total
    generation_tokens: float | None = None  # vllm:generation_tokens_total
    ttft_sum: float | None = None  # vllm:time_to_first_token_seconds_sum (seconds)
    ttft_count: float | None = None
    itl_sum: float | None = None  # vllm:inter_token_latency_seconds_sum (every gap between two tokens)
    itl_count: float | None = None
    e2e_sum: float | None = None  # vllm:e2e_request_latency_seconds_sum
    e2e_count: float | None = None


class ServerCache(BaseModel):
    url: str
    before: CacheCounters
    after: CacheCounters  # read `settle_s` after the last request ended: /metrics lags


class ClassInfo(BaseModel):
    """A class of the classroom workload: its passage and pupils."""

    group: str
    title: str
    passage_tokens: int
    pupils: int


class Benchmark(BaseModel):
    """One load level: a profile run once over the workload."""

    profile: ProfileKind
    rate: float | None = None  # req/s, for constant and poisson
    streams: int | None = None  # for concurrent
    started_wall: float  # Unix time at the start, to match server logs
    duration_s: float  # first send to last end
    requests: list[RequestRecord]
    cache: list[ServerCache] = Field(default_factory=list)
    client_cpu_s: float  # CPU time the client process spent during the benchmark
    stopped_by: StoppedBy = "requests"

    @property
    def label(self) -> str:
        if self.profile in ("constant", "poisson"):
            return f"{self.profile} {self.rate:g} req/s"
        if self.profile == "concurrent":
            return f"concurrent {self.streams}"
        return self.profile


class Environment(BaseModel):
    """Where and with what the run was made."""

    host: str
    cpu: str
    cpu_count: int
    gpu: str | None
    python: str
    packages: dict[str, str]  # the client's, and the server's where it could be read
    git_commit: str | None


class ModelInfo(BaseModel):
    path: str | None
    kind: str | None  # hub or standin (the folder's classroom-model.json), None if unknown
    description: str
    served_name: str


class WorkloadInfo(BaseModel):
    kind: WorkloadKind
    prompt_tokens: int | None = None  # synthetic: exactly, after the chat template
    output_tokens: int  # max_tokens (and min_tokens with ignore_eos)
    ignore_eos: bool
    temperature: float
    classes: list[ClassInfo] = Field(default_factory=list)
    trickle_per_class: int = 0
    primed_passages: bool = False  # classroom: each passage sent once before the run, as the service's warm-up does


class RunConfig(BaseModel):
    target: TargetKind
    url: str
    variant: str  # e.g. original or fp8: what compare groups by
    seed: int
    warmup_requests: int  # sent before measuring, never with the measured prompts, excluded from figures
    max_requests: int
    max_seconds: float
    ttft_target_ms: float
    settle_s: float
    notes: list[str] = Field(default_factory=list)  # e.g. a raised rate limit of the service


class RunResult(BaseModel):
    schema_version: int = 1
    created: str
    config: RunConfig
    workload: WorkloadInfo
    model: ModelInfo
    environment: Environment
    benchmarks: list[Benchmark]

    def failed(self) -> tuple[int, int]:
        """Requests that got no whole answer, and requests sent, over every load level."""
        records = [r for b in self.benchmarks for r in b.requests]
        return sum(not r.ok for r in records), len(records)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.model_dump_json(indent=1) + "\n")

    @classmethod
    def load(cls, path: Path) -> "RunResult":
        # Results kept as .json.gz: each run's per-request records are ~0.5 MB of JSON, and every committed byte
        # travels with each command sent to the lent GPU (64 MiB in all).
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        return cls.model_validate_json(raw)
