"""Prometheus metrics of the service, labelled by classroom and variant (and replica where it matters).

Every stored question is counted once, when its record is final (answered, incomplete or failed), so
the counters always agree with the records in Redis.

Label values stay bounded: a `classroom` label is given to at most `max_classrooms` classrooms at a
time, those that asked most recently; a classroom idle for `idle_s` gives its place up (its series are
removed) and any classroom beyond the bound is counted under `other`. The full per-class detail lives in
the stored records, from which the teacher's and operator's pages compute their figures.
"""

import time
from collections.abc import Iterable, Sized
from typing import Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector

from service.records import QuestionRecord

M = TypeVar("M", bound=MetricWrapperBase)
OTHER = "other"
LATENCY_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
TOKEN_GAP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
# A loop late by a millisecond is busy; by a tenth of a second, a page's stream stutters and probes time out.
LOOP_LAG_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)


class ClassroomLabels:
    """Which classrooms get a label of their own, and the series to remove when one gives it up."""

    def __init__(self, max_classrooms: int, idle_s: float) -> None:
        self.max_classrooms = max_classrooms
        self.idle_s = idle_s
        self._last_seen: dict[str, float] = {}
        self._series: dict[str, set[tuple[MetricWrapperBase, tuple[str, ...]]]] = {}

    def label(self, classroom_id: str, now: float) -> str:
        if classroom_id not in self._last_seen and len(self._last_seen) >= self.max_classrooms:
            self._evict_idle(now)
        if classroom_id in self._last_seen or len(self._last_seen) < self.max_classrooms:
            self._last_seen[classroom_id] = now
            return classroom_id
        return OTHER

    def used(self, classroom_id: str, metric: MetricWrapperBase, labels: tuple[str, ...]) -> None:
        if classroom_id in self._last_seen:
            self._series.setdefault(classroom_id, set()).add((metric, labels))

    def _evict_idle(self, now: float) -> None:
        for classroom_id, seen in list(self._last_seen.items()):
            if now - seen > self.idle_s:
                del self._last_seen[classroom_id]
                for metric, labels in self._series.pop(classroom_id, set()):
                    metric.remove(*labels)


