"""The load tester's parts without a server: profiles, workloads, quality statistics, the decision, lm-eval's
refusal, reports re-made from saved JSON, and the client against fake_vllm."""

import asyncio
import math
import random
from pathlib import Path

import pytest

from loadtest import compare, report
from loadtest.client import VllmTarget
from loadtest.overhead import start_fake
from loadtest.quality import lmeval
from loadtest.quality.cli import AgreementResult
from loadtest.quality.logprobs import Agreement, compare_positions, kl_over_topk, parse_prompt_logprobs, summarize, top1
from loadtest.quality.rubric import RubricResult, Score, Scorer, load_rubrics
from loadtest.results import Benchmark, Environment, ModelInfo, RequestRecord, RunConfig, RunResult, WorkloadInfo
from loadtest.scheduler import Profile, cap, run_profile
from loadtest.servermetrics import parse_counters
from loadtest.workload import classroom, seed_workload, synthetic
from service.backends.tokens import ModelTokenizer
from service.classroom.prompting import Prompts
from service.settings import Settings, root_url


@pytest.fixture(scope="module")
def prompts(model_dir: Path) -> Prompts:
    return Prompts.from_settings(Settings(), model_dir)


def test_constant_is_evenly_spaced_and_poisson_is_seeded_and_takes_n_over_r() -> None:
    assert Profile("constant", rate=4).arrival_offsets(5, seed=1) == pytest.approx([0, 0.25, 0.5, 0.75, 1.0])
    poisson = Profile("poisson", rate=4)
    a, b = poisson.arrival_offsets(200, seed=1), poisson.arrival_offsets(200, seed=2)
    assert a == poisson.arrival_offsets(200, seed=1) and a != b
    gaps = [y - x for x, y in zip(a, a[1:], strict=False)]
    assert len({round(g, 9) for g in gaps}) > 150  # not evenly spaced
    assert a[-1] + (a[-1] - a[-2]) == pytest.approx(200 / 4, rel=0.05)
    assert Profile("throughput").arrival_offsets(3, seed=0) == [0, 0, 0]


def test_request_cap_cuts_a_burst_rather_than_dropping_it() -> None:
    arrivals = [[1, 2, 3], [4], [5, 6]]
    assert cap(arrivals, 5) == [[1, 2, 3], [4], [5]]
    assert cap(arrivals, 2) == [[1, 2]]


@pytest.mark.parametrize("prompt_tokens", [40, 128, 256, 1000])
@pytest.mark.slow  # a model's tokenizer loaded
def test_synthetic_prompts_are_exactly_p_tokens_after_the_chat_template(model_dir: Path, prompt_tokens: int) -> None:
    tokenizer = ModelTokenizer.from_model_dir(model_dir)
    work = synthetic(tokenizer, prompt_tokens=prompt_tokens, output_tokens=16, requests=4, warmup=2, seed=7)
    measured = [spec for arrival in work.arrivals for spec in arrival]
    ids = [tokenizer.chat_ids(spec.messages) for spec in [*measured, *work.warmup]]
    assert all(len(i) == prompt_tokens for i in ids)
    # Every prompt differs right after the chat template's fixed opening: nothing to share in the cache.
    opening = (
        len(tokenizer.chat_ids([{"role": "user", "content": ""}])) - 5
    )  # the closing "<|im_end|>\n<|im_start|>assistant\n"
    assert len({tuple(i[: opening + 1]) for i in ids}) == len(ids)
    body = work.body(measured[0], "m")
    assert (body["ignore_eos"], body["min_tokens"], body["max_tokens"]) == (True, 16, 16)


