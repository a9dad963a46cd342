"""fake_vllm: an instant fake vLLM, for measuring what sits in front of one (the load tester, the service).

It answers `POST /v1/chat/completions` in vLLM 0.32's exact stream shape (captured from the real server):
a role chunk, one chunk a token (the last with `finish_reason`), a usage chunk with
`prompt_tokens_details`, then `[DONE]`; each event its own HTTP chunk, as uvicorn sends them. Non-streamed
requests (the service's warm-up) get one `chat.completion` body. `/health`, `/v1/models` and a small
`/metrics` answer the service's probes. Whatever time a request takes is the client's, the network's and
this fake's: never a model's.

It is a bare asyncio protocol, not an ASGI app, so that it costs far less than what it measures: the
streamed bytes of an answer are built once per length and written at once (`--tpot-ms` paces them
instead, a chunk every so often, as a GPU decodes). `POST /fake/config {"answer_tokens": N, "tpot_ms": T,
"ttft_ms": F}` changes the answer's length (at most the request's `max_tokens`) and pacing between runs;
`GET /fake/connections` says how many connections were open at most at once (`DELETE` starts it again).

    python -m loadtest.fake_vllm --port 8999 [--answer-tokens 32] [--tpot-ms 0]
"""

import argparse
import asyncio
import functools
from dataclasses import dataclass, field

import orjson
import uvloop

MODEL = "Qwen/Qwen2.5-1.5B-Instruct"
CHUNK_ID = "chatcmpl-fake0000000000000"
CREATED = 1796248771
BLOCK_TOKENS = 16  # a GPU's prefix-cache block: cached prompt tokens come in whole blocks
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n"
END = b"0\r\n\r\n"


@dataclass
class Behaviour:
    answer_tokens: int | None = None  # None: as many as the request's max_tokens
    tpot_ms: float = 0.0
    ttft_ms: float = 0.0


def _http_chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(body: dict[str, object]) -> bytes:
    return _http_chunk(b"data: " + orjson.dumps(body) + b"\n\n")


def _chunk(delta: dict[str, str], finish: str | None = None, **extra: object) -> dict[str, object]:
    choice: dict[str, object] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    if finish is not None:
        choice["stop_reason"] = None
    if "role" not in delta:
        choice["token_ids"] = None
    body: dict[str, object] = {
        "id": CHUNK_ID,
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": MODEL,
        "choices": [choice],
    }
    return {**body, **extra}


@functools.lru_cache(maxsize=64)
def streamed_tokens(tokens: int) -> list[bytes]:
    """The HTTP chunks of an answer of `tokens` tokens, role chunk first, built once per length."""
    role = _event(_chunk({"role": "assistant", "content": ""}, prompt_token_ids=None, prompt_text=None))
    words = [_event(_chunk({"content": f" w{i % 100}"})) for i in range(tokens - 1)]
    last = _event(_chunk({"content": " end"}, "length"))
    return [role, *words, last] if tokens > 0 else [role]


def usage_event(prompt_tokens: int, cached_tokens: int, completion_tokens: int) -> bytes:
    usage = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens, "created_cache_tokens": 0},
    }
    body = {"id": CHUNK_ID, "object": "chat.completion.chunk", "created": CREATED, "model": MODEL, "choices": []}
    return _event({**body, "usage": usage, "system_fingerprint": "vllm-fake"}) + _event_done()


@functools.cache
def _event_done() -> bytes:
    return _http_chunk(b"data: [DONE]\n\n")


def _json_response(body: object, status: str = "200 OK") -> bytes:
    payload = orjson.dumps(body)
    head = f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {len(payload)}\r\n\r\n"
    return head.encode() + payload


def _text_response(text: str) -> bytes:
    payload = text.encode()
    return b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n\r\n%s" % (len(payload), payload)


METRICS = (
    '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine="0"} 0.0\n'
    '# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine="0"} 0.0\n'
)


@dataclass
class Traffic:
    """Connections open now and the most open at once since the last reset (`GET /fake/connections`;
    `DELETE` resets): what a client's pool let through at once. Also how often /v1/models was asked (one a
    probe of the service's, in /metrics as vLLM counts it) and the last chat request's X- headers."""

    open: int = 0
    most: int = 0
    models_asked: int = 0
    chat_headers: dict[str, str] = field(default_factory=dict)


MODELS = {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "vllm", "max_model_len": 4096}]}


