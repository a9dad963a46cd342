"""The FastAPI app factory: `uvicorn --factory service.app:create_app`."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from service.api.handlers import install_error_handlers
from service.api.router import api_router
from service.services import open_services
from service.settings import Settings


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with open_services(settings) as services:
            app.state.services = services
            yield

    app = FastAPI(title="classroom-assistant", lifespan=lifespan)
    install_error_handlers(app)
    app.include_router(api_router)
    app.state.templates = Jinja2Templates(directory=settings.frontend_dir / "templates")
    app.mount("/static", StaticFiles(directory=settings.frontend_dir / "static"), name="static")
    return app
