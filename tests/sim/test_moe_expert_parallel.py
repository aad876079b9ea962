"""Issue 35 item 4: a mixture of experts served with data and expert parallelism, through the
scenario (model.dp, model.expert_parallel, model.moe_comm): keys validated before the run,
the library scenario's effect, the GPUs a replica takes."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

import blis_simpy
from blis_simpy.config.resolve import resolve
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import ScenarioError
from blis_simpy.engine.latency import latency_model
from blis_simpy.sim.result import Result

LIBRARY = Path(blis_simpy.__file__).parent / "scenarios" / "moe-expert-parallel.yaml"
MIXTRAL = "mistralai/mixtral-8x7b-instruct-v0.1"
SLICED = {"model.expert_parallel": False, "model.moe_comm": None}
TP4 = {"model.dp": 1, "model.tp": 4, **SLICED}


def scenario(model: dict, latency: dict | None = None) -> Scenario:
    return Scenario.from_dict({
        "version": 1, "name": "moe", "model": {"name": MIXTRAL, "gpu": "H100", **model},
        "latency": latency or {"type": "physical"},
        "workload": {"type": "distribution", "num_requests": 20, "rate_per_s": 10,
                     "prompt": {"mean": 256, "stdev": 0, "min": 256, "max": 256},
                     "output": {"mean": 16, "stdev": 0, "min": 16, "max": 16}}})


@functools.cache
def library(rate: float | None = None, twin: str = "") -> Result:
    overrides = {**({"SLICED": SLICED, "TP4": TP4}.get(twin, {}))}
    if rate is not None:
        overrides["workload.rate_per_s"] = rate
    return blis_simpy.run(LIBRARY, overrides=overrides)


def test_item4_expert_parallelism_with_deepep_serves_the_library_load_fastest():
    """The header's figures: EP + DeepEP against sliced experts with the all-gather dispatch,
    against one TP-4 engine, on the same four GPUs."""
    ep, sliced, tp4 = library(), library(twin="SLICED"), library(twin="TP4")
    for result in (ep, sliced, tp4):
        assert result.summary["completed_requests"] == 1500
    assert ep.summary["itl_mean_ms"] == pytest.approx(33.52, abs=0.01)
    assert sliced.summary["itl_mean_ms"] == pytest.approx(36.49, abs=0.01)
    assert tp4.summary["itl_mean_ms"] == pytest.approx(44.13, abs=0.01)
    assert ep.summary["ttft_p50_ms"] < sliced.summary["ttft_p50_ms"] < tp4.summary["ttft_p50_ms"]


def test_item4_expert_parallelism_is_slower_at_a_light_load():
    ep, sliced, tp4 = library(2.0), library(2.0, "SLICED"), library(2.0, "TP4")
    assert ep.summary["itl_mean_ms"] > sliced.summary["itl_mean_ms"] > tp4.summary["itl_mean_ms"]


def test_item4_ranks_size_their_own_kv_caches():
    resolved = resolve(Scenario.from_yaml(LIBRARY))
    assert resolved.engine.kv_blocks == 97_672
    one_engine = resolve(scenario({"tp": 4}))
    assert one_engine.engine.kv_blocks > resolved.engine.kv_blocks  # attention held once


@pytest.mark.parametrize(("model", "latency", "path"), [
    ({"dp": 2, "name": "meta-llama/llama-3.1-8b-instruct"}, None, "model.dp"),
    ({"expert_parallel": True, "name": "meta-llama/llama-3.1-8b-instruct"}, None,
     "model.expert_parallel"),
    ({"dp": 2}, {"type": "roofline"}, "model.dp"),
    ({"expert_parallel": True}, {"type": "blackbox", "alpha": [1, 2, 3], "beta": [1, 2, 3]},
     "model.expert_parallel"),
    ({"dp": 2, "moe_comm": "pplx"}, {"type": "roofline"}, "model.dp"),
    ({"moe_comm": "pplx", "tp": 2}, {"type": "roofline"}, "model.moe_comm"),
])
def test_item4_parallelism_the_model_cannot_cost_is_refused_before_the_run(model, latency, path):
    with pytest.raises(ScenarioError) as err:
        latency_model(resolve(scenario(model, latency)))
    assert err.value.path == path


@pytest.mark.parametrize(("model", "path"), [
    ({"dp": 0}, "model.dp"), ({"dp": 2.5}, "model.dp"), ({"dp": "two"}, "model.dp"),
    ({"expert_parallel": "yes"}, "model.expert_parallel"),
    ({"moe_comm": "nccl"}, "model.moe_comm"), ({"dp": 100_000}, "model.dp"),
])
def test_item4_bad_parallelism_keys_name_themselves(model, path):
    with pytest.raises(ScenarioError) as err:
        scenario(model)
    assert err.value.path == path


def test_item4_a_backend_that_does_nothing_is_a_run_warning():
    at_one_rank = blis_simpy.run(scenario({"tp": 2, "moe_comm": "pplx"}))
    assert any("no effect at dp 1" in w for w in at_one_rank.summary["warnings"])
    without_ep = blis_simpy.run(scenario({"dp": 2, "moe_comm": "deepep_low_latency"}))
    assert any("under expert parallelism only" in w for w in without_ep.summary["warnings"])
    used = blis_simpy.run(scenario({"dp": 2, "expert_parallel": True, "moe_comm": "pplx"}))
    assert not any("moe_comm" in w for w in used.summary["warnings"])


def test_item4_defaults_leave_the_scenario_and_its_dump_unchanged():
    plain = scenario({"tp": 2})
    assert (plain.model.dp, plain.model.expert_parallel, plain.model.moe_comm) == (1, False, None)
    text = plain.to_yaml()
    assert "dp:" not in text and "expert_parallel" not in text and "moe_comm" not in text


def deployed(initial: int) -> Scenario:
    return Scenario.from_dict({
        "version": 1, "name": "moe-pools",
        "model": {"name": MIXTRAL, "gpu": "H100", "tp": 1, "dp": 2, "expert_parallel": True},
        "latency": {"type": "physical"},
        "workload": {"type": "distribution", "num_requests": 20, "rate_per_s": 10,
                     "prompt": {"mean": 256, "stdev": 0, "min": 256, "max": 256},
                     "output": {"mean": 16, "stdev": 0, "min": 16, "max": 16}},
        "deployment": {
            "node_pools": [{"id": "h100", "gpu": "H100", "gpus_per_node": 4, "nodes": 1}],
            "models": [{"name": MIXTRAL, "configs": [
                {"id": "ep", "node_pool": "h100",
                 "replicas": {"min": initial, "max": initial, "initial": initial}}]}]}})


def test_item4_a_replica_takes_the_gpus_of_all_its_ranks_on_a_node_pool():
    """tp 1 x dp 2: two replicas fill a 4-GPU node, a third does not fit."""
    assert blis_simpy.run(deployed(2)).summary["completed_requests"] == 20
    with pytest.raises(ScenarioError, match="2 GPUs each"):
        blis_simpy.run(deployed(3))
