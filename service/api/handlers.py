"""One error shape for every client: `{"error": {"code": ..., "message": ...}}`."""

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.errors import ServiceError

log = logging.getLogger(__name__)


def error_response(status_code: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status_code, headers=headers)


def _describe(error: dict[str, object]) -> str:
    location = error.get("loc", ())
    field = ".".join(str(part) for part in location[1:]) if isinstance(location, tuple | list) else ""
    if error.get("type") == "missing":
        return f"'{field}' is missing."
    return f"'{field}': {error.get('msg')}." if field else f"{error.get('msg')}."


async def _service_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ServiceError)
    return error_response(exc.status_code, exc.code, exc.message, exc.headers)


async def _validation_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    details = " ".join(_describe(e) for e in exc.errors())
    return error_response(422, "invalid_request", f"The request could not be read: {details}")


# Starlette's own answers (an unknown route, a method a route does not take), in the one error shape.
HTTP_ERRORS = {
    404: ("not_found", "There is nothing at this address."),
    405: ("method_not_allowed", "This address does not take that method."),
}


async def _http_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code, message = HTTP_ERRORS.get(exc.status_code, ("http_error", str(exc.detail)))
    return error_response(exc.status_code, code, message, dict(exc.headers or {}))


async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error", exc_info=exc)
    return error_response(500, "internal_error", "Something went wrong on our side. Please try again.")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ServiceError, _service_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
