"""How the API reads request bodies: every router's routes are `ApiRoute`s.

- JSON is read with orjson, which refuses what the standard library lets through and nothing after it can
  encode again: bytes that are not UTF-8 and lone surrogates (`"\\ud800"`), which would end as a 500 when
  the value is stored or sent back. orjson's error is a `json.JSONDecodeError`, so FastAPI answers it as
  the 422 it gives any broken JSON.
- A body larger than the route takes is refused with a 413 in the one error shape (handlers.py), before
  it is read when `Content-Length` says so, else as soon as it grows past the limit. FastAPI's own
  `max_body_size` answers in plain text where a route does not read its body, and takes no limit known
  only at run time (the upload limit is a setting).
"""

from collections.abc import Callable, Coroutine
from typing import Any

import orjson
from fastapi import Request, Response, params
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.types import Message, Receive

# Far above any passage the token budget allows (a few tens of kilobytes), far below what would cost
# the service memory or time to parse.
JSON_BODY_MAX_BYTES = 1024 * 1024
# A form's own bytes besides the file: the part headers and the title.
FORM_OVERHEAD_BYTES = 64 * 1024


class BodyTooLarge(HTTPException):
    """Raised from `receive` as well: FastAPI lets an HTTPException through where it reads a body (any
    other error there becomes its 400)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(413, message)
        self.code = code


def _too_large(form: bool, limit: int) -> BodyTooLarge:
    if form:
        return BodyTooLarge("file_too_large", f"This file is too large: the most is {limit // (1024 * 1024)} MB.")
    return BodyTooLarge(
        "body_too_large",
        f"This request is larger than the {limit // (1024 * 1024)} MB this address takes. "
        "A long passage can be uploaded as a file instead.",
    )


class JsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = orjson.loads(await self.body())
        return self._json


def _limited(receive: Receive, limit: int, error: BodyTooLarge) -> Receive:
    received = 0

    async def receive_at_most() -> Message:
        nonlocal received
        message = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > limit:
                raise error
        return message

    return receive_at_most


class ApiRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        form = self.body_field is not None and isinstance(self.body_field.field_info, params.Form)

        async def read_within_limits(request: Request) -> Response:
            if form:
                upload_max = request.app.state.services.settings.limits.upload_max_bytes
                limit, error = upload_max + FORM_OVERHEAD_BYTES, _too_large(True, upload_max)
            else:
                limit, error = JSON_BODY_MAX_BYTES, _too_large(False, JSON_BODY_MAX_BYTES)
            length = request.headers.get("content-length", "")
            if length.isdigit() and int(length) > limit:
                raise error
            return await handler(JsonRequest(request.scope, _limited(request.receive, limit, error)))

        return read_within_limits