@pytest.mark.slow  # a model's tokenizer loaded
def test_classroom_passages_are_exactly_l_tokens_first_and_the_warmup_has_its_own(prompts) -> None:
    work = classroom(
        prompts,
        classes=2,
        pupils=3,
        passage_tokens=300,
        trickle_per_class=2,
        output_tokens=8,
        temperature=0.3,
        warmup=2,
        seed=3,
    )
    assert [len(a) for a in work.arrivals] == [3, 3, 1, 1, 1, 1]  # each class's burst, then the trickle
    assert all(prompts.passage_tokens(c.title, c.text) == 300 for c in work.classes)
    texts = {c.text for c in work.classes}
    assert work.warmup_class is not None and work.warmup_class.text not in texts
    for spec in (s for a in work.arrivals for s in a):
        cls = next(c for c in work.classes if c.group == spec.group)
        assert cls.text in spec.messages[0]["content"] and spec.messages[-1]["content"] == spec.question
    assert all(work.warmup_class.text in s.messages[0]["content"] for s in work.warmup)


def test_seed_workload_is_the_two_bee_questions(prompts) -> None:
    work = seed_workload(prompts, output_tokens=8, temperature=0.3)
    questions = [s.question for a in work.arrivals for s in a]
    assert questions == ["Why do bees visit flowers?", "What is pollination?"]
    assert "pollination" in work.classes[0].text and work.warmup == []


def test_kl_and_top1_on_hand_made_distributions() -> None:
    p = {1: math.log(0.7), 2: math.log(0.2), 3: math.log(0.1)}
    assert kl_over_topk(p, p) == pytest.approx(0.0)
    q = {1: math.log(0.5), 2: math.log(0.3), 3: math.log(0.2)}
    expected = 0.7 * math.log(0.7 / 0.5) + 0.2 * math.log(0.2 / 0.3) + 0.1 * math.log(0.1 / 0.2)
    assert kl_over_topk(p, q) == pytest.approx(expected)
    # A token outside the other's top-k gets the other's k-th logprob, then both renormalise.
    r = {1: math.log(0.6), 2: math.log(0.3)}
    pr = [0.7, 0.2, 0.1]
    qr = [0.6 / 1.2, 0.3 / 1.2, 0.3 / 1.2]
    assert kl_over_topk(p, r) == pytest.approx(sum(a * math.log(a / b) for a, b in zip(pr, qr, strict=True)))
    assert top1(p) == 1 and top1({1: -2.0, 5: -0.1}) == 5
    stats = compare_positions([p, p, p], [p, q, {2: -0.1, 1: -3.0}])
    summary = summarize(stats, prompts=1, k=3)
    assert summary.top1_agreement == pytest.approx(2 / 3) and summary.positions == 3


def test_prompt_logprobs_keep_the_k_best_ranks() -> None:
    entries = [
        None,
        {"5": {"logprob": -0.1, "rank": 1}, "9": {"logprob": -2.5, "rank": 2}, "77": {"logprob": -9.0, "rank": 4000}},
    ]
    assert parse_prompt_logprobs(entries, k=2) == [{}, {5: -0.1, 9: -2.5}]  # type: ignore[arg-type]


def test_rubric_credits_ideas_and_fails_calling_pollination_fertilisation() -> None:
    rubrics = load_rubrics()
    bees, pollination = rubrics.find("The honeybee", "What is pollination?")
    scorer = Scorer(rubrics)
    good = scorer.score(
        bees, pollination, "Bees carry pollen from one flower to another flower of the same kind, so it can make seeds."
    )
    assert good.score == 1.0 and good.passed and good.misconceptions_found == []
    wrong = scorer.score(bees, pollination, "Pollination is fertilisation: bees carry pollen to the next flower.")
    assert wrong.misconceptions_found == ["calls pollination fertilisation"]
    assert wrong.score == pytest.approx(1 - rubrics.misconception_penalty) and not wrong.passed
    assert scorer.score(bees, pollination, "I like flowers.").score == 0.0


