"""The long-lived objects of one service process, built once at start-up and closed at shutdown."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta

from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from service.accounts import Accounts
from service.answering import Answering
from service.backends import BackendConfig
from service.fleet import Fleet
from service.metrics import Metrics, ReplicaHealthCollector
from service.model.prepare import ModelManifest, read_manifest
from service.passages import Passages
from service.prompting import Prompts
from service.ratelimit import QuestionRateLimit
from service.settings import Settings
from service.store import Store, connect
from service.warmup import Warmup


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
    answering: Answering
    model: ModelManifest | None


def declared_backends(settings: Settings) -> BackendConfig:
    file = settings.routing.backends_file
    return BackendConfig.from_file(file) if file is not None else BackendConfig.single(settings.backend.base_url)


@asynccontextmanager
async def open_services(settings: Settings) -> AsyncIterator[Services]:
    prompts = Prompts.from_settings(settings)
    redis = connect(settings.redis.url)
    store = Store(redis)
    fleet = Fleet(store, settings, declared_backends(settings))
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    registry.register(ReplicaHealthCollector(fleet))
    model = settings.backend.served_model_name
    warmup = Warmup(store, prompts, fleet, model=model, max_passages=settings.routing.warmup_max_passages)
    if settings.routing.warmup:
        fleet.on_change(warmup.fleet_changed)
    answering = Answering(
        store,
        prompts,
        fleet,
        metrics,
        QuestionRateLimit(redis, settings.redis.url, settings.limits.questions_per_minute),
        model=model,
        max_tokens=settings.answer.max_tokens,
        temperature=settings.answer.temperature,
        longest_answer=timedelta(seconds=settings.answer.longest_s),
    )
    await fleet.start()
    try:
        yield Services(
            settings=settings,
            redis=redis,
            store=store,
            accounts=Accounts(store, settings.auth),
            prompts=prompts,
            fleet=fleet,
            warmup=warmup,
            passages=Passages(store, prompts, warmup if settings.routing.warmup else None),
            metrics=metrics,
            answering=answering,
            model=read_manifest(settings.model.dir),
        )
    finally:
        await warmup.close()
        await fleet.close()
        await redis.aclose()
