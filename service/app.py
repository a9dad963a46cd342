"""The FastAPI app factory (`uvicorn --factory service.app:create_app`), and the uvicorn that serves it."""

import gc
import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.resources import files
from typing import Any

import uvicorn
from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from service.api.handlers import install_error_handlers
from service.api.question_lane import QuestionLane
from service.api.router import api_router
from service.api.security import SecurityMiddleware
from service.backends.replica_http import Transport
from service.services import open_services
from service.settings import Settings

# Swagger UI's own files as fastapi-offline ships them, served by the service for /docs.
SWAGGER_UI = str(files("fastapi_offline").joinpath("static"))

# uvicorn's own logging, and the service's lines from INFO up through the same handler, with their level
# (without it only warnings would reach the log, bare): operators read the warm-up bursts' timings there.
LOG_CONFIG: dict[str, Any] = {
    **uvicorn.config.LOGGING_CONFIG,
    "loggers": {
        **uvicorn.config.LOGGING_CONFIG["loggers"],
        "service": {"handlers": ["default"], "level": "INFO", "propagate": False},
    },
}


def create_app(settings: Settings | None = None, transport: Transport | None = None) -> FastAPI:
    """`transport`: how requests reach the replicas (`service.backends.replica_http`); a test may hand a fake one."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with open_services(settings, transport) as services:
            app.state.services = services
            services.draining.install()
            # What start-up made lives as long as the process: out of the collector's sight (its garbage collected
            # first), so that a full collection, which stops the event loop, walks only what requests made.
            gc.collect()
            gc.freeze()
            yield

    # /docs is the service's own page (service/api/pages.py): FastAPI's loads Swagger UI from a CDN, which the
    # CSP blocks and an offline school cannot reach.
    app = FastAPI(title="classroom-assistant", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.add_middleware(QuestionLane)  # inside the security checks: what they refuse never gets here
    app.add_middleware(SecurityMiddleware, allowed_origins=settings.auth.allowed_origins)
    install_error_handlers(app)
    app.include_router(api_router)
    app.state.templates = Jinja2Templates(directory=settings.frontend_dir / "templates")
    app.mount("/static/api-docs", StaticFiles(directory=SWAGGER_UI), name="api-docs")  # before /static's own
    app.mount("/static", StaticFiles(directory=settings.frontend_dir / "static"), name="static")
    return app


def serve(settings: Settings, workers: int | None = None) -> None:
    """The service under uvicorn, on uvloop and httptools (the fastest loop and HTTP parser it has), in
    `workers` processes (default: the settings' count) behind one port. More than one worker read their
    settings from the environment, as this process did, and add up their metrics through a folder of their
    own (service/telemetry/scrape.py)."""
    count = workers or settings.api.resolved_workers(os.cpu_count() or 1)
    api = settings.api
    served: dict[str, Any] = {
        "host": api.host,
        "port": api.port,
        "loop": "uvloop",
        "http": "httptools",
        "access_log": api.access_log,
        "log_config": LOG_CONFIG,
        "proxy_headers": True,
        "forwarded_allow_ips": api.forwarded_allow_ips,
    }
    if count == 1:
        uvicorn.run(create_app(settings), **served)
        return
    folder = (settings.state_dir / "run" / f"metrics-{api.port}").resolve()
    shutil.rmtree(folder, ignore_errors=True)  # a dead run's sockets
    folder.mkdir(parents=True)
    os.environ["CLASSROOM_API__METRICS_DIR"] = str(folder)
    uvicorn.run("service.app:create_app", factory=True, workers=count, **served)
