"""What a chunk of vLLM's streamed chat completion brings, for the service's answers and the load tester
alike (one rule, so both time the same tokens), and the service's reader of that stream (or of a streamed
completion, for prompts sent as token ids)."""

from dataclasses import dataclass

import orjson

from service.records import Usage


def brings_tokens(role: str | None, content: str | None) -> bool:
    """Whether a streamed choice's delta brings generated tokens, whether or not they wrote text yet.

    vLLM sends a chunk per engine step, with `content: ""` while the tokens so far end inside a UTF-8
    character or are ids the tokenizer has no string for (the stand-in's gibberish can be a whole answer of
    them). Only its first chunk, the role announcement, brings none; it is sent in the same step as the
    first token's chunk (`vllm bench serve` times it as the first token, and every chunk after it)."""
    return role is None or bool(content)


class StreamBroke(Exception):
    """vLLM reported an error inside the stream (a `data: {"error": ...}` event)."""


@dataclass(slots=True)
class Piece:
    """What one read of the stream brought: the text of its chunks, how many of them brought tokens, and
    the finish reason, usage or end that came with them."""

    text: str = ""
    tokens: int = 0
    finish_reason: str | None = None
    usage: Usage | None = None
    done: bool = False


class StreamReader:
    """vLLM's streamed chat completion, read from the raw bytes as they arrive (`data: {json}` events, then
    `data: [DONE]`): one JSON parse a chunk and no model objects, since every token passes through here.
    A read may end inside an event; the rest waits for the next.

    A streamed completion (/v1/completions) reads the same: its choices carry `text` where chat's carry
    `delta.content`, and have no role announcement (vLLM sends no chunk that brings no tokens there);
    its usage is chat's."""

    def __init__(self) -> None:
        self._rest = b""
        self.done = False

    def feed(self, data: bytes) -> Piece:
        buffer = self._rest + data if self._rest else data
        if b"\r" in buffer:  # the SSE format allows CRLF line ends; vLLM sends LF
            buffer = buffer.replace(b"\r\n", b"\n")
        *events, self._rest = buffer.split(b"\n\n")
        piece = Piece()
        texts: list[str] = []
        for event in events:
            for line in event.split(b"\n"):
                if not line.startswith(b"data:"):
                    continue  # comments and other fields carry nothing we use
                payload = line[5:].lstrip(b" ")
                if payload == b"[DONE]":
                    self.done = piece.done = True
                    continue
                chunk = orjson.loads(payload)
                if "error" in chunk:
                    raise StreamBroke(str(chunk["error"]))
                for choice in chunk.get("choices") or ():
                    delta = choice.get("delta")
                    if delta is None:  # a completion's chunk
                        content = choice.get("text")
                        piece.tokens += 1
                    else:
                        content = delta.get("content")
                        if brings_tokens(delta.get("role"), content):
                            piece.tokens += 1
                    if content:
                        texts.append(content)
                    piece.finish_reason = choice.get("finish_reason") or piece.finish_reason
                if usage := chunk.get("usage"):
                    details = usage.get("prompt_tokens_details") or {}
                    piece.usage = Usage(
                        prompt_tokens=usage["prompt_tokens"],
                        cached_tokens=details.get("cached_tokens") or 0,
                        completion_tokens=usage["completion_tokens"],
                    )
        piece.text = "".join(texts)
        return piece
