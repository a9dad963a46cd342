"""(b) Agreement of two variants (original and FP8) on the same token sequences, from the servers' own
logprobs. Meaningful on the stand-in too: both variants carry the same random weights, so how far FP8
moves the next-token distribution is a property of the quantization, not of the words.

How: for each bundled prompt (the service's layout: passage, then question), the original writes a
continuation of `answer_tokens` tokens, sampled (temperature 1, a fixed seed): the stand-in's greedy text
is one token repeated, which would make agreement trivially high. Prompt + continuation, as token ids, are
then sent to both servers for scoring only (completions with `prompt_logprobs=k`, one new token), so both
are judged at the same positions on the same context (teacher forcing). Over every position of the
sequence after the first (the passage, the question and the continuation):

- top-1 agreement: the share of positions where both variants' most likely next token is the same;
- KL(original || FP8) over the top k: at each position, over the original's k most likely tokens, both
  distributions renormalised to those tokens; a token outside FP8's returned top k gets FP8's k-th
  logprob (an upper bound on its true value). Averaged over positions, in nats.
"""

import math
from collections.abc import Sequence

import httpx
from pydantic import BaseModel

TopK = dict[int, float]  # token id -> logprob, the k most likely


class PositionStats(BaseModel):
    top1_agrees: bool
    kl: float


def top1(dist: TopK) -> int:
    return max(dist, key=lambda t: dist[t])


def kl_over_topk(reference: TopK, other: TopK) -> float:
    """KL(reference || other) over the reference's tokens, both renormalised to them."""
    floor = min(other.values())
    tokens = list(reference)
    p = [math.exp(reference[t]) for t in tokens]
    q = [math.exp(other.get(t, floor)) for t in tokens]
    sp, sq = sum(p), sum(q)
    return sum((pi / sp) * math.log((pi / sp) / (qi / sq)) for pi, qi in zip(p, q, strict=True) if pi > 0)


def compare_positions(reference: Sequence[TopK], other: Sequence[TopK]) -> list[PositionStats]:
    if len(reference) != len(other):
        raise ValueError(f"{len(reference)} positions against {len(other)}")
    return [
        PositionStats(top1_agrees=top1(a) == top1(b), kl=kl_over_topk(a, b))
        for a, b in zip(reference, other, strict=True)
    ]


class Agreement(BaseModel):
    prompts: int
    positions: int
    top1_agreement: float
    mean_kl: float
    p95_kl: float
    k: int


def summarize(stats: Sequence[PositionStats], prompts: int, k: int) -> Agreement:
    kls = sorted(s.kl for s in stats)
    return Agreement(
        prompts=prompts,
        positions=len(stats),
        top1_agreement=sum(s.top1_agrees for s in stats) / len(stats),
        mean_kl=sum(kls) / len(kls),
        p95_kl=kls[min(len(kls) - 1, math.ceil(0.95 * (len(kls) - 1)))],
        k=k,
    )


def parse_prompt_logprobs(entries: list[dict[str, dict[str, float | int | str]] | None], k: int) -> list[TopK]:
    """vLLM's prompt_logprobs: per position {token id: {logprob, rank, decoded_token}}, the actual token
    included even outside the top k; keep the k best ranks."""
    out: list[TopK] = []
    for entry in entries:
        if entry is None:  # the first position has no prediction
            out.append({})
            continue
        ranked = sorted(entry.items(), key=lambda item: int(item[1]["rank"]))
        out.append({int(token): float(info["logprob"]) for token, info in ranked[:k]})
    return out


async def generate(client: httpx.AsyncClient, model: str, prompt_ids: list[int], tokens: int, seed: int) -> list[int]:
    """A sampled continuation's token ids (ignore_eos: always `tokens` of them)."""
    body = {
        "model": model,
        "prompt": prompt_ids,
        "max_tokens": tokens,
        "min_tokens": tokens,
        "ignore_eos": True,
        "temperature": 1.0,
        "seed": seed,
        "return_token_ids": True,
    }
    response = await client.post("/completions", json=body)
    response.raise_for_status()
    choice = response.json()["choices"][0]
    ids: list[int] = choice["token_ids"]
    return ids


async def score(client: httpx.AsyncClient, model: str, ids: list[int], k: int) -> list[TopK]:
    """Each position's top-k next-token logprobs over the whole sequence (prompt_logprobs)."""
    body = {"model": model, "prompt": ids, "max_tokens": 1, "temperature": 0, "prompt_logprobs": k}
    response = await client.post("/completions", json=body)
    response.raise_for_status()
    return parse_prompt_logprobs(response.json()["choices"][0]["prompt_logprobs"], k)


async def greedy(client: httpx.AsyncClient, model: str, prompt_ids: list[int], tokens: int) -> list[int]:
    """The greedy answer's token ids, up to `tokens` (it ends where the model ends it)."""
    body = {"model": model, "prompt": prompt_ids, "max_tokens": tokens, "temperature": 0, "return_token_ids": True}
    response = await client.post("/completions", json=body)
    response.raise_for_status()
    ids: list[int] = response.json()["choices"][0]["token_ids"]
    return ids


class GreedyMatch(BaseModel):
    """How often the two variants' greedy answers are the same, token for token, and where they part."""

    answers: int
    exact_match: float
    # Tokens the two greedy answers share before the first difference (the answer's length where equal).
    median_common_prefix: float


def greedy_match(pairs: Sequence[tuple[list[int], list[int]]]) -> GreedyMatch:
    common = []
    for a, b in pairs:
        n = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        common.append(n)
    common.sort()
    middle = len(common) // 2
    median = common[middle] if len(common) % 2 else (common[middle - 1] + common[middle]) / 2
    return GreedyMatch(
        answers=len(pairs), exact_match=sum(a == b for a, b in pairs) / len(pairs), median_common_prefix=median
    )
