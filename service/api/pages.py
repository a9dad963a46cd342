"""Server-rendered pages. Their scripts talk to the same JSON and SSE API as any other client."""

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from service.deps import ServicesDep, TemplatesDep

router = APIRouter(tags=["pages"], include_in_schema=False)


@router.get("/", response_class=HTMLResponse)
async def try_it(request: Request, services: ServicesDep, templates: TemplatesDep) -> HTMLResponse:
    """One page to try the whole path: a class, a passage, answers streaming in, and their history."""
    model = services.model.describe() if services.model else "an unknown model"
    return templates.TemplateResponse(request, "try.html", {"model": model})
