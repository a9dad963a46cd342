"""Routing decisions, without servers: affinity, canary share, bounded load, and the config's rules."""

import pytest
from pydantic import ValidationError

from service.backends.routing import Router, rendezvous_order, replica_order, variant_for
from service.backends.vllm_metrics import parse_vllm_metrics
from service.classroom.figures import percentile
from service.errors import InvalidInput
from service.records import BackendConfig, Canary, Variant
from service.settings import PROJECT_ROOT

A, B, C = "http://a:8000/v1", "http://b:8000/v1", "http://c:8000/v1"
PASSAGES = [f"passage-{i}" for i in range(2000)]


def test_affinity_is_stable_and_spreads_passages_evenly() -> None:
    first = {p: rendezvous_order(p, [A, B])[0] for p in PASSAGES}
    assert first == {p: rendezvous_order(p, [B, A])[0] for p in PASSAGES}  # order of declaration is irrelevant
    share_a = sum(url == A for url in first.values()) / len(PASSAGES)
    assert 0.45 < share_a < 0.55


def test_adding_a_replica_moves_only_the_passages_it_wins() -> None:
    before = {p: rendezvous_order(p, [A, B])[0] for p in PASSAGES}
    after = {p: rendezvous_order(p, [A, B, C])[0] for p in PASSAGES}
    moved = [p for p in PASSAGES if before[p] != after[p]]
    assert all(after[p] == C for p in moved)
    assert 0.28 < len(moved) / len(PASSAGES) < 0.39  # about a third: C's fair share, nothing more


def test_an_overloaded_replica_is_passed_over_for_the_next_choice() -> None:
    preferred = [A, B, C]
    assert replica_order(preferred, {A, B, C}, {A: 4, B: 0}, max_waiting=4) == [B, C, A]
    assert replica_order(preferred, {A, B, C}, {A: 3}, max_waiting=4) == [A, B, C]
    assert replica_order(preferred, {B}, {}, max_waiting=4) == [B]
    assert replica_order(preferred, set(), {}, max_waiting=4) == []


def test_the_canary_takes_its_share_of_pupils_and_each_pupil_stays_put() -> None:
    config = BackendConfig(
        active="original",
        canary=Canary(variant="fp8", percent=20),
        variants={"original": Variant(replicas=[A]), "fp8": Variant(replicas=[B])},
    )
    pupils = [f"pupil-{i}" for i in range(5000)]
    chosen = [variant_for(config, p) for p in pupils]
    assert 0.18 < chosen.count("fp8") / len(pupils) < 0.22
    assert chosen == [variant_for(config, p) for p in pupils]


def test_round_robin_takes_turns_whatever_the_passage() -> None:
    config = BackendConfig(active="x", variants={"x": Variant(replicas=[A, B])})
    router = Router("round_robin", max_waiting=4)
    firsts = [router.plan(config, "p", "same passage", {A, B}, {})[1][0] for _ in range(4)]
    assert firsts == [A, B, A, B]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"active": "gone", "variants": {"x": {"replicas": [A]}}}, "the active variant 'gone' is not one of"),
        ({"active": "x", "variants": {"x": {"replicas": []}}}, "at least 1 item"),
        (
            {"active": "x", "canary": {"variant": "x", "percent": 5}, "variants": {"x": {"replicas": [A]}}},
            "the canary must be another variant",
        ),
        (
            {"active": "x", "canary": {"variant": "y", "percent": 101}, "variants": {"x": {"replicas": [A]}}},
            "less than or equal to 100",
        ),
    ],
)
def test_a_config_that_cannot_route_is_refused(config: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        BackendConfig.model_validate(config)


def test_the_declared_file_parses() -> None:
    config = BackendConfig.from_file(PROJECT_ROOT / "deploy" / "backends.yaml")
    assert config.active in config.variants


def test_vllm_metrics_are_read_under_new_and_old_names() -> None:
    new = """# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="0",model_name="m"} 2.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 640.0
"""
    old = """vllm:num_requests_waiting{model_name="m"} 1.0
vllm:gpu_cache_usage_perc{model_name="m"} 0.5
vllm:gpu_prefix_cache_hits_total{model_name="m"} 7.0
"""
    figures = parse_vllm_metrics(new)
    assert (figures.waiting, figures.running, figures.kv_cache_usage) == (3.0, 2.0, 0.25)
    assert (figures.prefix_cache_queries, figures.prefix_cache_hits) == (1000.0, 640.0)
    figures = parse_vllm_metrics(old)
    assert (figures.waiting, figures.kv_cache_usage, figures.prefix_cache_hits) == (1.0, 0.5, 7.0)


def test_percentiles() -> None:
    assert percentile([], 95) is None
    assert percentile([7.0], 50) == 7.0
    assert percentile([float(v) for v in range(1, 101)], 50) == pytest.approx(50.5)
    assert percentile([float(v) for v in range(1, 101)], 95) == pytest.approx(95.05)


def test_an_operators_change_is_checked_whole_and_refused_in_its_own_words() -> None:
    config = BackendConfig(
        active="original",
        canary=Canary(variant="fp8", percent=10),
        variants={"original": Variant(replicas=[A]), "fp8": Variant(replicas=[B])},
    )
    switched = config.with_active("fp8").revised(config.version + 1)
    assert switched.active == "fp8" and switched.canary is None and switched.version == 1  # the canary became it
    with pytest.raises(InvalidInput) as unknown:
        config.with_active("nope").revised(1)
    assert unknown.value.message == "the active variant 'nope' is not one of ['fp8', 'original']"
    with pytest.raises(InvalidInput, match="^the canary must be another variant than the active one$"):
        config.with_canary(Canary(variant="original", percent=5)).revised(1)
    with pytest.raises(InvalidInput, match="^there is no variant 'x'$"):
        config.without_variant("x")
    assert config.with_variant("x", Variant(replicas=[C])).without_variant("x") == config
