"""Dependencies as Annotated aliases: routes name what they need; lifespan built it; each check that
can fail raises an error with a sentence the user can act on. Each is `async def`, even with nothing to
await: FastAPI runs a plain `def` dependency in a worker thread, a thread hop on every request."""

import secrets
from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Request, Response
from fastapi.templating import Jinja2Templates

from service.classroom.accounts import Accounts
from service.classroom.answering import Answering
from service.classroom.prompting import Prompts
from service.classroom.publishing import Passages
from service.errors import ClassroomNotFound, OperatorOnly, ServiceError
from service.records import Classroom, PupilSession, Teacher
from service.services import Services
from service.settings import Settings
from service.store import Store

TEACHER_COOKIE = "classroom_teacher"
PUPIL_COOKIE = "classroom_pupil"


def set_session_cookie(response: Response, name: str, token: str, hours: float, secure: bool) -> None:
    # HttpOnly: no script reads it. SameSite=Lax: no other site's form can post with it.
    response.set_cookie(name, token, max_age=int(hours * 3600), httponly=True, samesite="lax", secure=secure)


async def end_session(request: Request, response: Response, name: str, end: Callable[[str], Awaitable[None]]) -> None:
    """Sign out: the session that the cookie `name` holds ends (`end`), and the browser forgets the cookie."""
    if token := request.cookies.get(name):
        await end(token)
    response.delete_cookie(name)


def client_of(request: Request) -> str:
    """Who sent the request: its address (behind a proxy, uvicorn's proxy headers set it from
    X-Forwarded-For for the trusted proxies)."""
    return request.client.host if request.client else "unknown"


async def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


async def get_settings(services: ServicesDep) -> Settings:
    return services.settings


SettingsDep = Annotated[Settings, Depends(get_settings)]


async def get_store(services: ServicesDep) -> Store:
    return services.store


async def get_accounts(services: ServicesDep) -> Accounts:
    return services.accounts


async def get_prompts(services: ServicesDep) -> Prompts:
    return services.prompts


async def get_passages(services: ServicesDep) -> Passages:
    return services.passages


async def get_answering(services: ServicesDep) -> Answering:
    return services.answering


async def get_templates(request: Request) -> Jinja2Templates:
    templates: Jinja2Templates = request.app.state.templates
    return templates


StoreDep = Annotated[Store, Depends(get_store)]
AccountsDep = Annotated[Accounts, Depends(get_accounts)]
PromptsDep = Annotated[Prompts, Depends(get_prompts)]
PassagesDep = Annotated[Passages, Depends(get_passages)]
AnsweringDep = Annotated[Answering, Depends(get_answering)]
TemplatesDep = Annotated[Jinja2Templates, Depends(get_templates)]


def _bearer(request: Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


async def current_teacher(request: Request, accounts: AccountsDep) -> Teacher:
    """The signed-in teacher: the session cookie of the pages, or a bearer token for API clients."""
    return await accounts.teacher(request.cookies.get(TEACHER_COOKIE) or _bearer(request))


CurrentTeacher = Annotated[Teacher, Depends(current_teacher)]


async def own_classroom(classroom_id: str, teacher: CurrentTeacher, store: StoreDep) -> Classroom:
    """A classroom of the signed-in teacher. Another teacher's class answers as if it did not exist."""
    classroom = await store.get_classroom(classroom_id)
    if classroom.teacher_id != teacher.id:
        raise ClassroomNotFound(classroom_id)
    return classroom


OwnClassroom = Annotated[Classroom, Depends(own_classroom)]


async def current_pupil(request: Request, accounts: AccountsDep) -> PupilSession:
    return await accounts.pupil(request.cookies.get(PUPIL_COOKIE))


CurrentPupil = Annotated[PupilSession, Depends(current_pupil)]


class SignInFirst(Exception):
    """A page needs a session its visitor does not have: the browser is sent (303) to where one is made."""

    def __init__(self, location: str) -> None:
        super().__init__(location)
        self.location = location


async def page_teacher(request: Request, accounts: AccountsDep) -> Teacher:
    """The teacher signed in to the pages (their session cookie); else the browser goes to the sign-in page."""
    try:
        return await accounts.teacher(request.cookies.get(TEACHER_COOKIE))
    except ServiceError:
        raise SignInFirst("/teacher/login") from None


PageTeacher = Annotated[Teacher, Depends(page_teacher)]


async def page_pupil_or_none(request: Request, accounts: AccountsDep) -> PupilSession | None:
    """The pupil who joined a class in this browser, if their session lasts."""
    try:
        return await accounts.pupil(request.cookies.get(PUPIL_COOKIE))
    except ServiceError:
        return None


PagePupilOrNone = Annotated[PupilSession | None, Depends(page_pupil_or_none)]


async def page_pupil(pupil: PagePupilOrNone) -> PupilSession:
    """The pupil of the pages; else the browser goes to the join page."""
    if pupil is None:
        raise SignInFirst("/")
    return pupil


PagePupil = Annotated[PupilSession, Depends(page_pupil)]


async def operator(request: Request, services: ServicesDep) -> None:
    expected = services.settings.auth.operator_token.get_secret_value()
    given = _bearer(request) or ""
    if not secrets.compare_digest(given.encode(), expected.encode()):
        raise OperatorOnly()


OperatorAuth = Annotated[None, Depends(operator)]
