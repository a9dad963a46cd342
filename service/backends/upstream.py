"""The one request every question makes: vLLM's streamed chat completion (or completion, for prompts sent as
token ids: `backend.prompt_format`), over one aiohttp session.

Everything else the service asks a replica (warm-up, probes) goes through the openai client or httpx. This
request does not: the openai client spends about 0.6 ms of CPU building each request (options, headers,
URL parsing, its httpx2 layer, even with aiohttp underneath), most of the budget of a question
(benchmarks/results/gateway.md). Here a request is a prepared body and two header lines, and the
response's bytes go straight to `vllm_stream.StreamReader`.
"""

import aiohttp
import orjson

from service.settings import BackendSettings

KEEPALIVE_S = 4.0
# Where each prompt format's request goes, under the replica's base URL (`Prompts.request_body` makes it).
PATHS = {"chat": "/chat/completions", "token_ids": "/completions"}


class ReplicaRefused(Exception):
    """Nothing answers at the replica's address: it is down."""


class ReplicaNotAnswering(Exception):
    """No connection within the connect timeout, or one dropped before the answer began: the replica, or
    this process, is slow. Whether it is down is for the prober to say."""


class ReplicaAnswered(Exception):
    """The replica answered with an HTTP error."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


def _error_message(body: bytes) -> str:
    """vLLM's error bodies: `{"error": {"message": ...}}`, older ones `{"message": ...}`."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.decode(errors="replace")[:300]
    if isinstance(parsed, dict):
        error = parsed.get("error")
        message = error.get("message") if isinstance(error, dict) else parsed.get("message")
        if isinstance(message, str):
            return message
    return str(parsed)[:300]


class Upstream:
    """Opens answer streams on any replica. Made in the running event loop (aiohttp binds to it)."""

    def __init__(self, backend: BackendSettings) -> None:
        self._path = PATHS[backend.prompt_format]
        self._session = aiohttp.ClientSession(
            # No limit of our own: vLLM queues what it cannot run yet, and counts it (`num_requests_waiting`).
            # Idle connections are dropped before vLLM's uvicorn drops them (after 5 s), so that a question
            # seldom takes one that is closing.
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_S),
            timeout=aiohttp.ClientTimeout(
                total=None, sock_connect=backend.connect_timeout_s, sock_read=backend.read_timeout_s
            ),
            headers={
                "Authorization": f"Bearer {backend.api_key.get_secret_value()}",
                "Content-Type": "application/json",
            },
            cookie_jar=aiohttp.DummyCookieJar(),
            auto_decompress=False,
        )

    async def open(self, base_url: str, body: bytes, headers: dict[str, str] | None = None) -> aiohttp.ClientResponse:
        """POST `body` to the replica's (chat) completions, with `headers` besides the session's; the response
        once its headers are in."""
        url = base_url + self._path
        try:
            try:
                response = await self._session.post(url, data=body, headers=headers)
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                if isinstance(exc, aiohttp.ClientConnectorError):
                    raise
                # A kept-alive connection the replica closed as we took it: once more, on a new one.
                response = await self._session.post(url, data=body, headers=headers)
        except aiohttp.ConnectionTimeoutError as exc:
            raise ReplicaNotAnswering(str(exc) or "no connection within the connect timeout") from exc
        except aiohttp.ClientConnectorError as exc:
            raise ReplicaRefused(str(exc) or type(exc).__name__) from exc
        except aiohttp.ClientError as exc:
            raise ReplicaNotAnswering(str(exc) or type(exc).__name__) from exc
        if response.status >= 400:
            try:
                message = _error_message(await response.read())
            finally:
                response.release()
            raise ReplicaAnswered(response.status, message)
        return response

    async def close(self) -> None:
        await self._session.close()
