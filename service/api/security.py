"""What browsers need told: no other site may write with our cookies, the pages run only our own scripts
and cannot be framed, and nothing a signed-in person saw is kept in a cache (after "Sign out", Back must not
show the class page again). A bare ASGI middleware, so that an answer's stream passes it untouched."""

from urllib.parse import urlsplit

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# The pages load only our own scripts, styles and API; nothing may frame them (clickjacking).
PAGE_HEADERS: list[tuple[bytes, bytes]] = [
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        b"frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
]
# Pages and API answers are people's data: no browser or proxy keeps them (Back re-asks the server, which
# answers a signed-out browser with the sign-in page). Our own scripts, styles and icon may be cached.
NO_STORE = (b"cache-control", b"no-store")
CACHEABLE = ("/static/", "/favicon.ico")
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
        path: str = scope["path"]
        if path.startswith("/api/"):
            if scope["method"] == "POST" and path.endswith("/questions"):
                # A pupil's question: its answer streams token by token and sets its own no-store; no
                # wrapper here, which would cost a call every token.
                await self.app(scope, receive, send)
                return
            extra: list[tuple[bytes, bytes]] = []
        else:
            extra = PAGE_HEADERS
        no_store = not path.startswith(CACHEABLE)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [*message.get("headers", []), *extra]
                if no_store and not any(name == b"cache-control" for name, _ in headers):
                    headers.append(NO_STORE)
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)
