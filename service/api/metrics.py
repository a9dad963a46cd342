"""Prometheus' scrape endpoint: the service's metrics (service.metrics), over all its worker processes."""

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST

from service.deps import ServicesDep

router = APIRouter(tags=["metrics"], include_in_schema=False)


@router.get("/metrics")
async def metrics(services: ServicesDep) -> Response:
    return Response(await services.scrape.text(), media_type=CONTENT_TYPE_LATEST)
