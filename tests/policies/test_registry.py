"""Policy registries: template names, user classes (`module:Class`) and parameter errors."""

from __future__ import annotations

import itertools
import sys
import textwrap

import pytest

import blis_simpy
from blis_simpy.api import prepare
from blis_simpy.config.scenario import PolicyConfig
from blis_simpy.core.errors import ScenarioError
from blis_simpy.policies.admission import ADMISSION, AdmissionPolicy
from blis_simpy.policies.priority import PRIORITY
from blis_simpy.policies.routing import ROUTING, RoutingPolicy
from blis_simpy.policies.scheduler import SCHEDULER
from tests.conftest import scenario
from tests.policies.helpers import loads

REGISTRIES = {"admission": ADMISSION, "priority": PRIORITY, "routing": ROUTING,
              "scheduler": SCHEDULER}

_counter = itertools.count()


def test_template_names():
    assert ADMISSION.names == ["always-admit", "decision-tree", "gaie-legacy", "rate-limit",
                               "reject-all", "tenant-quota", "tier-shed", "token-bucket"]
    assert PRIORITY.names == ["constant", "deadline-aware", "decision-tree", "inverted-slo",
                              "slo-based", "tenant-priority"]
    assert ROUTING.names == ["always-busiest", "decision-tree", "least-loaded",
                             "prefix-affinity", "round-robin", "weighted"]
    assert SCHEDULER.names == ["decision-tree", "fcfs", "priority-fcfs", "reverse-priority",
                               "sjf"]


@pytest.mark.parametrize("axis", sorted(REGISTRIES))
def test_unknown_name_lists_the_valid_names(axis):
    registry = REGISTRIES[axis]
    with pytest.raises(ScenarioError) as err:
        registry.create(PolicyConfig("no-such-policy"), f"policies.{axis}")
    assert err.value.path == f"policies.{axis}.type"
    assert f"unknown {axis} policy 'no-such-policy'" in str(err.value)
    assert err.value.valid == ", ".join(registry.names) + ", or module:Class"


def test_unknown_name_in_a_scenario_fails_before_running():
    with pytest.raises(ScenarioError) as err:
        prepare(scenario(policies={"routing": {"type": "fastest"}}))
    assert err.value.path == "policies.routing.type"
    assert "least-loaded" in str(err.value)


@pytest.mark.parametrize(("policies", "path"), [
    ({"routing": {"type": "weighted", "params": {"scorers": {"bogus": 1}}}},
     "policies.routing.params.scorers.bogus"),
    ({"admission": {"type": "token-bucket", "params": {"capacity": "big"}}},
     "policies.admission.params.capacity"),
    ({"admission": {"type": "tenant-quota", "params": {"quotas": {"t1": -3}}}},
     "policies.admission.params.quotas.t1"),
    ({"priority": {"type": "slo-based", "params": {"age_wieght": 1}}},
     "policies.priority.params.age_wieght"),
    ({"scheduler": {"type": "sjf", "params": {"preemption": "oldest"}}},
     "policies.scheduler.params.preemption"),
    ({"routing": {"type": "round-robin", "params": {"start": 1}}},
     "policies.routing.params.start"),
])
def test_bad_params_in_a_scenario_name_their_yaml_path(policies, path):
    with pytest.raises(ScenarioError) as err:
        prepare(scenario(policies=policies))
    assert err.value.path == path


def user_module(tmp_path, monkeypatch, source: str) -> str:
    name = f"user_policies_{next(_counter)}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return name


USER_ROUTING = """
    from dataclasses import dataclass
    from blis_simpy.core.schema import spec
    from blis_simpy.policies.routing import RoutingDecision, RoutingPolicy

    @dataclass(frozen=True)
    class LastParams:
        offset: int = spec(0, help="instances back from the last", ge=0)

    class Last(RoutingPolicy):
        Params = LastParams

        def route(self, req, priority, snapshots, state, clock):
            pick = len(snapshots) - 1 - self.params.offset
            scores = tuple(1.0 if i == pick else 0.0 for i in range(len(snapshots)))
            return RoutingDecision(snapshots[pick].id, "last", scores)

    class NotAPolicy:
        pass
"""


def test_user_class_is_loaded_by_module_and_class_name(tmp_path, monkeypatch):
    module = user_module(tmp_path, monkeypatch, USER_ROUTING)
    policy = ROUTING.create(PolicyConfig(f"{module}:Last", {"offset": 1}), "policies.routing")
    assert isinstance(policy, RoutingPolicy)
    assert policy.route(None, 0.0, loads(0, 0, 0, 0), None, 0).target == "instance_2"
    with pytest.raises(ScenarioError) as err:
        ROUTING.create(PolicyConfig(f"{module}:Last", {"offset": -1}), "policies.routing")
    assert err.value.path == "policies.routing.params.offset"


def test_user_routing_class_drives_a_run(tmp_path, monkeypatch):
    module = user_module(tmp_path, monkeypatch, USER_ROUTING)
    result = blis_simpy.run(scenario(
        cluster={"instances": 3}, policies={"routing": {"type": f"{module}:Last"}},
        workload={"num_requests": 6, "output": {"mean": 5, "stdev": 0, "min": 5, "max": 5}},
    ))
    assert set(result.requests.instance) == {"instance_2"}
    assert result.summary["completed_requests"] == 6


@pytest.mark.parametrize(("cls", "says"), [
    ("NotAPolicy", "does not derive from RoutingPolicy"),
    ("Missing", "defines no 'Missing'"),  # issue 31: it said "not a RoutingPolicy subclass"
    ("RoutingDecision", "does not derive from RoutingPolicy"),
])
def test_user_class_must_subclass_the_axis_base(tmp_path, monkeypatch, cls, says):
    module = user_module(tmp_path, monkeypatch, USER_ROUTING)
    with pytest.raises(ScenarioError) as err:
        ROUTING.create(PolicyConfig(f"{module}:{cls}"), "policies.routing")
    assert err.value.path == "policies.routing.type"
    assert says in str(err.value)


def test_user_class_of_another_axis_is_rejected(tmp_path, monkeypatch):
    module = user_module(tmp_path, monkeypatch, USER_ROUTING)
    with pytest.raises(ScenarioError) as err:
        ADMISSION.create(PolicyConfig(f"{module}:Last"), "policies.admission")
    assert f"does not derive from {AdmissionPolicy.__name__}" in str(err.value)


def test_user_module_that_cannot_be_imported(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ScenarioError) as err:
        SCHEDULER.create(PolicyConfig("no_such_module_xyz:Sched"), "policies.scheduler")
    assert err.value.path == "policies.scheduler.type"
    assert "cannot import 'no_such_module_xyz'" in str(err.value)