def test_lm_eval_runs_the_local_tasks_offline_against_the_served_model(tmp_path: Path) -> None:
    tasks = list(lmeval.LOCAL_TASKS)
    tiny = Path("var/models/tiny")
    args = lmeval.LmEvalRun(Path("lm_eval"), "http://h:1/v1", "m", tiny, tasks, tmp_path, tmp_path).command()
    assert args[args.index("--tasks") + 1] == "classroom_passages,classroom_comprehension"
    assert args[args.index("--include_path") + 1] == str(tmp_path) and "--limit" not in args
    model_args = args[args.index("--model_args") + 1]
    assert "base_url=http://h:1/v1/completions" in model_args and "tokenizer=var/models/tiny" in model_args


def _run(variant: str, ttfts: list[float], kind: str = "standin", duration: float | None = None) -> RunResult:
    records = [
        RequestRecord(
            index=i,
            scheduled_at=i,
            sent_at=i,
            first_token_at=i + t,
            token_times=[i + t, i + t + 0.1],
            ended_at=i + t + 0.1,
            output_tokens=2,
        )
        for i, t in enumerate(ttfts)
    ]
    bench = Benchmark(
        profile="constant",
        rate=1.0,
        started_wall=0,
        duration_s=duration or len(ttfts),
        requests=records,
        client_cpu_s=0,
    )
    return RunResult(
        created="now",
        config=RunConfig(
            target="vllm",
            url="u",
            variant=variant,
            seed=1,
            warmup_requests=0,
            max_requests=len(ttfts),
            max_seconds=60,
            ttft_target_ms=500,
            settle_s=1,
        ),
        workload=WorkloadInfo(kind="synthetic", prompt_tokens=128, output_tokens=2, ignore_eos=True, temperature=0),
        model=ModelInfo(path="p", kind=kind, description="d", served_name="m"),
        environment=Environment(host="h", cpu="c", cpu_count=2, gpu=None, python="3.11", packages={}, git_commit=None),
        benchmarks=[bench],
    )


def _agreement(top1: float, kl: float) -> AgreementResult:
    a = Agreement(prompts=7, positions=448, top1_agreement=top1, mean_kl=kl, p95_kl=kl, k=10)
    return AgreementResult(
        original_url="a",
        candidate_url="b",
        candidate="fp8",
        model_dir="m",
        model_kind="standin",
        answer_tokens=64,
        agreement=a,
        per_prompt=[a],
        definitions="",
    )


def test_the_decision_names_the_cheaper_passing_variant_or_neither(tmp_path: Path) -> None:
    gate = compare.Gate(min_top1=0.9, max_kl=0.1, max_score_drop=0.05)
    runs = [(tmp_path / "o.json", _run("original", [0.2] * 10)), (tmp_path / "f.json", _run("fp8", [0.1] * 10))]
    both_meet = compare.render(
        runs, [_agreement(0.97, 0.02)], [], price=4.0, gpus=1, gate=gate, target_ms=500, out_dir=tmp_path / "a"
    )
    text = both_meet.read_text()
    assert "**Roll out original**" in text and "not cheaper by more than 5%" in text  # equal cost: a tie
    assert (tmp_path / "a" / "latency-cdf.png").stat().st_size > 0 and (tmp_path / "a" / "rate.png").is_file()
    # 10 requests in 10 s meet the target: 1 req/s = 3,600 acceptable an hour; 4.0 an hour -> 1.1111 per 1,000.
    assert "| 3,600 | 1.1111 |" in text
    fails_quality = compare.render(
        runs, [_agreement(0.5, 0.9)], [], price=4.0, gpus=1, gate=gate, target_ms=500, out_dir=tmp_path / "b"
    )
    assert "**Roll out original**" in fails_quality.read_text() and "**fails**" in fails_quality.read_text()
    cheaper = [
        (tmp_path / "o.json", _run("original", [0.2] * 10)),
        (tmp_path / "f.json", _run("fp8", [0.1] * 10, duration=8)),
    ]
    fp8 = compare.render(
        cheaper, [_agreement(0.97, 0.02)], [], price=4.0, gpus=1, gate=gate, target_ms=500, out_dir=tmp_path / "d"
    )
    assert "**Roll out fp8**" in fp8.read_text()  # 1.25 req/s against 1: 20% cheaper an answer
    slow = [(tmp_path / "o.json", _run("original", [0.9] * 10)), (tmp_path / "f.json", _run("fp8", [0.8] * 10))]
    neither = compare.render(
        slow, [_agreement(0.97, 0.02)], [], price=4.0, gpus=1, gate=gate, target_ms=500, out_dir=tmp_path / "c"
    )
    assert "**Neither variant passes**" in neither.read_text()


