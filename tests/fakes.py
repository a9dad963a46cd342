"""Fakes for the faults a real vLLM cannot be made to produce on demand. Each says so in its name."""

import asyncio
import json
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from service.model_manifest import PRODUCT_NAME

FAKE_WORDS = ["Bees ", "dance ", "to ", "show "]
MODEL = PRODUCT_NAME  # what the tiny stand-in is served as


def _chunk(text: str) -> str:
    chunk = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": MODEL,
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
    }
    return f"data: {json.dumps(chunk)}\n\n"


def fake_backend_that_dies_mid_stream() -> Starlette:
    """Streams a few tokens of an answer, then drops the connection as a crashed vLLM would."""

    async def chat(_: Request) -> StreamingResponse:
        async def body() -> AsyncIterator[str]:
            for word in FAKE_WORDS:
                yield _chunk(word)
                await asyncio.sleep(0.05)
            raise ConnectionAbortedError("fake backend dies mid-stream")

        return StreamingResponse(body(), media_type="text/event-stream")

    return Starlette(routes=[*_probed_routes(), Route("/v1/chat/completions", chat, methods=["POST"])])


def _probed_routes() -> list[Route]:
    """What the service's health probes ask of a replica: alive, and serving our model."""

    async def health(_: Request) -> JSONResponse:
        return JSONResponse({})

    async def models(_: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    return [Route("/health", health), Route("/v1/models", models)]


def fake_backend_slow_to_first_token(delay_s: float) -> Starlette:
    """Answers only after `delay_s` of silence, as a replica with a long queue does: a real vLLM on a
    tiny model cannot be made this slow on purpose."""

    async def chat(_: Request) -> StreamingResponse:
        async def body() -> AsyncIterator[str]:
            await asyncio.sleep(delay_s)
            for word in FAKE_WORDS:
                yield _chunk(word)
            yield "data: [DONE]\n\n"

        return StreamingResponse(body(), media_type="text/event-stream")

    return Starlette(routes=[*_probed_routes(), Route("/v1/chat/completions", chat, methods=["POST"])])
