"""The long-lived objects of one service process, built once at start-up and closed at shutdown."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta

from openai import AsyncOpenAI, Timeout
from redis.asyncio import Redis

from service.accounts import Accounts
from service.answering import Answering
from service.model.prepare import ModelManifest, read_manifest
from service.prompting import Prompts
from service.ratelimit import QuestionRateLimit
from service.settings import Settings
from service.store import Store, connect
from service.tokens import ModelTokenizer


@dataclass(frozen=True)
class Services:
    settings: Settings
    redis: Redis
    store: Store
    accounts: Accounts
    prompts: Prompts
    backend: AsyncOpenAI
    answering: Answering
    model: ModelManifest | None


def backend_client(settings: Settings) -> AsyncOpenAI:
    backend = settings.backend
    return AsyncOpenAI(
        base_url=backend.base_url,
        api_key=backend.api_key.get_secret_value(),
        # No retries: a pupil waiting on a dead backend should hear so at once, not after backoff.
        max_retries=0,
        timeout=Timeout(backend.read_timeout_s, connect=backend.connect_timeout_s),
    )


def build_prompts(settings: Settings) -> Prompts:
    return Prompts(
        settings.prompts_dir,
        ModelTokenizer.from_model_dir(settings.model.dir),
        max_model_len=settings.backend.max_model_len,
        answer_max_tokens=settings.answer.max_tokens,
        question_max_chars=settings.limits.question_max_chars,
        question_max_tokens=settings.limits.question_max_tokens,
    )


@asynccontextmanager
async def open_services(settings: Settings) -> AsyncIterator[Services]:
    prompts = build_prompts(settings)
    redis = connect(settings.redis.url)
    client = backend_client(settings)
    store = Store(redis)
    answering = Answering(
        store,
        prompts,
        client,
        QuestionRateLimit(redis, settings.redis.url, settings.limits.questions_per_minute),
        model=settings.backend.served_model_name,
        max_tokens=settings.answer.max_tokens,
        temperature=settings.answer.temperature,
        longest_answer=timedelta(seconds=settings.answer.longest_s),
    )
    try:
        yield Services(
            settings=settings,
            redis=redis,
            store=store,
            accounts=Accounts(store, settings.auth),
            prompts=prompts,
            backend=client,
            answering=answering,
            model=read_manifest(settings.model.dir),
        )
    finally:
        await client.close()
        await redis.aclose()
