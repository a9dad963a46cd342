"""One error shape for every client: `{"error": {"code": ..., "message": ...}}`."""

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

try:
    from fastapi.routing import iter_route_contexts
except ImportError:  # FastAPI before 0.13x (vLLM's pin on the GPU machine) flattens included routers
    iter_route_contexts = iter  # type: ignore[assignment]
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError as RedisOutOfMemoryError
from redis.exceptions import TimeoutError as RedisTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.api.bodies import BodyTooLarge
from service.api.deps import SignInFirst
from service.errors import ServiceError, StoreFull, StoreUnavailable

log = logging.getLogger(__name__)


def error_response(status_code: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status_code, headers=headers)


def _describe(error: dict[str, object]) -> str:
    location = error.get("loc", ())
    field = ".".join(str(part) for part in location[1:]) if isinstance(location, tuple | list) else ""
    kind, message = error.get("type"), str(error.get("msg")).removeprefix("Value error, ")
    if kind == "json_invalid":
        context = error.get("ctx")
        reason = context.get("error") if isinstance(context, dict) else None
        return f"the body is not JSON in UTF-8 ({reason or message}, at character {field or 0})."
    if kind == "missing":
        return f"'{field}' is missing." if field else "the body is missing: send JSON."
    return f"'{field}': {message}." if field else f"{message}."


def _not_json(error: dict[str, object]) -> bool:
    """FastAPI hands a body it did not read as JSON (another or no Content-Type) to the model as bytes."""
    return error.get("loc") == ("body",) and isinstance(error.get("input"), bytes)


async def _service_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ServiceError)
    return error_response(exc.status_code, exc.code, exc.message, exc.headers)


NOT_JSON = "Send the body as JSON, with the header 'Content-Type: application/json'."


async def _validation_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    if any(_not_json(e) for e in exc.errors()):
        return error_response(415, "not_json", NOT_JSON)
    details = " ".join(_describe(e) for e in exc.errors())
    return error_response(422, "invalid_request", f"The request could not be read: {details}")


# Starlette's and FastAPI's own answers (an unknown route, a method a route does not take, a form that
# cannot be parsed), in the one error shape; an unknown address a browser opens is a page (not_found.html).
HTTP_ERRORS = {
    400: ("unreadable_body", "The body of this request could not be read. Send JSON, or a file as a multipart form."),
    404: ("not_found", "There is nothing at this address."),
    405: ("method_not_allowed", "This address does not take that method."),
}


def _allowed(request: Request) -> set[str]:
    """Every method that some route at this path takes. The framework's 405 names only those of the first
    route whose path matched, where a path's methods are routes (and routers) of their own."""
    methods: set[str] = set()
    for route in iter_route_contexts(request.app.routes):
        pattern = getattr(route, "path_regex", None)
        if route.methods and pattern is not None and pattern.match(request.scope["path"]):
            methods |= route.methods
    return methods


def wants_page(request: Request) -> bool:
    """A browser opening an address (not a script, not the API): it gets a page rather than JSON."""
    return not request.url.path.startswith("/api/") and "text/html" in request.headers.get("accept", "")


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 404 and wants_page(request):
        templates: Jinja2Templates = request.app.state.templates
        return templates.TemplateResponse(request, "not_found.html", status_code=404)
    headers = dict(exc.headers or {})
    if isinstance(exc, BodyTooLarge):
        return error_response(413, exc.code, exc.detail)
    if exc.status_code == 405 and (methods := _allowed(request)):
        headers["Allow"] = ", ".join(sorted(methods))
    code, message = HTTP_ERRORS.get(exc.status_code, ("http_error", str(exc.detail)))
    return error_response(exc.status_code, code, message, headers)


async def _sign_in_first(_: Request, exc: Exception) -> RedirectResponse:
    assert isinstance(exc, SignInFirst)
    return RedirectResponse(exc.location, status_code=303)


async def _store_unavailable(request: Request, exc: Exception) -> JSONResponse:
    log.warning("Redis unreachable: %s", exc)
    return await _service_error(request, StoreUnavailable())


async def _store_full(request: Request, exc: Exception) -> JSONResponse:
    # Redis refuses a write at its memory bound (maxmemory with noeviction); a Lua script is refused at its
    # first write, so none of its writes happened.
    log.error("Redis is full (maxmemory): a write was refused: %s", exc)
    return await _service_error(request, StoreFull())


async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error", exc_info=exc)
    return error_response(500, "internal_error", "Something went wrong on our side. Please try again.")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ServiceError, _service_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(SignInFirst, _sign_in_first)  # a page's visitor without the session it needs
    # After the client's own retries (service/store/connection.py): Redis down or restarting for longer than they last.
    app.add_exception_handler(RedisConnectionError, _store_unavailable)
    app.add_exception_handler(RedisTimeoutError, _store_unavailable)
    app.add_exception_handler(RedisOutOfMemoryError, _store_full)
    app.add_exception_handler(Exception, _unexpected)
