"""Operators: the backends (switch, canary, replicas), their health, and latency and cache figures.

Every route here needs the operator token. Changes go to the configuration shared in Redis, which
every service process follows within a second.
"""

import time
from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from service.api.bodies import ApiRoute
from service.api.deps import OperatorAuth, ServicesDep, StoreDep
from service.api.schemas import JSON_BODY, STORE, WRITE, errors
from service.backends.fleet import Fleet
from service.backends.vllm_metrics import VllmFigures
from service.classroom import aggregates, figures
from service.records import BackendConfig, Canary, QuestionRecord, Variant, WarmupBurst
from service.services import Services
from service.store import MemoryUsage, Store

# Without the operator's token, every route here answers 403.
router = APIRouter(prefix="/api/operator", tags=["operator"], route_class=ApiRoute, responses=errors(403, *STORE))

Window = Annotated[int, Query(ge=60, le=24 * 3600, description="seconds back from now")]


class Status(BaseModel):
    served_model_name: str
    model: str
    store: MemoryUsage = Field(description="Redis' memory: what the state takes, and its bound")


class ReplicaOut(BaseModel):
    url: str
    variants: list[str]
    healthy: bool
    error: str | None
    checked_at: float
    vllm: VllmFigures
    warmup: WarmupBurst | None = Field(description="how its last warm-up burst went; none yet if null")


class BackendsOut(BaseModel):
    config: BackendConfig
    replicas: list[ReplicaOut]


class ChooseVariant(BaseModel):
    variant: str


class ClassroomLabel(BaseModel):
    """How an operator tells classes apart: names repeat ("Class 4B"), a join code and a teacher do not."""

    name: str
    join_code: str
    teacher: str = Field(description="the teacher's name")


class StatsOut(BaseModel):
    window_s: int
    overall: figures.Figures
    by_variant: dict[str, figures.Figures]
    by_replica: dict[str, figures.Figures]
    by_classroom: dict[str, figures.Figures]
    classrooms: dict[str, ClassroomLabel] = Field(description="the classrooms of by_classroom that still exist")
    series: dict[str, list[figures.Point]] = Field(description="per variant, per minute")


class ClassroomRouting(BaseModel):
    """Where a class's questions went and which replicas hold its passage: the stored records whole."""

    classroom_id: str
    active_passage_id: str | None
    warmed_on: list[str]
    questions: list[QuestionRecord] = Field(description="newest first")


async def _backends(fleet: Fleet, store: Store) -> BackendsOut:
    config = fleet.config
    urls = config.replica_urls()
    bursts = await store.burst_outcomes(urls)
    replicas = []
    for url in urls:
        state = fleet.replicas.get(url)
        variants = [name for name, v in config.variants.items() if url in v.replicas]
        replicas.append(
            ReplicaOut(
                url=url,
                variants=variants,
                healthy=bool(state and state.healthy),
                error=state.error if state else "not probed yet",
                checked_at=state.checked_at if state else 0.0,
                vllm=state.figures if state else VllmFigures(),
                warmup=bursts.get(url),
            )
        )
    return BackendsOut(config=config, replicas=replicas)


async def _change(services: Services, change: Callable[[BackendConfig], BackendConfig]) -> BackendsOut:
    await services.fleet.update(change)
    return await _backends(services.fleet, services.store)


@router.get("/status")
async def status(_: OperatorAuth, services: ServicesDep) -> Status:
    model = services.model.describe() if services.model else "unknown (no classroom-model.json)"
    return Status(served_model_name=services.served_name, model=model, store=await services.store.memory_usage())


@router.get("/backends")
async def backends(_: OperatorAuth, services: ServicesDep) -> BackendsOut:
    """The variants, the active one and the canary, and each replica's health and vLLM figures."""
    return await _backends(services.fleet, services.store)


@router.put("/backends/active", responses=errors(*JSON_BODY, 409))
async def switch(body: ChooseVariant, _: OperatorAuth, services: ServicesDep) -> BackendsOut:
    """New questions go to this variant, once one of its replicas answers a probe (409 otherwise); answers
    already streaming finish where they started."""
    await services.fleet.check_serving(body.variant)
    return await _change(services, lambda config: config.with_active(body.variant))


@router.put("/backends/canary", responses=errors(*JSON_BODY, 409))
async def set_canary(body: Canary, _: OperatorAuth, services: ServicesDep) -> BackendsOut:
    """Send this share of pupils (by a hash of their id: each stays on one variant) to another variant, once one
    of its replicas answers a probe (409 otherwise)."""
    if body.percent > 0:
        await services.fleet.check_serving(body.variant)
    return await _change(services, lambda config: config.with_canary(body))


@router.delete("/backends/canary", responses=errors(*WRITE))
async def end_canary(_: OperatorAuth, services: ServicesDep) -> BackendsOut:
    return await _change(services, lambda config: config.with_canary(None))


@router.put("/backends/variants/{name}", responses=errors(*JSON_BODY))
async def put_variant(name: str, body: Variant, _: OperatorAuth, services: ServicesDep) -> BackendsOut:
    """Declare a variant or change its replicas (add one to scale out, remove one to drain it)."""
    return await _change(services, lambda config: config.with_variant(name, body))


@router.delete("/backends/variants/{name}", responses=errors(*WRITE, 422))
async def delete_variant(name: str, _: OperatorAuth, services: ServicesDep) -> BackendsOut:
    return await _change(services, lambda config: config.without_variant(name))


@router.get("/stats", responses=errors(422))
async def operator_stats(_: OperatorAuth, services: ServicesDep, window_s: Window = 3600) -> StatsOut:
    """Questions, errors, time to first token and cache hit ratio per variant, replica and classroom (each
    class with its join code and teacher), and per minute: from the tallies each question adds to as its final
    record is stored (service/store/stats.py), never the records, so a question still being answered counts once
    it ends; the window's first minute counts whole."""
    store = services.store
    found = aggregates.window_figures(await store.stats_window(time.time() - window_s))
    classrooms = await store.classrooms(found.by_classroom)
    teachers = await store.teachers(c.teacher_id for c in classrooms.values())
    return StatsOut(
        window_s=window_s,
        overall=found.overall,
        by_variant=found.by_variant,
        by_replica=found.by_replica,
        by_classroom=found.by_classroom,
        classrooms={
            c.id: ClassroomLabel(
                name=c.name,
                join_code=c.join_code,
                teacher=teachers[c.teacher_id].name if c.teacher_id in teachers else "(account removed)",
            )
            for c in classrooms.values()
        },
        series=found.series,
    )


@router.get("/classrooms/{classroom_id}", responses=errors(404, 422))
async def classroom_routing(
    _: OperatorAuth,
    classroom_id: str,
    store: StoreDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> ClassroomRouting:
    """A class's latest questions as stored (replica, variant, errors) and the replicas warmed with its passage."""
    classroom = await store.get_classroom(classroom_id)
    active = await store.active_passage_id(classroom.id)
    return ClassroomRouting(
        classroom_id=classroom.id,
        active_passage_id=active,
        warmed_on=await store.warmed(active) if active else [],
        questions=await store.list_questions(classroom.id, limit=limit),
    )
