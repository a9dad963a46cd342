"""fake_openai: a fake, fast OpenAI chat-completions endpoint that streams a fixed answer at once. It
exists only to measure the load tester itself (overhead.py): against it, whatever time a request takes is
the client's and this fake's, never a model's.

    python -m loadtest.fake_openai --port 8999 --tokens 16
"""

import argparse
import json

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.routing import Route

MODEL = "fake"


def fake_openai_app(tokens: int) -> Starlette:
    def chunk(delta: dict[str, str], finish: str | None = None) -> bytes:
        body = {
            "id": "fake",
            "object": "chat.completion.chunk",
            "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return f"data: {json.dumps(body)}\n\n".encode()

    pieces = [chunk({"content": f"w{i} "}) for i in range(tokens - 1)] + [chunk({"content": "end"}, "length")]

    async def chat(request: Request) -> StreamingResponse:
        body = await request.json()
        prompt = sum(len(m["content"].split()) for m in body["messages"])
        usage = {"prompt_tokens": prompt, "completion_tokens": tokens, "total_tokens": prompt + tokens}
        tail = f"data: {json.dumps({'id': 'fake', 'choices': [], 'usage': usage})}\n\ndata: [DONE]\n\n".encode()

        async def stream() -> object:
            for piece in pieces:
                yield piece
            yield tail

        return StreamingResponse(stream(), media_type="text/event-stream")  # type: ignore[arg-type]

    async def models(_: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    async def health(_: Request) -> PlainTextResponse:
        return PlainTextResponse("")

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/models", models),
            Route("/health", health),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tokens", type=int, default=16)
    args = parser.parse_args()
    uvicorn.run(fake_openai_app(args.tokens), host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