def test_a_report_is_remade_from_the_saved_json_alone(tmp_path: Path) -> None:
    run = _run("original", [0.2, 0.3, 0.4])
    run.save(tmp_path / "run.json")
    again = RunResult.load(tmp_path / "run.json")
    assert report.render(again) == report.render(run)
    assert "stand-in" in report.render(again) and "TPOT (vLLM) = ITL (GuideLLM)" in report.render(again)


@pytest.mark.slow  # the instant fake vLLM as a process
def test_the_client_drives_the_instant_fake_vllm_and_records_every_request(model_dir: Path) -> None:
    """Against fake_vllm (an instant fake in its own process): every request recorded, tokens counted."""
    tokenizer = ModelTokenizer.from_model_dir(model_dir)
    work = synthetic(tokenizer, prompt_tokens=64, output_tokens=5, requests=40, warmup=0, seed=random.randrange(1000))
    process, url = start_fake(tokens=5)
    try:

        async def go() -> Benchmark:
            target = VllmTarget(url, "fake", connections=64)
            await target.prepare(work)
            try:
                return await run_profile(target, work.arrivals, Profile("constant", rate=200), seed=1, max_seconds=60)
            finally:
                await target.close()

        bench = asyncio.run(go())
    finally:
        process.terminate()
        process.wait(timeout=10)
    assert len(bench.requests) == 40 and all(r.ok for r in bench.requests)
    assert all(len(r.token_times) == 5 and r.output_tokens == 5 for r in bench.requests)
    assert [r.index for r in bench.requests] == list(range(40))


def test_cache_counters_sum_engines_and_skip_created_timestamps() -> None:
    text = "\n".join(
        [
            "# TYPE vllm:prefix_cache_queries_total counter",
            'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0',
            'vllm:prefix_cache_queries_total{engine="1",model_name="m"} 500.0',
            'vllm:prefix_cache_queries_created{engine="0",model_name="m"} 1.7e9',
            "# TYPE vllm:prefix_cache_hits counter",
            'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 768.0',
            "# TYPE vllm:num_requests_running gauge",
            'vllm:num_requests_running{engine="0",model_name="m"} 3.0',
        ]
    )
    counters = parse_counters(text + "\n")
    assert (counters.queries, counters.hits, counters.prompt_tokens) == (1500.0, 768.0, None)
    assert counters.ttft_count is None  # no histogram: unknown, not 0


def test_latency_histograms_by_either_name_of_vllm() -> None:
    def histogram(name: str, total: float, count: float) -> list[str]:
        return [
            f"# TYPE {name} histogram",
            f'{name}_bucket{{engine="0",le="0.1",model_name="m"}} {count}',
            f'{name}_bucket{{engine="0",le="+Inf",model_name="m"}} {count}',
            f'{name}_count{{engine="0",model_name="m"}} {count}',
            f'{name}_sum{{engine="0",model_name="m"}} {total}',
        ]

    newer = histogram("vllm:time_to_first_token_seconds", 1.5, 30) + histogram(
        "vllm:inter_token_latency_seconds", 8.0, 3810
    )
    older = histogram("vllm:time_per_output_token_seconds", 4.0, 100) + histogram(
        "vllm:e2e_request_latency_seconds", 9.0, 30
    )
    a, b = parse_counters("\n".join(newer) + "\n"), parse_counters("\n".join(older) + "\n")
    assert (a.ttft_sum, a.ttft_count, a.itl_sum, a.itl_count, a.e2e_count) == (1.5, 30, 8.0, 3810, None)
    assert (b.itl_sum, b.itl_count, b.e2e_sum, b.e2e_count, b.ttft_count) == (4.0, 100, 9.0, 30, None)
    assert root_url("http://127.0.0.1:8100/v1") == "http://127.0.0.1:8100"


