"""What a chunk of vLLM's streamed chat completion brings, for the service's answers and the load tester
alike (one rule, so both time the same tokens)."""


def brings_tokens(role: str | None, content: str | None) -> bool:
    """Whether a streamed choice's delta brings generated tokens, whether or not they wrote text yet.

    vLLM sends a chunk per engine step, with `content: ""` while the tokens so far end inside a UTF-8
    character or are ids the tokenizer has no string for (the stand-in's gibberish can be a whole answer of
    them). Only its first chunk, the role announcement, brings none; it is sent in the same step as the
    first token's chunk (`vllm bench serve` times it as the first token, and every chunk after it)."""
    return role is None or bool(content)
