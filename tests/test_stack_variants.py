"""What `classroom up` declares in the shared configuration: the variants it serves, described as what they are,
with the operator's choices kept, unless they name the FP8 variant a later run (`make run` after `make run FP8=1`)
does not serve. On the session's real Redis, a database of its own."""

import asyncio
from pathlib import Path

from redis.asyncio import Redis

from service.local.stack import declare_variants, stack_variants
from service.model_manifest import read_manifest
from service.records import BackendConfig, Canary
from service.settings import Settings
from service.store import open_store
from tests.servers import isolated


def stored(settings: Settings) -> BackendConfig:
    async def read() -> BackendConfig | None:
        async with open_store(settings.redis.url) as store:
            return await store.backend_config()

    config = asyncio.run(read())
    assert config is not None
    return config


def test_a_run_declares_what_it_serves_and_keeps_the_operators_choice_only_where_it_still_serves_it(
    settings: Settings, model_dir: Path
) -> None:
    own = isolated(settings)
    model = read_manifest(model_dir)
    assert model is not None
    copy = model.model_copy(update={"quantization": "FP8_DYNAMIC"})
    said: list[str] = []

    # An older run's configuration, as the service seeds it: one variant, no description.
    async def older() -> None:
        async with Redis.from_url(own.redis.url) as redis, open_store(own.redis.url) as store:
            await redis.flushdb()
            await store.seed_backend_config(BackendConfig.single(own.backend.base_url))

    asyncio.run(older())
    asyncio.run(declare_variants(own, stack_variants(own, model, copy), said.append))
    config = stored(own)
    assert config.active == "original" and sorted(config.variants) == ["fp8", "original"]
    assert config.variants["original"].replicas == [own.backend.base_url]
    assert config.variants["original"].description == f"{model.name} ({own.model.dir})"
    assert config.variants["fp8"].replicas == [own.backend.fp8_base_url]
    assert "FP8_DYNAMIC copy" in config.variants["fp8"].description

    # The operator's switch and canary stay through a restart that serves both.
    async def operator_switches() -> None:
        async with open_store(own.redis.url) as store:
            await store.update_backend_config(
                lambda c: c.with_active("fp8").with_canary(Canary(variant="original", percent=10))
            )

    asyncio.run(operator_switches())
    asyncio.run(declare_variants(own, stack_variants(own, model, copy), said.append))
    assert (stored(own).active, stored(own).canary) == ("fp8", Canary(variant="original", percent=10))
    assert said == []

    # A run without the copy: pupils go back to the original, and the operator is told.
    asyncio.run(declare_variants(own, stack_variants(own, model, None), said.append))
    config = stored(own)
    assert (config.active, config.canary) == ("original", None)
    assert said == ["The active variant was 'fp8', which this run does not serve: now 'original'."]
    assert "fp8" in config.variants  # still listed (its replica down on the console), as the operator left it
