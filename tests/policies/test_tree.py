"""Decision-tree policies: rules over observable signals, per axis, validated like the
scenario."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.router_state import RouterState
from blis_simpy.core.shadow_kv import ShadowKV
from blis_simpy.search.sweep import run_many
from tests.policies.helpers import admission, loads, priority, routing, scheduler, snap, view
from tests.search.helpers import prefix_scenario


def branch(signal: str, op: str, value: Any, then: Any, otherwise: Any) -> dict[str, Any]:
    return {"if": {"signal": signal, "op": op, "value": value}, "then": then,
            "else": otherwise}


QUOTA = branch("tenant.active_requests", ">=", 2, {"action": "reject"},
               branch("request.input_tokens", ">", 1000, {"action": "delay", "delay_s": 0.5},
                      {"action": "admit"}))


def test_admission_tree_reads_tenant_state_and_request():
    policy = admission("decision-tree", tree=QUOTA)
    state = RouterState()
    assert policy.decide(view(tenant="a"), state, 0).action == "admit"
    delayed = policy.decide(view(tenant="a", input_tokens=2000), state, 0)
    assert (delayed.action, delayed.delay_us) == ("delay", 500_000)
    state.on_admit("a")
    state.on_admit("a")
    assert policy.decide(view(tenant="a"), state, 0).action == "reject"
    assert policy.decide(view(tenant="b"), state, 0).action == "admit"


def test_priority_tree_by_slo_class_ages_only_if_it_reads_age():
    tree = branch("request.slo_class", "==", "interactive", {"priority": 10},
                  {"priority": 1})
    policy = priority("decision-tree", tree=tree)
    assert policy.compute(view(slo="interactive"), None, 0) == 10.0
    assert policy.compute(view(slo="batch"), None, 0) == 1.0
    assert not policy.ages
    aging = priority("decision-tree", tree=branch("request.age_s", ">", 2, {"priority": 5},
                                                  {"priority": 0}))
    assert aging.ages and aging.compute(view(arrival_us=0), None, 3_000_000) == 5.0


def test_routing_tree_scores_each_instance_and_breaks_ties_by_load():
    tree = branch("instance.kv_utilization", ">", 0.9, {"score": 0},
                  {"scorer": "load-balance", "weight": 2})
    policy = routing("decision-tree", tree=tree)
    state = RouterState()
    state.shadow_kv = ShadowKV()  # what the gateway keeps for a policy that reads it
    state.instances = ("instance_0", "instance_1", "instance_2")
    snaps = [snap(0, queue=1, kv=0.95), snap(1, queue=3), snap(2, queue=1)]
    decision = policy.route(view(), 0.0, snaps, state, 0)
    assert decision.target == "instance_2"
    assert decision.scores == (0.0, 2 * 0.25, 2 * 0.5)
    constant = routing("decision-tree", tree={"score": 1})
    assert constant.route(view(), 0.0, loads(4, 2, 2), state, 0).target == "instance_1"


def test_routing_tree_on_prefix_match_beats_round_robin():
    tree = branch("instance.prefix_match", ">", 0, {"scorer": "prefix-affinity", "weight": 2},
                  {"scorer": "load-balance"})
    table = run_many(prefix_scenario(), {
        "tree": {"routing": {"type": "decision-tree", "params": {"tree": tree}}},
        "rr": {"routing.type": "round-robin"}}, [1, 2], workers=1)
    means = table.groupby("policy").mean(numeric_only=True)
    assert means.loc["tree", "cache_hit_rate"] > means.loc["rr", "cache_hit_rate"]
    assert means.loc["tree", "fitness"] > means.loc["rr", "fitness"]


@pytest.mark.parametrize(("axis", "tree", "where", "message"), [
    ("admission", branch("instance.queue_depth", ">", 1, {"action": "admit"},
                         {"action": "reject"}), "tree.if.signal", "not observable by admission"),
    ("priority", branch("tenant.active_requests", ">", 1, {"priority": 1}, {"priority": 0}),
     "tree.if.signal", "not observable by priority"),
    ("admission", branch("request.tenant", "<", "a", {"action": "admit"},
                         {"action": "admit"}), "tree.if", "== or !="),
    ("admission", branch("request.input_tokens", "~", 1, {"action": "admit"},
                         {"action": "admit"}), "tree.if.op", "'~'"),
    ("admission", branch("request.input_tokens", ">", float("nan"), {"action": "admit"},
                         {"action": "admit"}), "tree.if.value", "nan"),
    ("admission", {"if": {"signal": "request.input_tokens", "op": ">", "value": 1},
                   "then": {"action": "admit"}}, "tree", "if, then and else"),
    ("admission", branch("request.input_tokens", ">", 1, {"action": "admit"},
                         {"action": "delay"}), "tree.else.delay_s", "is required"),
    ("admission", {"action": "admit", "delay_s": 1}, "tree.delay_s", "only a delay leaf"),
    ("priority", {"prio": 1}, "tree.prio", "unknown leaf key"),
    ("routing", {"scorer": "nope"}, "tree.scorer", "'nope'"),
    ("routing", {"score": 1, "scorer": "queue-depth"}, "tree", "not both"),
    ("routing", 5, "tree", "expected a mapping"),
    ("routing", {"if": {"signal": "request.priority", "op": ">", "value": 1}, "then": 3,
                 "else": {"score": 0}}, "tree.then", "expected a node"),
])
def test_bad_tree_names_its_node(axis, tree, where, message):
    make = {"admission": admission, "priority": priority, "routing": routing}[axis]
    with pytest.raises(ScenarioError) as err:
        make("decision-tree", tree=tree)
    assert err.value.path == f"policies.{axis}.params.{where}"
    assert message in str(err.value)


def test_tree_depth_is_bounded():
    tree: Any = {"priority": 1}
    for _ in range(40):
        tree = branch("request.input_tokens", ">", 1, tree, {"priority": 0})
    with pytest.raises(ScenarioError, match="deeper than 32"):
        priority("decision-tree", tree=tree)


nodes = st.recursive(
    st.one_of(st.just({"action": "admit"}), st.just({"action": "reject"}),
              st.dictionaries(st.sampled_from(["action", "delay_s", "x"]),
                              st.one_of(st.text(max_size=6), st.floats(), st.integers()),
                              max_size=2)),
    lambda children: st.fixed_dictionaries({
        "if": st.fixed_dictionaries({
            "signal": st.sampled_from(["request.input_tokens", "request.tenant", "bogus",
                                       "tenant.recent_rate"]),
            "op": st.sampled_from(["<", "==", "!=", "=>"]),
            "value": st.one_of(st.integers(), st.floats(), st.text(max_size=3), st.none())}),
        "then": children, "else": children}),
    max_leaves=8)


@settings(max_examples=100, deadline=None)
@given(nodes)
def test_fuzzed_trees_load_or_fail_with_a_scenario_error(tree):
    try:
        policy = admission("decision-tree", tree=tree)
    except ScenarioError as exc:
        assert exc.path.startswith("policies.admission.params.tree")
        return
    assert policy.decide(view(tenant="a"), RouterState(), 0).action in (
        "admit", "reject", "delay")


def test_scheduler_tree_ranks_the_wait_queue():
    tree = branch("request.slo_class", "==", "interactive", {"rank": 0},
                  branch("request.input_tokens", "<", 100, {"rank": 1}, {"rank": 2}))
    policy = scheduler("decision-tree", tree=tree)
    assert not policy.uses_priority
    views = [view("a", 0, 500, slo="batch"), view("b", 1, 50, slo="batch"),
             view("c", 2, 900, slo="interactive")]
    assert [v.id for v in sorted(views, key=lambda v: policy.order_key(v, 0.0))] == [
        "c", "b", "a"]
    by_priority = scheduler("decision-tree", preemption="lowest-priority",
                            tree=branch("request.priority", ">", 5, {"rank": 0}, {"rank": 1}))
    assert by_priority.uses_priority
    with pytest.raises(ScenarioError, match=r"tree\.rank: is required"):
        scheduler("decision-tree")


def test_scheduler_tree_sees_no_time():
    with pytest.raises(ScenarioError, match="not observable by scheduler"):
        scheduler("decision-tree", tree=branch("request.age_s", ">", 1, {"rank": 0},
                                               {"rank": 1}))
