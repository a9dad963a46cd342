"""Every HTTP request this process makes to a vLLM replica goes through one seam, a `Transport`: the answers'
streams, the probes and the warm-up alike. The service's transport is `AiohttpTransport`, one aiohttp session
a process; a test hands `open_services` (or `ReplicaHttp`) a fake one to play a replica that dies mid-stream,
goes silent or answers an error, without a server on a port.

The answers' request is the hot path, so it is lean: a prepared body and two header lines out, the response's
bytes straight to `vllm_stream.StreamReader`. The openai client would spend about 0.6 ms of CPU building each
request (options, headers, URL parsing, its httpx layer), most of the budget of a question
(benchmarks/results/gateway.md); httpx alone parses every streamed chunk in pure Python (h11).
"""

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
import orjson

from service.settings import BackendSettings

KEEPALIVE_S = 4.0
# Where each prompt format's request goes, under the replica's base URL (`Prompts.request_body` makes it).
PATHS = {"chat": "/chat/completions", "token_ids": "/completions"}


class ReplicaError(Exception):
    """A request to a replica failed: it was refused, not answered in time, or answered with an error."""


class ReplicaRefused(ReplicaError):
    """Nothing answers at the replica's address: it is down."""


class ReplicaNotAnswering(ReplicaError):
    """No connection within the connect timeout, one dropped before the answer was in, or no answer within the
    read timeout: the replica, or this process, is slow. Whether it is down is for the prober to say."""


