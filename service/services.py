"""The long-lived objects of one service process, built once at start-up and closed at shutdown."""

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from service.backends.fleet import Fleet
from service.backends.replica_http import AiohttpTransport, ReplicaHttp, Transport
from service.backends.turns import Turns
from service.backends.warmup import Warmup
from service.classroom.abandoned import AbandonedAnswers
from service.classroom.accounts import Accounts
from service.classroom.answering import Answering
from service.classroom.archive import QuestionArchive
from service.classroom.class_cache import ClassCache
from service.classroom.document_worker import DocumentReader
from service.classroom.live import LiveAnswers
from service.classroom.notices import ClassNotices
from service.classroom.prompting import Prompts
from service.classroom.publishing import Passages
from service.classroom.retention import Retention
from service.draining import Draining
from service.model_manifest import ModelManifest, read_manifest
from service.quiet_collector import QuietCollector
from service.records import BackendConfig
from service.settings import Settings
from service.store import RateLimit, Store, connect, open_connections
from service.telemetry.loop_lag import LoopLag
from service.telemetry.prometheus import Count, Metrics, ReplicaHealthCollector, Subscribers
from service.telemetry.scrape import Scrape


@dataclass(frozen=True)
class Services:
    settings: Settings
    redis: Redis
    store: Store
    accounts: Accounts
    prompts: Prompts
    fleet: Fleet
    warmup: Warmup
    passages: Passages
    metrics: Metrics
    scrape: Scrape
    answering: Answering
    notices: ClassNotices
    draining: Draining  # the open pages' streams, ended when the server begins to stop
    archive: QuestionArchive
    model: ModelManifest | None
    served_name: str  # what vLLM serves the model under, and every request names


def declared_backends(settings: Settings) -> BackendConfig:
    file = settings.routing.backends_file
    return BackendConfig.from_file(file) if file is not None else BackendConfig.single(settings.backend.base_url)


@asynccontextmanager
async def open_services(settings: Settings, transport: Transport | None = None) -> AsyncIterator[Services]:
    """`transport`: how requests reach the replicas (`replica_http`); a test may hand a fake one."""
    prompts = Prompts.from_settings(settings)
    redis = connect(settings.redis.url, settings.redis.max_connections)
    store = Store(redis)
    replica_http = ReplicaHttp(
        transport or AiohttpTransport(settings.backend), settings.backend, settings.routing.probe_timeout_s
    )
    fleet = Fleet(store, settings, declared_backends(settings), replica_http)
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    scrape = Scrape(registry, ReplicaHealthCollector(fleet), settings.api.metrics_dir)
    model = settings.served_name()
    routing = settings.routing
    warmup = Warmup(
        store,
        prompts,
        fleet,
        replica_http,
        metrics,
        model=model,
        max_passages=routing.warmup_max_passages,
        # Long enough for every worker to have seen a change, short enough that a replica back from a
        # restart is warmed again.
        claim_s=2 * routing.probe_interval_s + routing.config_poll_s,
        burst=routing.warmup_burst,
        burst_temperature=settings.answer.temperature,  # the sampler's path as pupils' answers take it
        # A replica whose /metrics does not say when it started is claimed by its address, renewed by every
        # process's probes while it is up; a round of probes lasts up to three timeouts. Twice the longest
        # gap between them: one down for longer than that (a restart takes minutes) is new when it is back.
        burst_claim_s=2 * (routing.probe_interval_s + 3 * routing.probe_timeout_s),
        burst_connect_timeout_s=routing.warmup_connect_timeout_s,
        burst_attempts=routing.warmup_attempts,
    )
    if settings.routing.warmup:
        fleet.on_change(warmup.fleet_changed)
        fleet.on_probed(warmup.replicas_probed)
    accounts = Accounts(store, settings.auth)
    # Behind a router or gateway its own queue takes turns; a line of ours per router URL would be the district's.
    turn_settings = settings.turns
    if routing.policy == "gateway":
        turn_settings = turn_settings.model_copy(update={"max_in_flight_per_replica": 0})
    turns = Turns(store, turn_settings, longest_answer_s=settings.answer.longest_s)
    abandoned = AbandonedAnswers(store, settings.answer.writer_lease_s)
    school = settings.school
    archive = QuestionArchive(school.archive_dir or settings.state_dir / "archive")
    retention = Retention(store, archive, retention_days=school.retention_days, every_s=school.retention_check_s)
    classes = ClassCache(store, prompts)
    notices = ClassNotices(store, classes)
    answers = LiveAnswers(store, settings.answer.writer_lease_s)
    registry.register(Count.answers_in_flight(answers))
    registry.register(Subscribers(store.subscriptions))
    draining = Draining()
    registry.register(Count.open_pages(draining))
    loop_lag = LoopLag(metrics.loop_lag, settings.api.loop_lag_interval_s)
    api = settings.api
    collector = QuietCollector(answers, check_s=api.gc_check_s, least_s=api.gc_least_s, most_s=api.gc_most_s)
    answering = Answering(
        store,
        prompts,
        classes,
        accounts,
        fleet,
        replica_http,
        metrics,
        turns,
        model=model,
        sampling=settings.answer.sampling(),
        rate=RateLimit(most=settings.limits.questions_per_minute),
        longest_answer_s=math.ceil(settings.answer.longest_s),
        lease_s=settings.answer.writer_lease_s,
        answers=answers,
        progress_s=settings.answer.progress_s,
        stop_wait_s=settings.answer.stop_wait_s,
    )
    try:
        await open_connections(redis, settings.redis.warm_connections)
        await fleet.start()
        await scrape.start()
        await turns.start()
        await abandoned.start()
        await retention.start()
        await notices.start()
        await answers.start()
        await loop_lag.start()
        await collector.start()
        yield Services(
            settings=settings,
            redis=redis,
            store=store,
            accounts=accounts,
            prompts=prompts,
            fleet=fleet,
            warmup=warmup,
            passages=Passages(
                store,
                prompts,
                warmup if settings.routing.warmup else None,
                DocumentReader(settings.documents, prompts.passage_max_chars),
                upload_max_bytes=settings.limits.upload_max_bytes,
            ),
            metrics=metrics,
            scrape=scrape,
            answering=answering,
            notices=notices,
            draining=draining,
            archive=archive,
            model=read_manifest(settings.model.dir),
            served_name=model,
        )
    finally:
        await collector.close()
        await loop_lag.close()
        await notices.close()
        # Answers still being written (no pupil's connection kept the server waiting for them) end first,
        # stored cut short with their text, while Redis and the backends' connections are still open.
        await answers.close()
        await abandoned.close()
        await retention.close()
        await turns.close()
        await scrape.close()
        await warmup.close()
        await fleet.close()
        await replica_http.close()
        await store.subscriptions.close()
        await redis.aclose()