def _rubric(variant: str, passed: int, of: int, description: str = "d") -> RubricResult:
    score = Score(
        title="t", question="q", kind="one_sentence", answer="a", readable=True, grounding=1.0, ideas_found=[],
        ideas_missed=[], misconceptions_found=[], score=1.0, passed=True,
    )  # fmt: skip
    scores = [score] * passed + [score.model_copy(update={"passed": False, "score": 0.0})] * (of - passed)
    return RubricResult(
        variant=variant, url="u", model_kind="small", model_description=description, warning=None, sampling={},
        mean_score=passed / of, pass_rate=passed / of, scores=scores,
    )  # fmt: skip


@pytest.mark.slow  # a model's tokenizer loaded
def test_a_real_model_s_rubric_decides_the_gate_and_prices_only_acceptable_answers(tmp_path: Path) -> None:
    gate = compare.Gate(min_top1=0.9, max_kl=0.1, max_score_drop=0.05)
    runs = [(tmp_path / "o.json", _run("original", [0.2] * 10)), (tmp_path / "f.json", _run("fp8", [0.1] * 10))]
    for run in runs:
        run[1].model.kind = "small"
    # Agreement would fail the stand-in's gate; the real rubric decides: 45 of 60 against 44 of 60 passes.
    close = compare.render(
        runs, [_agreement(0.5, 0.9)], [_rubric("original", 45, 60), _rubric("fp8", 44, 60)],
        price=4.0, gpus=1, gate=gate, target_ms=500, out_dir=tmp_path / "a",
    )  # fmt: skip
    text = close.read_text()
    assert "- fp8: passes (rubric pass rate 73.3% vs the original's 75.0%" in text
    assert "top-1 agreement 50.0%" in text  # reported beside it
    # 45 and 44 of 60 differ by less than twice their standard error: both count at the pooled 89 of 120.
    # 1 req/s x 74.17% acceptable = 2,670 acceptable answers an hour; 4.0 an hour -> 1.4981 per 1,000.
    assert "| 2,670 | 1.4981 |" in text and "fp8 74.2%, original 74.2% (both at the pooled rate" in text
    apart = compare.render(
        runs, [], [_rubric("original", 150, 180), _rubric("fp8", 168, 180)],
        price=4.0, gpus=1, gate=gate, target_ms=500, out_dir=tmp_path / "p",
    )  # fmt: skip
    assert "Rubric pass rates applied to the cost: fp8 93.3%, original 83.3%." in apart.read_text()
    worse = compare.render(
        runs, [_agreement(0.99, 0.001)], [_rubric("original", 45, 60), _rubric("fp8", 40, 60)],
        price=4.0, gpus=1, gate=gate, target_ms=500, out_dir=tmp_path / "b",
    )  # fmt: skip
    assert "- fp8: **fails** (rubric pass rate 66.7%" in worse.read_text()
    # A rubric measured on another model than the runs' is reported, never priced in.
    elsewhere = compare.render(
        runs, [_agreement(0.99, 0.001)], [_rubric("original", 45, 60, "other"), _rubric("fp8", 44, 60, "other")],
        price=4.0, gpus=1, gate=gate, target_ms=500, out_dir=tmp_path / "c",
    )  # fmt: skip
    assert "Rubric pass rates applied to the cost: none" in elsewhere.read_text()
