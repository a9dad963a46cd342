"""Operators: the state of the deployment. Every route here needs the operator token."""

from fastapi import APIRouter
from pydantic import BaseModel

from service.deps import OperatorAuth, ServicesDep

router = APIRouter(prefix="/api/operator", tags=["operator"])


class Status(BaseModel):
    backend_url: str
    served_model_name: str
    model: str


@router.get("/status")
async def status(_: OperatorAuth, services: ServicesDep) -> Status:
    backend = services.settings.backend
    model = services.model.describe() if services.model else "unknown (no classroom-model.json)"
    return Status(backend_url=backend.base_url, served_model_name=backend.served_model_name, model=model)
