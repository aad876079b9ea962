"""Issue 35 item 2, the reference head's admission templates on GAIE's SLO priorities:
tier-shed (shed low tiers while an instance is loaded) and gaie-legacy (the older llm-d
gateway: shed sheddable classes while the fleet is saturated)."""

from __future__ import annotations

import pytest

import blis_simpy
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.router_state import RouterState
from tests.cluster.test_flow_control import two_classes
from tests.policies.helpers import admission, snap, view


class View:
    def __init__(self, snaps):
        self.snaps = snaps
        self.asked = 0

    def admission_snapshots(self, clock):
        self.asked += 1
        return self.snaps


def state_of(*snaps) -> RouterState:
    state = RouterState()
    state.fleet_view = View(list(snaps))
    return state


def decide(policy, slo, *snaps):
    return policy.decide(view(slo=slo), state_of(*snaps), 0)


def test_tier_shed_rejects_low_tiers_only_while_some_instance_is_over_the_threshold():
    policy = admission("tier-shed", threshold=4)
    calm, busy = snap(0, queue=2, batch=2), snap(1, queue=3, batch=2)
    assert decide(policy, "batch", calm, calm).action == "admit"
    rejected = decide(policy, "batch", calm, busy)
    assert rejected.action == "reject"
    assert rejected.reason == "tier-shed: class 'batch' priority -1 < 3 at load 5"
    for cls in ("critical", "standard", "", "interactive"):  # priority >= 3
        assert decide(policy, cls, busy).action == "admit"


def test_tier_shed_reads_no_snapshot_for_a_class_it_never_sheds():
    state = state_of(snap(0, queue=99))
    assert admission("tier-shed").decide(view(slo="critical"), state, 0).action == "admit"
    assert state.fleet_view.asked == 0


def test_tier_shed_priorities_and_min_priority_are_the_scenarios():
    policy = admission("tier-shed", min_priority=0, priorities={"batch": 0, "gold": -5})
    busy = snap(0, queue=1)
    assert decide(policy, "batch", busy).action == "admit"
    assert decide(policy, "gold", busy).action == "reject"
    assert decide(policy, "sheddable", busy).action == "reject"


def test_gaie_legacy_sheds_sheddable_classes_at_saturation_one():
    policy = admission("gaie-legacy")
    # utilization: mean of max(queue/5, kv/0.8): (1.0 + 0.5) / 2 = 0.75, then (1.0 + 1.0) / 2
    half = (snap(0, queue=5), snap(1, kv=0.4))
    full = (snap(0, queue=5), snap(1, kv=0.8))
    assert decide(policy, "batch", *half).action == "admit"
    assert decide(policy, "batch", *full).action == "reject"
    assert decide(policy, "standard", *full).action == "admit"
    assert decide(policy, "batch").action == "reject"  # no instance: saturated


@pytest.mark.parametrize(("name", "params", "path"), [
    ("tier-shed", {"threshold": -1}, "policies.admission.params.threshold"),
    ("tier-shed", {"min_priority": 500}, "policies.admission.params.min_priority"),
    ("tier-shed", {"priorities": {"batch": 1.5}}, "policies.admission.params.priorities.batch"),
    ("gaie-legacy", {"queue_depth": 0}, "policies.admission.params.queue_depth"),
    ("gaie-legacy", {"kv_utilization": 1.2}, "policies.admission.params.kv_utilization"),
    ("gaie-legacy", {"qd": 5}, "policies.admission.params.qd"),
])
def test_bad_parameters_name_their_key(name, params, path):
    with pytest.raises(ScenarioError) as err:
        admission(name, **params)
    assert err.value.path == path


def test_tier_shed_in_a_run_sheds_only_the_batch_tier():
    df = blis_simpy.run(two_classes(), overrides={
        "policies.admission": {"type": "tier-shed", "params": {"threshold": 8}}}).requests
    rejected = df[df.final_state == "rejected"]
    assert len(rejected) > 0 and set(rejected.slo_class) == {"batch"}
    assert set(rejected.reject_code) == {"admission"}
