"""Server-rendered pages. Their scripts talk to the same JSON and SSE API as any other client; a page
that needs a session it does not have sends the browser to where one is made."""

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response

from service.api.deps import PagePupil, PagePupilOrNone, PageTeacher, ServicesDep, SettingsDep, StoreDep, TemplatesDep
from service.api.schemas import PUPIL_NAME_MAX_CHARS
from service.errors import ClassroomNotFound

router = APIRouter(tags=["pages"], include_in_schema=False)


@router.get("/", response_class=HTMLResponse)
async def join_page(request: Request, pupil: PagePupilOrNone, templates: TemplatesDep) -> Response:
    if pupil is not None:
        return RedirectResponse("/class", status_code=303)
    return templates.TemplateResponse(request, "join.html", {"name_max_chars": PUPIL_NAME_MAX_CHARS})


@router.get("/class", response_class=HTMLResponse)
async def class_page(
    request: Request, pupil: PagePupil, store: StoreDep, services: ServicesDep, templates: TemplatesDep
) -> Response:
    classroom = await store.get_classroom(pupil.classroom_id)
    context = {
        "classroom_name": classroom.name,
        "pupil_name": pupil.name,
        "question_max_chars": services.settings.limits.question_max_chars,
        # What answers, in a pupil's words: a small practice model says it gets facts wrong.
        "which_model": services.model.for_pupils() if services.model else "Answers are written by a computer model.",
    }
    return templates.TemplateResponse(request, "class.html", context)


@router.get("/docs", response_class=HTMLResponse)
async def api_docs(request: Request, templates: TemplatesDep) -> Response:
    """The API's reference (Swagger UI on the service's own OpenAPI schema), from the service's own files."""
    return templates.TemplateResponse(request, "api_docs.html", {"openapi_url": request.app.openapi_url})


@router.get("/operator", response_class=HTMLResponse)
async def operator_page(request: Request, templates: TemplatesDep) -> Response:
    """The console itself asks for the operator token and sends it with every call; the page holds no data."""
    return templates.TemplateResponse(request, "operator.html")


@router.get("/teacher/login", response_class=HTMLResponse)
async def login_page(request: Request, templates: TemplatesDep) -> Response:
    return templates.TemplateResponse(request, "teacher_login.html")


@router.get("/teacher", response_class=HTMLResponse)
async def classes_page(request: Request, teacher: PageTeacher, templates: TemplatesDep) -> Response:
    return templates.TemplateResponse(request, "teacher_classes.html", {"teacher_name": teacher.name})


@router.get("/teacher/classes/{classroom_id}", response_class=HTMLResponse)
async def teacher_class_page(
    classroom_id: str, request: Request, teacher: PageTeacher, store: StoreDep, templates: TemplatesDep
) -> Response:
    try:
        classroom = await store.get_classroom(classroom_id)
    except ClassroomNotFound:
        classroom = None
    if classroom is None or classroom.teacher_id != teacher.id:
        # Deleted, mistyped, or another teacher's (which answers alike): say so, rather than go elsewhere.
        return templates.TemplateResponse(request, "teacher_no_class.html", status_code=404)
    context = {"classroom_id": classroom.id, "classroom_name": classroom.name, "join_code": classroom.join_code}
    return templates.TemplateResponse(request, "teacher_class.html", context)


@router.get("/favicon.ico")
async def favicon(settings: SettingsDep) -> FileResponse:
    """The icon that pages link (static/favicon.svg), where browsers look for one without a link."""
    return FileResponse(
        settings.frontend_dir / "static" / "favicon.svg",
        media_type="image/svg+xml",
        headers={"Cache-Control": "public, max-age=86400"},
    )
