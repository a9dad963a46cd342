"""Prometheus' scrape endpoint: this process's metrics (service.metrics)."""

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service.deps import ServicesDep

router = APIRouter(tags=["metrics"], include_in_schema=False)


@router.get("/metrics")
async def metrics(services: ServicesDep) -> Response:
    return Response(generate_latest(services.metrics.registry), media_type=CONTENT_TYPE_LATEST)
