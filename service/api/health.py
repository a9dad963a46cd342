"""Liveness and readiness, for people and for orchestrators' probes."""

import anyio
from fastapi import APIRouter
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError

from service.api.bodies import ApiRoute
from service.api.schemas import Readiness
from service.deps import ServicesDep

router = APIRouter(tags=["health"], route_class=ApiRoute)

PROBE_TIMEOUT_S = 2.0


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@router.get("/readyz", response_model=Readiness, responses={503: {"model": Readiness}})
async def readyz(services: ServicesDep) -> JSONResponse:
    """Redis answers and a replica of the active variant serves our model (as last probed): only then
    can a question be answered."""
    try:
        # The client retries through a Redis restart for seconds; a probe wants an answer now.
        with anyio.fail_after(PROBE_TIMEOUT_S):
            await services.redis.ping()
        redis = "ok"
    except (OSError, RedisError) as exc:  # TimeoutError is an OSError
        redis = f"unreachable: {exc or 'no answer within the probe time'}"
    fleet = services.fleet
    active = fleet.config.active
    replicas = fleet.config.variants[active].replicas
    if fleet.healthy() & set(replicas):
        backend = "ok"
    else:
        errors = "; ".join(f"{url}: {fleet.replicas[url].error}" for url in replicas if url in fleet.replicas)
        backend = f"no healthy replica of the active variant '{active}' ({errors})"
    model = services.model.describe() if services.model else "unknown (no classroom-model.json)"
    body = Readiness(redis=redis, backend=backend, model=model)
    ready = redis == "ok" and backend == "ok"
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)
