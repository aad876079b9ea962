"""Converting inference-perf configs into tenants workloads (workload/inference_perf.py)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import ScenarioError
from blis_simpy.sim.sample import sample_requests
from blis_simpy.workload.inference_perf import inference_perf
from tests.conftest import merge
from tests.workload_helpers import (
    WORKLOAD,
    assert_usage_error,
    cli,
    run_quickly,
    scenario_dict,
    write_yaml,
)


def test_inference_perf_stages_become_a_step_profile():
    converted = inference_perf(WORKLOAD / "inference-perf-synthetic.yaml")
    w = converted.workload
    assert (w["rate_per_s"], w["duration_s"], converted.seed) == (10.0, 10.0, 1234)
    assert w["load_profile"] == {"type": "step", "steps": [
        {"at_s": 0.0, "multiplier": 0.4}, {"at_s": 5.0, "multiplier": 1.0}]}
    (tenant,) = w["tenants"]
    assert tenant["arrival"] == {"type": "constant"}
    assert tenant["prompt"] == {"type": "gaussian", "mean": 200.0, "stdev": 60.0,
                                "min": 10.0, "max": 400.0}
    requests = sample_requests(Scenario.from_dict(scenario_dict(w)))
    first = sum(r.arrival < 5_000_000 for r, _ in requests)
    assert (first, len(requests) - first) == (20, 50)  # 4/s then 10/s, evenly spaced
    run_quickly(w)


def test_inference_perf_shared_prefix_becomes_prefix_groups():
    w = inference_perf(WORKLOAD / "inference-perf-shared-prefix.yaml").workload
    assert [g["id"] for g in w["prefix_groups"]] == [f"group-{i}" for i in range(4)]
    assert all(g["length"] == {"type": "constant", "value": 256.0} for g in w["prefix_groups"])
    (tenant,) = w["tenants"]
    assert tenant["arrival"] == {"type": "poisson"}
    assert tenant["prompt"] == {"type": "constant", "value": 40.0}
    requests = sample_requests(Scenario.from_dict(scenario_dict(w)))
    prefixes = {tuple(t[:256].tolist()) for _, t in requests}
    assert all(r.input_len == 296 for r, _ in requests)
    assert 1 < len(prefixes) <= 4
    run_quickly(w)


def test_convert_inference_perf_cli_prints_a_loadable_section():
    result = cli("convert", "inference-perf", WORKLOAD / "inference-perf-shared-prefix.yaml")
    assert result.exit_code == 0, result.output
    assert "&id" not in result.stdout  # no YAML anchors
    Scenario.from_dict(scenario_dict(yaml.safe_load(result.stdout)["workload"]))


IP: dict[str, Any] = {
    "load": {"type": "poisson", "stages": [{"rate": 2, "duration": 3}]},
    "data": {"type": "random", "input_distribution": {"mean": 100, "std_dev": 10},
             "output_distribution": {"type": "fixed", "mean": 20.7}},
}


def test_inference_perf_distribution_shapes(tmp_path):
    config = merge(IP, {"data": {"input_distribution": {"type": "uniform", "min": 5,
                                                        "max": 50},
                                 "output_distribution": {"type": "lognormal", "min": 0,
                                                         "mean": 30, "std_dev": 30}}})
    w = inference_perf(write_yaml(tmp_path / "ip.yaml", config)).workload
    tenant = w["tenants"][0]
    assert tenant["prompt"]["type"] == "uniform" and tenant["prompt"]["low"] == 5.0
    assert tenant["output"]["type"] == "lognormal" and tenant["output"]["mean"] == 30.0
    plain = inference_perf(write_yaml(tmp_path / "ip2.yaml", IP)).workload
    assert plain["tenants"][0]["output"]["value"] == 20.0  # int(mean), as inference-perf
    assert plain["tenants"][0]["prompt"]["max"] == 1024.0  # inference-perf's default bounds
    assert "load_profile" not in plain


IP_ERRORS = {
    "concurrent": (merge(IP, {"load": {"type": "concurrent"}}), "load.type"),
    "sweep": (merge(IP, {"load": {"sweep": {"type": "linear"}}}), "load.sweep"),
    "no stages": (merge(IP, {"load": {"stages": []}}), "load.stages"),
    "stage concurrency": (merge(IP, {"load": {"stages": [{"rate": 1, "duration": 1,
                                                          "concurrency_level": 4}]}}),
                          "load.stages[0].concurrency_level"),
    "dataset": (merge(IP, {"data": {"type": "shareGPT"}}), "data.type"),
    "mock": ({"load": IP["load"]}, "data.type"),
    "missing lengths": (merge(IP, {"data": {"input_distribution": None}}),
                        "data.input_distribution"),
    "shifted lognormal": (merge(IP, {"data": {"input_distribution": {"type": "lognormal"}}}),
                          "data.input_distribution.type"),
    "multi-turn": ({"load": IP["load"], "data": {
        "type": "shared_prefix", "shared_prefix": {"enable_multi_turn_chat": True}}},
        "data.shared_prefix.enable_multi_turn_chat"),
    "unknown data key": (merge(IP, {"data": {"lengths": 3}}), "data.lengths"),
}


@pytest.mark.parametrize("config, key", IP_ERRORS.values(), ids=IP_ERRORS)
def test_unsupported_inference_perf_exits_2_naming_the_key(tmp_path, config, key):
    path = write_yaml(tmp_path / "ip.yaml", config)
    with pytest.raises(ScenarioError) as err:
        inference_perf(path)
    assert err.value.path == f"{path}: {key}"
    assert_usage_error(cli("convert", "inference-perf", path), key)



def test_inference_perf_request_timeout_becomes_the_client_timeout(tmp_path):
    """load.request_timeout is the client's per-request timeout: the workload's timeout_s."""
    config = merge(IP, {"load": {"request_timeout": 300}})
    w = inference_perf(write_yaml(tmp_path / "ip.yaml", config)).workload
    assert w["timeout_s"] == 300.0
    assert Scenario.from_dict(scenario_dict(w)).workload.timeout_s == 300.0
    assert "timeout_s" not in inference_perf(write_yaml(tmp_path / "ip2.yaml", IP)).workload
    with pytest.raises(ScenarioError) as err:
        inference_perf(write_yaml(tmp_path / "ip3.yaml",
                                  merge(IP, {"load": {"request_timeout": -1}})))
    assert "load.request_timeout" in str(err.value)
