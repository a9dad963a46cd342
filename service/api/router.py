"""Every router of the API, gathered in one place."""

from fastapi import APIRouter

from service.api import health, operator, pages, pupil, teacher

api_router = APIRouter()
# Routes are matched in order: the pupils', which every question takes, first.
api_router.include_router(pupil.router)
api_router.include_router(health.router)
api_router.include_router(teacher.router)
api_router.include_router(operator.router)
api_router.include_router(pages.router)