class Metrics:
    def __init__(self, registry: CollectorRegistry, max_classrooms: int = 200, idle_s: float = 3600.0) -> None:
        self.registry = registry
        self.classrooms = ClassroomLabels(max_classrooms, idle_s)
        by_class = ["classroom", "variant"]
        self.ttft = Histogram(
            "classroom_time_to_first_token_seconds",
            "From a question's arrival to the first token of its answer.",
            by_class,
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.inter_token = Histogram(
            "classroom_inter_token_latency_seconds",
            "Gaps between consecutive tokens of an answer, as the service received them.",
            by_class,
            buckets=TOKEN_GAP_BUCKETS,
            registry=registry,
        )
        self.duration = Histogram(
            "classroom_request_duration_seconds",
            "From a question's arrival to the end of its answer (end to end).",
            by_class,
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.queue_wait = Histogram(
            "classroom_queue_wait_seconds",
            "From a question's arrival until a replica accepted it (checks, storing, routing, connecting).",
            by_class,
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.questions = Counter(
            "classroom_questions",
            "Stored questions by outcome: answered, incomplete (cut short) or failed (no answer).",
            [*by_class, "outcome"],
            registry=registry,
        )
        self.prompt_tokens = Counter(
            "classroom_prompt_tokens", "Prompt tokens of answered questions.", by_class, registry=registry
        )
        self.cached_tokens = Counter(
            "classroom_cached_prompt_tokens",
            "Prompt tokens served from vLLM's prefix cache; divided by prompt tokens, the cache hit ratio.",
            by_class,
            registry=registry,
        )
        self.completion_tokens = Counter(
            "classroom_completion_tokens", "Tokens of the answers.", by_class, registry=registry
        )
        by_replica = ["variant", "replica"]
        self.replica_questions = Counter(
            "classroom_replica_questions",
            "Stored questions by the replica that took them, and outcome.",
            [*by_replica, "outcome"],
            registry=registry,
        )
        self.replica_ttft = Histogram(
            "classroom_replica_time_to_first_token_seconds",
            "Time to first token by replica.",
            by_replica,
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )

        self.loop_lag = Histogram(
            "classroom_event_loop_lag_seconds",
            "How late a service process's event loop ran a timer that was due: what anything arriving then "
            "(a question, a probe's reply) waited before it began.",
            buckets=LOOP_LAG_BUCKETS,
            registry=registry,
        )
        self.warmup_burst = Histogram(
            "classroom_warmup_burst_seconds",
            "Warm-up bursts sent to a replica that came up, by how long they took to be answered: a fresh "
            "GPU replica's first takes seconds (its sampler compiling), later ones a fraction of one.",
            ["replica"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.warmup_burst_failed = Counter(
            "classroom_warmup_burst_failed",
            "Warm-up bursts of which some requests went unanswered after every attempt: the replica may still be "
            "cold for its first class (the operator console says why).",
            ["replica"],
            registry=registry,
        )

    def _child(self, metric: M, classroom_id: str, *labels: str) -> M:
        self.classrooms.used(classroom_id, metric, labels)
        return metric.labels(*labels)

    def observe(
        self, record: QuestionRecord, token_gaps_s: Iterable[float] = (), queue_wait_s: float | None = None
    ) -> None:
        """Count one stored question whose record is final."""
        variant, replica = record.variant or "none", record.replica or "none"
        cid = record.classroom_id
        label = self.classrooms.label(cid, time.time())
        self._child(self.questions, cid, label, variant, record.status.value).inc()
        self.replica_questions.labels(variant, replica, record.status.value).inc()
        if record.ttft_ms is not None:
            self._child(self.ttft, cid, label, variant).observe(record.ttft_ms / 1000)
            self.replica_ttft.labels(variant, replica).observe(record.ttft_ms / 1000)
        if record.total_ms is not None:
            self._child(self.duration, cid, label, variant).observe(record.total_ms / 1000)
        if queue_wait_s is not None:
            self._child(self.queue_wait, cid, label, variant).observe(queue_wait_s)
        gaps = self._child(self.inter_token, cid, label, variant)
        for gap in token_gaps_s:
            gaps.observe(gap)
        if record.usage is not None:
            self._child(self.prompt_tokens, cid, label, variant).inc(record.usage.prompt_tokens)
            self._child(self.cached_tokens, cid, label, variant).inc(record.usage.cached_tokens)
            self._child(self.completion_tokens, cid, label, variant).inc(record.usage.completion_tokens)


class HealthSource(Protocol):
    def replica_health(self) -> list[tuple[str, str, bool]]:
        """(variant, replica, healthy) for each configured replica."""
        ...


class ReplicaHealthCollector(Collector):
    """`classroom_replica_up`: each replica's health as this process last probed it, read at scrape time."""

    def __init__(self, health: HealthSource) -> None:
        self._health = health

    def collect(self) -> Iterable[GaugeMetricFamily]:
        up = GaugeMetricFamily(
            "classroom_replica_up", "1 if the replica passed its last probe, else 0.", labels=["variant", "replica"]
        )
        for variant, replica, healthy in self._health.replica_health():
            up.add_metric([variant, replica], 1.0 if healthy else 0.0)
        yield up


class Count(Collector):
    """A gauge of how many `items` this process holds, counted at scrape time and added up over the workers like
    the counters: what the autoscalers scale on, since open streams, not CPU, are what a pod of this gateway
    carries. `answers_in_flight` (the answers it writes now, streaming or waiting their turn: the service's pods,
    deploy/k8s/service.yaml) and `open_pages` (its endless streams, pupils' pages and teachers' feeds, ~15 KiB and
    hardly any CPU each: the open pages' pods, deploy/k8s/pages.yaml) are the two."""

    def __init__(self, name: str, documentation: str, items: Sized) -> None:
        self._name, self._documentation, self._items = name, documentation, items

    def collect(self) -> Iterable[GaugeMetricFamily]:
        yield GaugeMetricFamily(self._name, self._documentation, value=len(self._items))

    @classmethod
    def answers_in_flight(cls, answers: Sized) -> "Count":
        return cls("classroom_answers_in_flight", "Answers this service process is writing now.", answers)

    @classmethod
    def open_pages(cls, pages: Sized) -> "Count":
        return cls(
            "classroom_open_pages",
            "Open pages (pupils' class notices, teachers' live feeds) this service process streams to now.",
            pages,
        )


class SubscriptionCounts(Protocol):
    @property
    def subscribers(self) -> int: ...

    @property
    def channels(self) -> int: ...


class Subscribers(Collector):
    """`classroom_subscribers`: what listens on this process's one pub/sub connection (`store.Subscriptions`):
    open teacher pages and the process's own listeners, and the channels they listen to."""

    def __init__(self, subscriptions: SubscriptionCounts) -> None:
        self._subscriptions = subscriptions

    def collect(self) -> Iterable[GaugeMetricFamily]:
        yield GaugeMetricFamily(
            "classroom_subscribers",
            "Subscribers of this service process's one Redis pub/sub connection (open teacher pages among them).",
            value=self._subscriptions.subscribers,
        )
        yield GaugeMetricFamily(
            "classroom_subscribed_channels",
            "Redis channels this service process listens to.",
            value=self._subscriptions.channels,
        )
