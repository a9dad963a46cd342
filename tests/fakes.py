"""Fakes for the faults a real vLLM cannot be made to produce on demand. Each says so in its name."""

import asyncio
import json
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

FAKE_WORDS = ["Bees ", "dance ", "to ", "show "]


def _chunk(text: str) -> str:
    chunk = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "Qwen/Qwen2.5-1.5B-Instruct",
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

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
