"""The deployment section: clear errors naming the field for bad pools, ids, models and
policies, before the run; a config's own latency/engine sections validated; resolve fills
each config as its own one-model scenario would be."""

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
from tests.cluster.autoscale_helpers import MODEL, scenario
from tests.config.test_scenario_fuzz import HOSTILE, check, leaves, replaced

BASE = scenario({"type": "threshold", "params": {"cooldown_s": 1}}, rate=8, duration=1,
                actuation={"provisioning_s": {"type": "exponential", "mean": 0.2},
                           "warmup": {"duration_s": 0.1}, "drain": {"policy": "immediate"}},
                triggers={"queue_depth": 3})


def changed(path: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    node = data
    keys = [int(k) if k.isdigit() else k for k in path.split(".")]
    for key in keys[:-1]:
        node = node[key]
    node[keys[-1]] = value
    return data


@pytest.mark.parametrize(("path", "value", "where", "says"), [
    ("deployment.models.0.configs.0.replicas", {"min": 3, "max": 2},
     "deployment.models[0].configs[0].replicas.min", "above max"),
    ("deployment.models.0.configs.0.replicas", {"min": 1, "max": 2, "initial": 5},
     "deployment.models[0].configs[0].replicas.initial", "outside"),
    ("deployment.models.0.configs.0.replicas", {"min": 0, "max": 2},
     "deployment.models[0].configs[0].replicas.min", ""),
    ("deployment.models.0.name", "other/model", "deployment.models", "default model"),
    ("deployment.models.0.configs.0.cost_per_replica_hour", -1,
     "deployment.models[0].configs[0].cost_per_replica_hour", ""),
    ("deployment.models.0.configs.0.latency", {"type": "nope"},
     "deployment.models[0].configs[0].latency.type", ""),
    ("deployment.models.0.configs.0.engine", {"max_running_requests": 0},
     "deployment.models[0].configs[0].engine.max_running_requests", ""),
    ("deployment.autoscaler.actuation.drain.policy", "kill",
     "deployment.autoscaler.actuation.drain.policy", ""),
    ("deployment.autoscaler.actuation.warmup.curve", "cubic",
     "deployment.autoscaler.actuation.warmup.curve", ""),
    ("deployment.autoscaler.interval_s", 0, "deployment.autoscaler.interval_s", ""),
])
def test_bad_deployment_values_name_their_field(path, value, where, says):
    with pytest.raises(ScenarioError) as err:
        Scenario.from_dict(changed(path, value))
    assert err.value.path == where and says in str(err.value)


def test_duplicate_config_ids_and_tenants_are_refused():
    data = copy.deepcopy(BASE)
    model = data["deployment"]["models"][0]
    model["configs"].append(dict(model["configs"][0]))
    with pytest.raises(ScenarioError, match="duplicate config id 'pool'"):
        Scenario.from_dict(data)
    data = copy.deepcopy(BASE)
    data["deployment"]["models"].append({"name": "qwen/qwen2.5-7b-instruct", "tenants": ["app"],
                                         "configs": [{"id": "q"}]})
    data["deployment"]["models"][0]["tenants"] = ["app"]
    with pytest.raises(ScenarioError, match="already served"):
        Scenario.from_dict(data)


@pytest.mark.parametrize(("policy", "where", "says"), [
    ({"type": "nope"}, "deployment.autoscaler.policy.type", "unknown autoscale policy"),
    ({"type": "threshold", "params": {"up": 0.2, "down": 0.5}},
     "deployment.autoscaler.policy.params.down", "hysteresis"),
    ({"type": "kv-demand", "params": {"scale_down_boundary": 0.9}},
     "deployment.autoscaler.policy.params.scale_down_boundary", "not below"),
    ({"type": "threshold", "params": {"signal": "vibes"}},
     "deployment.autoscaler.policy.params.signal", ""),
    ({"type": "os:path"}, "deployment.autoscaler.policy.type", "is a module, not a class"),
])
def test_bad_autoscale_policies_fail_before_the_run(policy, where, says):
    with pytest.raises(ScenarioError) as err:
        prepare(Scenario.from_dict(changed("deployment.autoscaler.policy", policy)))
    assert err.value.path == where and says in str(err.value)


def test_compat_mode_refuses_a_deployment():
    data = changed("compat", "blis")
    data["workload"] = {"type": "distribution", "num_requests": 5, "arrival": "constant"}
    with pytest.raises(ScenarioError, match="no deployment model"):
        Scenario.from_dict(data)


def test_resolve_fills_each_config_from_the_catalog_and_keeps_the_default_models_hardware():
    data = copy.deepcopy(BASE)
    data["deployment"]["models"][0]["configs"].append({"id": "tp2", "tp": 2})
    configs = resolve(Scenario.from_dict(data)).deployment.models[0].configs
    assert (configs[0].gpu, configs[0].tp) == ("H100", 1)
    assert (configs[1].gpu, configs[1].tp) == ("H100", 2)
    assert configs[0].latency["beta"] != configs[1].latency["beta"]
    assert configs[0].engine["kv_blocks"] and configs[1].engine["kv_blocks"]
    resolved = resolve(Scenario.from_dict(data))
    assert Scenario.from_yaml_text(resolved.to_yaml()) == resolved


def test_a_config_without_catalog_coefficients_names_the_config():
    data = copy.deepcopy(BASE)
    data["deployment"]["models"][0]["configs"][0]["gpu"] = "Z999"
    with pytest.raises(ScenarioError) as err:
        prepare(Scenario.from_dict(data))
    assert err.value.path == "deployment.models[0].configs[0]"
    assert MODEL in str(err.value)


DEPLOYMENT_LEAVES = [p for p in leaves(BASE) if p[0] == "deployment"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(DEPLOYMENT_LEAVES), HOSTILE)
def test_a_bad_deployment_value_is_a_clear_error_or_a_bounded_run(path, value):
    check(replaced(BASE, path, value), path)