class FakeVllm(asyncio.Protocol):
    """One connection: HTTP/1.1 requests one after another (keep-alive), each answered in full."""

    def __init__(self, behaviour: Behaviour, seen_prefixes: set[int], traffic: Traffic) -> None:
        self._behaviour = behaviour
        self._traffic = traffic
        self._seen = seen_prefixes
        self._buffer = b""
        self._transport: asyncio.Transport | None = None
        self._paced: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's TCP transport
        self._traffic.open += 1
        self._traffic.most = max(self._traffic.most, self._traffic.open)

    def connection_lost(self, _exc: Exception | None) -> None:
        self._traffic.open -= 1
        if self._paced is not None:
            self._paced.cancel()

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while True:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self._buffer[:end].decode("latin-1").split("\r\n")
            length = 0
            routing: dict[str, str] = {}
            for line in head[1:]:
                name, _, value = line.partition(":")
                name = name.strip().lower()
                if name == "content-length":
                    length = int(value)
                elif name.startswith("x-"):
                    routing[name] = value.strip()
            if len(self._buffer) < end + 4 + length:
                return
            body = self._buffer[end + 4 : end + 4 + length]
            self._buffer = self._buffer[end + 4 + length :]
            method, path, _ = head[0].split(" ", 2)
            if path == "/v1/chat/completions":
                self._traffic.chat_headers = routing
            self._answer(method, path, body)

    def _write(self, data: bytes) -> None:
        assert self._transport is not None
        if not self._transport.is_closing():
            self._transport.write(data)

    def _answer(self, method: str, path: str, body: bytes) -> None:
        if method == "POST" and path == "/v1/chat/completions":
            self._chat(orjson.loads(body))
        elif method == "GET" and path == "/health":
            self._write(_text_response(""))
        elif method == "GET" and path == "/v1/models":
            self._traffic.models_asked += 1
            self._write(_json_response(MODELS))
        elif method == "GET" and path == "/metrics":
            # vLLM's own count of requests by route (prometheus-fastapi-instrumentator's; it leaves out /health
            # and /metrics): what a benchmark reads to count the service's probes, here as on a real vLLM.
            asked = (
                "# TYPE http_requests_total counter\n"
                f'http_requests_total{{handler="/v1/models",method="GET",status="2xx"}} {self._traffic.models_asked}\n'
            )
            self._write(_text_response(METRICS + asked))
        elif method == "POST" and path == "/fake/config":
            change = orjson.loads(body)
            for name in ("answer_tokens", "tpot_ms", "ttft_ms"):
                if name in change:
                    setattr(self._behaviour, name, change[name])
            self._write(_json_response(vars(self._behaviour)))
        elif path == "/fake/connections" and method in ("GET", "DELETE"):
            if method == "DELETE":
                self._traffic.most = self._traffic.open
            self._write(_json_response(vars(self._traffic)))
        else:
            self._write(_json_response({"error": {"message": f"no route {method} {path}"}}, "404 Not Found"))

    def _chat(self, request: dict[str, object]) -> None:
        messages = request.get("messages")
        assert isinstance(messages, list)
        # Prompt tokens estimated at 4 bytes a token; the system message (the passage) is the prefix that
        # a prefix cache would hold after its first prompt.
        prompt_tokens = 10 + sum(len(str(m.get("content", ""))) for m in messages) // 4
        prefix = hash(str(messages[0].get("content", ""))) if messages else 0
        cached = (prompt_tokens - 20) // BLOCK_TOKENS * BLOCK_TOKENS if prefix in self._seen else 0
        self._seen.add(prefix)
        max_tokens = request.get("max_tokens")
        tokens = max_tokens if isinstance(max_tokens, int) else 16
        if self._behaviour.answer_tokens is not None:
            tokens = min(tokens, self._behaviour.answer_tokens)
        if not request.get("stream"):
            message = {"role": "assistant", "content": " w" * tokens}
            usage = {
                "prompt_tokens": prompt_tokens,
                "total_tokens": prompt_tokens + tokens,
                "completion_tokens": tokens,
            }
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": "length"}
            body = {"id": CHUNK_ID, "object": "chat.completion", "model": MODEL, "choices": [choice], "usage": usage}
            self._write(_json_response(body))
            return
        events = [*streamed_tokens(tokens), usage_event(prompt_tokens, cached, tokens) + END]
        if self._behaviour.tpot_ms <= 0 and self._behaviour.ttft_ms <= 0:
            self._write(HEAD + b"".join(events))
            return
        # Paced as an engine decodes: the role chunk with the first token (one step), a token every tpot,
        # the usage with the last.
        steps = [events[0] + events[1], *events[2:-1]] if len(events) > 2 else [b"".join(events[:-1])]
        steps[-1] += events[-1]
        self._write(HEAD)
        self._send_step(steps, 0, self._behaviour.ttft_ms / 1000)

    def _send_step(self, steps: list[bytes], index: int, delay_s: float) -> None:
        def send() -> None:
            self._paced = None
            if self._transport is None or self._transport.is_closing():
                return
            self._write(steps[index])
            if index + 1 < len(steps):
                self._send_step(steps, index + 1, self._behaviour.tpot_ms / 1000)

        self._paced = asyncio.get_running_loop().call_later(delay_s, send)


async def serve(port: int, behaviour: Behaviour) -> None:
    loop = asyncio.get_running_loop()
    seen: set[int] = set()
    traffic = Traffic()
    server = await loop.create_server(lambda: FakeVllm(behaviour, seen, traffic), "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--answer-tokens", type=int, default=None, help="at most this many (default: max_tokens)")
    parser.add_argument("--tpot-ms", type=float, default=0.0, help="a chunk every so often (default: at once)")
    parser.add_argument("--ttft-ms", type=float, default=0.0, help="wait before the first token")
    args = parser.parse_args()
    behaviour = Behaviour(args.answer_tokens, args.tpot_ms, args.ttft_ms)
    uvloop.run(serve(args.port, behaviour))


if __name__ == "__main__":
    main()
