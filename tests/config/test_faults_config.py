"""The faults section's input checks: every bad value is a ScenarioError naming its path,
before the run (instances and configs that do not exist, compat mode, an MTBF that would
crash instances in a loop, ...); fuzzed like every section; and the public `Failure`."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.failure import Failure
from tests.cluster.autoscale_helpers import scenario as autoscaled
from tests.config.test_scenario_fuzz import HOSTILE, check, leaves, replaced
from tests.conftest import BASE, merge

FAULTS: dict[str, Any] = {
    "crashes": [{"at_s": 0.5, "instances": ["instance_1"], "repair_s": 0.3}],
    "random_crashes": [{"mtbf_s": {"type": "exponential", "mean": 0.5},
                        "mttr_s": {"type": "constant", "value": 0.1}}],
    "slowdowns": [{"at_s": 0.2, "for_s": 0.5, "factor": 2.0, "instances": ["instance_0"]}],
    "requests": {"on_failure": "retry", "max_retries": 2, "backoff_s": 0.05},
}
WITH_FAULTS = merge(BASE, {"cluster": {"instances": 2}, "workload": {"num_requests": 12},
                           "faults": FAULTS})


def with_faults(**faults: Any) -> dict[str, Any]:
    return merge(BASE, {"cluster": {"instances": 2}, "faults": faults})


@pytest.mark.parametrize(("data", "where", "says"), [
    (with_faults(crashes=[{"at_s": 1, "instances": ["instance_2"]}]),
     "faults.crashes[0].instances[0]", "no instance 'instance_2'"),
    (with_faults(crashes=[{"at_s": 1, "instances": ["node-1"]}]),
     "faults.crashes[0].instances[0]", "not an instance id"),
    (with_faults(crashes=[{"at_s": 1, "config": "pool"}]),
     "faults.crashes[0].config", "no deployment config"),
    (with_faults(crashes=[{"at_s": 1, "config": "x", "instances": ["instance_0"]}]),
     "faults.crashes[0].config", "already listed"),
    (with_faults(crashes=[{"at_s": -1}]), "faults.crashes[0].at_s", ""),
    (with_faults(crashes=[{"at_s": 1, "repair_s": -2}]), "faults.crashes[0].repair_s", ""),
    (with_faults(random_crashes=[{"mtbf_s": {"type": "constant", "value": 0}}]),
     "faults.random_crashes[0].mtbf_s", "in a loop"),
    (with_faults(slowdowns=[{"at_s": 0, "for_s": 0, "factor": 2}]),
     "faults.slowdowns[0].for_s", ""),
    (with_faults(slowdowns=[{"at_s": 0, "for_s": 1, "factor": 0}]),
     "faults.slowdowns[0].factor", ""),
    (with_faults(requests={"max_retries": 99}), "faults.requests.max_retries", ""),
    (with_faults(crashes=[{"at_s": 1, "repair_s": 1e-9}]), "faults.crashes[0].repair_s",
     "rounds to 0 µs"),
    (with_faults(requests={"backoff_s": 4e-7}), "faults.requests.backoff_s", "rounds to 0 µs"),
    (with_faults(slowdowns=[{"at_s": 0, "for_s": 1e-9, "factor": 2}]),
     "faults.slowdowns[0].for_s", "rounds to 0 µs"),
    (with_faults(requests={"on_failure": "ignore"}), "faults.requests.on_failure", ""),
    (merge(with_faults(crashes=[{"at_s": 1}]), {"compat": "blis",
                                               "workload": {"arrival": "constant"}}),
     "faults", "no failures"),
])
def test_bad_faults_name_the_field(data, where, says):
    with pytest.raises(ScenarioError) as err:
        Scenario.from_dict(data)
    assert err.value.path == where, str(err.value)
    assert says in str(err.value)


def test_zero_repair_and_back_off_still_mean_at_once():
    scenario = Scenario.from_dict(with_faults(crashes=[{"at_s": 1, "repair_s": 0}],
                                              requests={"backoff_s": 0}))
    assert scenario.faults is not None and scenario.faults.crashes[0].repair_s == 0


def test_configs_and_p_d_pools_are_targets_and_instances_of_every_pool_count():
    data = autoscaled({"type": "threshold"}, pool={"min": 2, "max": 3})
    data["faults"] = {"crashes": [{"at_s": 1, "config": "pool"},
                                  {"at_s": 1, "instances": ["instance_1"]}]}
    Scenario.from_dict(data)
    data["faults"]["crashes"][1]["instances"] = ["instance_2"]  # added later, if at all
    with pytest.raises(ScenarioError, match="name the config"):
        Scenario.from_dict(data)


def test_a_scenario_without_faults_has_none_and_writes_none():
    scenario = Scenario.from_dict(BASE)
    assert scenario.faults is None and "faults" not in scenario.to_dict()
    assert Scenario.from_dict(WITH_FAULTS).to_dict()["faults"]["crashes"][0]["repair_s"] == 0.3


@pytest.mark.parametrize("bad", [-1, math.nan, math.inf, "5", True, 1e10])
def test_a_failure_object_checks_its_repair_time(bad):
    with pytest.raises(ValueError, match="repair_s"):
        Failure(repair_s=bad)
    assert Failure(0).repair_us == 0 and Failure().repair_us is None


FAULT_LEAVES = [p for p in leaves(WITH_FAULTS) if p[0] == "faults"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(FAULT_LEAVES), HOSTILE)
def test_a_bad_faults_value_is_a_clear_error_or_a_bounded_run(path, value):
    check(replaced(copy.deepcopy(WITH_FAULTS), path, value), path)