class ReplicaAnswered(ReplicaError):
    """The replica answered with an HTTP error."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class Reply:
    """A whole response: its status and body."""

    status: int
    body: bytes

    @property
    def ok(self) -> bool:
        return self.status < 400

    def text(self) -> str:
        return self.body.decode(errors="replace")

    def json(self) -> Any:
        return orjson.loads(self.body)


class OpenStream(Protocol):
    """A response whose headers are in and whose body arrives as it is written."""

    @property
    def status(self) -> int: ...

    async def read(self) -> bytes:
        """The whole body (for an error's message)."""
        ...

    def chunks(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive. Raises TimeoutError when nothing came for the read timeout; any other
        exception means the stream was cut."""
        ...

    def release(self) -> None:
        """The body was read to its end: the connection can serve another request."""
        ...

    def close(self) -> None:
        """Drop the connection (vLLM aborts a request whose stream is closed)."""
        ...


class Transport(Protocol):
    """How bytes reach a replica. Connection failures are raised as `ReplicaRefused` or `ReplicaNotAnswering`;
    an HTTP error status is a response like any other."""

    async def fetch(
        self,
        method: str,
        url: str,
        *,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
        connect_timeout_s: float | None = None,
    ) -> Reply:
        """One request and its whole response; `timeout_s` for connecting and for each read, else the transport's;
        `connect_timeout_s` for connecting alone (reads keep theirs)."""
        ...

    async def stream(self, url: str, body: bytes, headers: Mapping[str, str] | None = None) -> OpenStream:
        """POST `body` to `url`; the response once its headers are in."""
        ...

    async def close(self) -> None: ...


class _AiohttpStream:
    __slots__ = ("_response", "status")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status

    async def read(self) -> bytes:
        return await self._response.read()

    def chunks(self) -> AsyncIterator[bytes]:
        return self._response.content.iter_any()

    def release(self) -> None:
        self._response.release()

    def close(self) -> None:
        self._response.close()


class AiohttpTransport:
    """The service's transport: one aiohttp session for every replica. Made in the running event loop (aiohttp
    binds to it)."""

    def __init__(self, backend: BackendSettings) -> None:
        self._read_timeout_s = backend.read_timeout_s
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

    async def fetch(
        self,
        method: str,
        url: str,
        *,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
        connect_timeout_s: float | None = None,
    ) -> Reply:
        limits = None
        if timeout_s is not None or connect_timeout_s is not None:
            read_s = timeout_s if timeout_s is not None else self._read_timeout_s
            limits = aiohttp.ClientTimeout(sock_connect=connect_timeout_s or timeout_s, sock_read=read_s)
        response = await self._request(method, url, body, headers, limits)
        try:
            async with response:
                return Reply(response.status, await response.read())
        except (aiohttp.ClientError, TimeoutError) as exc:  # cut, or silent, while the body came
            raise ReplicaNotAnswering(str(exc) or type(exc).__name__) from exc

    async def stream(self, url: str, body: bytes, headers: Mapping[str, str] | None = None) -> OpenStream:
        return _AiohttpStream(await self._request("POST", url, body, headers, None))

    async def _request(
        self,
        method: str,
        url: str,
        body: bytes | None,
        headers: Mapping[str, str] | None,
        limits: aiohttp.ClientTimeout | None,
    ) -> aiohttp.ClientResponse:
        """The response once its headers are in, connection failures as the seam's."""
        options: dict[str, Any] = {"data": body, "headers": headers}
        if limits is not None:
            options["timeout"] = limits
        try:
            try:
                return await self._session.request(method, url, **options)
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                if isinstance(exc, aiohttp.ClientConnectorError):
                    raise
                # A kept-alive connection the replica closed as we took it: once more, on a new one.
                return await self._session.request(method, url, **options)
        except aiohttp.ConnectionTimeoutError as exc:
            raise ReplicaNotAnswering(str(exc) or "no connection within the connect timeout") from exc
        except aiohttp.ClientConnectorError as exc:
            raise ReplicaRefused(str(exc) or type(exc).__name__) from exc
        except aiohttp.ClientError as exc:
            raise ReplicaNotAnswering(str(exc) or type(exc).__name__) from exc
        except TimeoutError as exc:  # the headers did not come within the read timeout
            raise ReplicaNotAnswering("no answer within the read timeout") from exc

    async def close(self) -> None:
        await self._session.close()


def error_message(body: bytes) -> str:
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


class ReplicaHttp:
    """What this process asks of replicas, over its transport: a question's streamed answer, a probe, a
    completion for warming."""

    def __init__(self, transport: Transport, backend: BackendSettings, probe_timeout_s: float) -> None:
        self._transport = transport
        self._answer_path = PATHS[backend.prompt_format]
        self._probe_timeout_s = probe_timeout_s

    async def open_answer(self, base_url: str, body: bytes, headers: Mapping[str, str] | None = None) -> OpenStream:
        """POST a question's prepared request to the replica's (chat) completions, with `headers` besides the
        transport's; its stream once the headers are in. An HTTP error is raised as `ReplicaAnswered`."""
        stream = await self._transport.stream(base_url + self._answer_path, body, headers)
        if stream.status >= 400:
            try:
                message = error_message(await stream.read())
            finally:
                stream.release()
            raise ReplicaAnswered(stream.status, message)
        return stream

    async def probe(self, url: str) -> Reply:
        """A GET within the probe timeout."""
        return await self._transport.fetch("GET", url, timeout_s=self._probe_timeout_s)

    async def chat(
        self,
        base_url: str,
        request: Mapping[str, Any],
        headers: Mapping[str, str] | None = None,
        *,
        connect_timeout_s: float | None = None,
    ) -> Any:
        """A chat completion, not streamed: its parsed body. An HTTP error is raised as `ReplicaAnswered`.
        `connect_timeout_s`: in place of the backend's (a pupil's bound), for a request nobody waits on."""
        url = base_url.rstrip("/") + PATHS["chat"]
        reply = await self._transport.fetch(
            "POST", url, body=orjson.dumps(request), headers=headers, connect_timeout_s=connect_timeout_s
        )
        if not reply.ok:
            raise ReplicaAnswered(reply.status, error_message(reply.body))
        return reply.json()

    async def close(self) -> None:
        await self._transport.close()
