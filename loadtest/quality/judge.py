"""An optional rubric judge beside the rule scorer: a model behind any OpenAI-compatible endpoint the operator names
reads the passage, the question, the teacher's note on what earns credit, and an answer, and says PASS or FAIL.

The rule scorer stays the offline default. A judge is trusted only as far as its own figures go: on the held-out
labelled and adversarial answers (answers written to fool a marker: negations, wrong numbers, invented details), the
same table as the rule scorer's, and how often the two agree (`classroom loadtest quality scorer --judge-url`). A
reply that says neither PASS nor FAIL counts as FAIL and is counted apart."""

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass

from openai import AsyncOpenAI
from pydantic import BaseModel

from loadtest.quality.rubric import Passage, Question

AT_ONCE = 8  # requests in flight to the judge
INSTRUCTIONS = (
    "You mark a pupil's answer to a question about a reading passage, as a careful teacher would. An answer passes "
    "only if it answers the question the way the teacher's note asks, everything it says agrees with the passage, "
    "and it adds no figure or detail the passage does not give. A right answer in the pupil's own words passes. "
    "Reply with one word: PASS or FAIL."
)
_VERDICT = re.compile(r"\b(PASS|FAIL)\b", re.IGNORECASE)


@dataclass(frozen=True)
class JudgeEndpoint:
    url: str  # its /v1
    model: str
    api_key: str = "none"  # vLLM takes any unless started with --api-key


class JudgeVerdicts(BaseModel):
    passed: list[bool]
    unparsed: int  # replies with neither PASS nor FAIL (counted as FAIL)


def messages(passage: Passage, question: Question, answer: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": INSTRUCTIONS},
        {
            "role": "user",
            "content": f"Passage: {passage.title}\n\n{passage.text}\n\nQuestion: {question.question}\n\n"
            f"Teacher's note: {question.teacher_note}\n\nPupil's answer: {answer}\n\nPASS or FAIL?",
        },
    ]


def parse(reply: str) -> bool | None:
    found = _VERDICT.search(reply)
    return None if found is None else found.group(1).upper() == "PASS"


async def verdicts(endpoint: JudgeEndpoint, items: Sequence[tuple[Passage, Question, str]]) -> JudgeVerdicts:
    at_once = asyncio.Semaphore(AT_ONCE)
    async with AsyncOpenAI(base_url=endpoint.url, api_key=endpoint.api_key, timeout=600.0, max_retries=2) as client:

        async def one(passage: Passage, question: Question, answer: str) -> bool | None:
            async with at_once:
                reply = await client.chat.completions.create(
                    model=endpoint.model,
                    messages=messages(passage, question, answer),  # type: ignore[arg-type]
                    temperature=0,
                    max_tokens=4,
                )
            return parse(reply.choices[0].message.content or "")

        read = await asyncio.gather(*(one(*item) for item in items))
    return JudgeVerdicts(passed=[v is True for v in read], unparsed=sum(v is None for v in read))


def judge_all(endpoint: JudgeEndpoint, items: Sequence[tuple[Passage, Question, str]]) -> JudgeVerdicts:
    return asyncio.run(verdicts(endpoint, items))
