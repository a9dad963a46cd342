"""What browsers need told: no other site may write with our cookies, and the pages run only our own
scripts and cannot be framed. A bare ASGI middleware, so that an answer's stream passes it untouched."""

from urllib.parse import urlsplit

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# The pages load only our own scripts, styles and API; nothing may frame them (clickjacking).
PAGE_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        b"frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
]
REFUSED = "This request came from another website and was refused. Open the page on this site and try again."
CROSS_SITE = orjson.dumps({"error": {"code": "cross_site_request", "message": REFUSED}})
JSON = [(b"content-type", b"application/json")]


def cross_site(scope: Scope, allowed: frozenset[str]) -> bool:
    """A cookie-carrying write that a browser says another site sent: its `Origin` is neither this host
    nor an allowed origin, or `Sec-Fetch-Site` says cross-site. Clients that send neither (scripts, the
    load tester) hold no one else's cookies, and pass."""
    headers = dict(scope["headers"])
    if b"cookie" not in headers:
        return False  # the operator's bearer token is not sent by browsers on their own
    if headers.get(b"sec-fetch-site") == b"cross-site":
        return True
    origin = headers.get(b"origin")
    if origin is None:
        return False
    text = origin.decode("latin-1")
    return text not in allowed and urlsplit(text).netloc != headers.get(b"host", b"").decode("latin-1")


class SecurityMiddleware:
    def __init__(self, app: ASGIApp, allowed_origins: list[str]) -> None:
        self.app = app
        self.allowed = frozenset(o.rstrip("/") for o in allowed_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] in UNSAFE and cross_site(scope, self.allowed):
            await send({"type": "http.response.start", "status": 403, "headers": JSON})
            await send({"type": "http.response.body", "body": CROSS_SITE})
            return
        if scope["path"].startswith("/api/"):
            await self.app(scope, receive, send)  # the API, answers' streams included, untouched
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *PAGE_HEADERS]
            await send(message)

        await self.app(scope, receive, send_with_headers)
