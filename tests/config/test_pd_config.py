"""The `disaggregated_pd` architecture of a deployment config: clear errors naming the field
before the run, defaults written back when resolved, and a fuzz of the new section."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blis_simpy.api import prepare
from blis_simpy.config.resolve import resolve
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import ScenarioError
from tests.cluster.pd_helpers import MODEL, pd_scenario
from tests.config.test_scenario_fuzz import HOSTILE, check, leaves, replaced

BASE = pd_scenario(requests=4, prompt=256, output=8, decode_kv_blocks=512,
                   pd={"decider": {"type": "prefix-threshold", "threshold": 64},
                       "link": {"bandwidth_gb_s": 50, "base_latency_ms": 0.1},
                       "max_held": 2, "handoff_timeout_s": 5, "decode_choice": "routing"})
CONFIG = "deployment.models[0].configs[0]"


def changed(path: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    node = data["deployment"]["models"][0]["configs"][0]
    keys = path.split(".")
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value
    return data


@pytest.mark.parametrize(("path", "value", "where", "says"), [
    ("pd.decider.type", "sometimes", f"{CONFIG}.pd.decider.type", ""),
    ("pd.decider.threshold", -1, f"{CONFIG}.pd.decider.threshold", ""),
    ("pd.link.bandwidth_gb_s", 0, f"{CONFIG}.pd.link.bandwidth_gb_s", ""),
    ("pd.link.base_latency_ms", -1, f"{CONFIG}.pd.link.base_latency_ms", ""),
    ("pd.max_held", 0, f"{CONFIG}.pd.max_held", ""),
    ("pd.handoff_timeout_s", 0, f"{CONFIG}.pd.handoff_timeout_s", ""),
    ("pd.decode_choice", "later", f"{CONFIG}.pd.decode_choice", ""),
    ("pd.prefill.replicas", {"min": 3, "max": 2}, f"{CONFIG}.pd.prefill.replicas.min",
     "above max"),
    ("pd.decode.engine", {"kv_blocks": 512, "block_size": 32}, f"{CONFIG}.pd.decode.engine",
     "block_size"),
    ("pd.prefill.gpu", "Z999", f"{CONFIG}.pd.prefill", "coefficients"),
    ("architecture", "monolithic", f"{CONFIG}.pd", "disaggregated_pd"),
    ("replicas", {"min": 2, "max": 2}, f"{CONFIG}.replicas", "pd.prefill.replicas"),
])
def test_bad_pd_values_name_their_field(path, value, where, says):
    with pytest.raises(ScenarioError) as err:
        prepare(Scenario.from_dict(changed(path, value)))
    assert err.value.path.startswith(where), (err.value.path, where)
    assert says in str(err.value)


@pytest.mark.parametrize(("pool", "says"), [
    ({"tp": 3}, "cannot split"), ({"gpu": "Z80"}, "Z80")])
def test_a_pools_physical_model_errors_name_the_pool(pool, says):
    """Checked when the pool's step model is made, these speak of its one-model scenario
    (`model.tp`); the pool is named before them."""
    data = changed("pd.decode", {**BASE["deployment"]["models"][0]["configs"][0]["pd"]
                                 ["decode"], **pool})
    data["latency"] = {"type": "physical"}
    with pytest.raises(ScenarioError) as err:
        prepare(Scenario.from_dict(data))
    assert err.value.path == f"{CONFIG}.pd.decode", str(err.value)
    assert says in str(err.value)


@pytest.mark.parametrize(("drop", "where"), [
    ("pd", f"{CONFIG}.pd"), ("pd.prefill", f"{CONFIG}.pd.prefill"),
    ("pd.decode", f"{CONFIG}.pd.decode"),
])
def test_pools_are_never_made_up(drop, where):
    """A disaggregated config says how many replicas each pool has: no silent one-and-one."""
    data = copy.deepcopy(BASE)
    node = data["deployment"]["models"][0]["configs"][0]
    *parents, key = drop.split(".")
    for parent in parents:
        node = node[parent]
    del node[key]
    with pytest.raises(ScenarioError) as err:
        Scenario.from_dict(data)
    assert err.value.path == where
    assert "required" in str(err.value)


def test_cluster_instances_beside_a_deployment_is_refused():
    data = copy.deepcopy(BASE)
    data.setdefault("cluster", {})["instances"] = 8
    with pytest.raises(ScenarioError) as err:
        Scenario.from_dict(data)
    assert err.value.path == "cluster.instances"
    assert "replicas" in str(err.value)


def test_threshold_only_with_prefix_threshold():
    data = changed("pd.decider", {"type": "always", "threshold": 5})
    with pytest.raises(ScenarioError, match="prefix-threshold"):
        Scenario.from_dict(data)


def test_a_disaggregated_config_serves_its_model_alone():
    data = copy.deepcopy(BASE)
    data["deployment"]["models"][0]["configs"].append({"id": "mono"})
    with pytest.raises(ScenarioError, match="alone") as err:
        Scenario.from_dict(data)
    assert err.value.path == f"{CONFIG}.architecture"


def test_kv_tiers_combine_with_pd_and_are_resolved_per_pool():
    """Seed 001 §6: tiers below either pool's GPU (issue 34 item 8); each pool's links are
    resolved with its own block bytes."""
    data = changed("pd.decode.engine", {"kv_blocks": 512, "kv_tiers": {"cpu_blocks": 100}})
    sim = prepare(Scenario.from_dict(data))
    decode = [inst for inst in sim.fleet if str(inst.role) == "decode"]
    assert decode and all(inst.kv.cpu.total == 100 for inst in decode)


def test_resolve_writes_each_pool_explicitly():
    data = changed("pd.decode.tp", 2)
    config = resolve(Scenario.from_dict(data)).deployment.models[0].configs[0]
    assert config.pd.prefill.tp == 1 and config.pd.decode.tp == 2
    assert config.pd.decode.engine["kv_blocks"] == 512
    assert config.pd.prefill.latency is not None and config.pd.prefill.gpu == "H100"


def test_an_architecture_left_monolithic_writes_no_pd_section():
    data = copy.deepcopy(BASE)
    data["deployment"]["models"][0]["configs"] = [{"id": "mono"}]
    text = resolve(Scenario.from_dict(data)).to_yaml()
    assert "pd:" not in text and "architecture: monolithic" in text
    assert MODEL in text


PD_LEAVES = [p for p in leaves(BASE) if p[:5] == ("deployment", "models", 0, "configs", 0)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(PD_LEAVES), HOSTILE)
def test_a_bad_pd_value_is_a_clear_error_or_a_bounded_run(path, value):
    check(replaced(BASE, path, value), path)
