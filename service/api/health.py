"""Liveness and readiness, for people and for orchestrators' probes, and Prometheus' scrape of the service's metrics
(service.telemetry.prometheus) over all its worker processes."""

from typing import Annotated

import anyio
from fastapi import APIRouter, Query, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST
from redis.exceptions import RedisError

from service.api.bodies import ApiRoute
from service.api.deps import ServicesDep
from service.api.schemas import Readiness

router = APIRouter(tags=["health"], route_class=ApiRoute)

PROBE_TIMEOUT_S = 2.0


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@router.get("/readyz", response_model=Readiness, responses={503: {"model": Readiness}})
async def readyz(
    services: ServicesDep,
    answering: Annotated[
        bool, Query(description="also require a healthy replica of the active variant (for scripts that ask next)")
    ] = False,
) -> JSONResponse:
    """The process can serve: Redis answers. Whether a replica of the active variant serves our model (as last
    probed) is said beside it, and decides only with `answering=true`: a backend down is the whole fleet's, not
    this pod's, so it takes no pod out of an ingress (pages, the console and per-question 503s stay served)."""
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
    ready = redis == "ok" and (backend == "ok" or not answering)
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)


@router.get("/metrics", include_in_schema=False, tags=["metrics"])
async def metrics(services: ServicesDep) -> Response:
    return Response(await services.scrape.text(), media_type=CONTENT_TYPE_LATEST)
