"""Routing templates called directly on hand-built snapshots."""

from __future__ import annotations

import pytest

from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.router_state import RouterState
from blis_simpy.core.shadow_kv import ShadowKV
from blis_simpy.policies.routing import WeightedParams
from tests.policies.helpers import loads, routing, snap, view


def route(policy, snapshots, hashes=(), clock=0, shadow=None):
    state = RouterState()
    state.instances = tuple(s.id for s in snapshots)
    state.shadow_kv = ShadowKV() if shadow is None else shadow
    return policy.route(view(hashes=hashes), 0.0, snapshots, state, clock)


def test_snapshot_effective_load_is_queue_plus_batch_plus_pending():
    s = snap(0, queue=3, batch=5, pending=7, in_flight=100, kv=0.9)
    assert s.effective_load == 15


# -- round-robin ----------------------------------------------------------------------------

def test_round_robin_cycles_through_instances_ignoring_load():
    policy = routing("round-robin")
    snapshots = loads(100, 0, 50)
    decisions = [route(policy, snapshots) for _ in range(7)]
    assert [d.target for d in decisions] == [f"instance_{i % 3}" for i in range(7)]
    assert [d.reason for d in decisions[:3]] == ["round-robin[0]", "round-robin[1]",
                                                 "round-robin[2]"]
    assert decisions[6].reason == "round-robin[6]"
    # Its score is its preference: 1 for the instance whose turn it is, 0 for the others.
    assert [d.scores for d in decisions[:2]] == [(1.0, 0.0, 0.0), (0.0, 1.0, 0.0)]


def test_round_robin_follows_the_routable_instances_it_is_given():
    policy = routing("round-robin")
    assert route(policy, [snap(0), snap(1)]).target == "instance_0"
    assert route(policy, [snap(0), snap(1), snap(5)]).target == "instance_1"
    assert route(policy, [snap(0), snap(1), snap(5)]).target == "instance_5"


# -- least-loaded / always-busiest ----------------------------------------------------------

def test_least_loaded_picks_min_effective_load_from_all_three_parts():
    policy = routing("least-loaded")
    snapshots = [snap(0, queue=3), snap(1, batch=3), snap(2, queue=1, pending=1, kv=0.99,
                                                          in_flight=50)]
    decision = route(policy, snapshots)
    assert decision.target == "instance_2"  # load 2 < 3; in-flight and KV play no part
    assert decision.reason == "least-loaded (load=2)"
    assert decision.scores == (-3.0, -3.0, -2.0)
    assert route(policy, [snap(0, pending=4), snap(1, batch=3)]).target == "instance_1"


def test_least_loaded_ties_go_to_the_first_in_fleet_order():
    policy = routing("least-loaded")
    assert route(policy, loads(2, 1, 1)).target == "instance_1"
    assert route(policy, loads(0, 0, 0)).target == "instance_0"


def test_always_busiest_picks_max_effective_load_ties_lowest():
    policy = routing("always-busiest")
    decision = route(policy, [snap(0, queue=1), snap(1, pending=3), snap(2, batch=3)])
    assert decision.target == "instance_1"
    assert decision.reason == "always-busiest (load=3)"
    assert decision.scores == (1.0, 3.0, 3.0)
    assert route(policy, loads(0, 0, 0)).target == "instance_0"


# -- weighted -------------------------------------------------------------------------------

def test_weighted_default_scorers_are_the_references():
    assert WeightedParams().scorers == {"prefix-affinity": 3.0, "queue-depth": 2.0,
                                        "kv-utilization": 2.0}


def test_weighted_queue_depth_scorer_is_normalised_distance_from_max():
    policy = routing("weighted", scorers={"queue-depth": 1})
    decision = route(policy, loads(0, 5, 10))
    assert decision.scores == pytest.approx((1.0, 0.5, 0.0))
    assert decision.target == "instance_0"
    assert decision.reason == "weighted-scoring (score=1.000)"
    assert route(policy, loads(4, 4, 4)).scores == (1.0, 1.0, 1.0)  # all equal -> 1
    assert route(policy, loads(6, 2, 3)).scores == pytest.approx((0.0, 1.0, 0.75))


def test_weighted_kv_utilization_scorer_is_one_minus_utilization():
    policy = routing("weighted", scorers={"kv-utilization": 1})
    decision = route(policy, [snap(0, kv=0.2), snap(1, kv=0.9, queue=0), snap(2, kv=0.5)])
    assert decision.scores == pytest.approx((0.8, 0.1, 0.5))
    assert decision.target == "instance_0"
    # Load plays no part.
    assert route(policy, [snap(0, kv=0.5), snap(1, kv=0.4, queue=99)]).target == "instance_1"


def test_weighted_load_balance_scorer_is_inverse_of_one_plus_load():
    policy = routing("weighted", scorers={"load-balance": 1})
    decision = route(policy, [snap(0, queue=1), snap(1), snap(2, batch=1, pending=2)])
    assert decision.scores == pytest.approx((0.5, 1.0, 0.25))
    assert decision.target == "instance_1"


def test_weighted_prefix_affinity_scorer_is_matched_over_total_blocks():
    policy = routing("weighted", scorers={"prefix-affinity": 1})
    shadow = ShadowKV()
    shadow.routed("instance_1", (11, 12, 13))
    shadow.routed("instance_2", (11, 99, 13))  # block 1 differs: only the first block matches
    decision = route(policy, loads(0, 0, 0), hashes=(11, 12, 13, 14), shadow=shadow)
    assert decision.scores == pytest.approx((0.0, 0.75, 0.25))
    assert decision.target == "instance_1"


def test_weighted_prefix_affinity_scorer_without_full_blocks_scores_zero():
    policy = routing("weighted", scorers={"prefix-affinity": 1})
    shadow = ShadowKV()
    shadow.routed("instance_2", (1, 2))
    decision = route(policy, loads(0, 0, 0), hashes=(), shadow=shadow)
    assert decision.scores == (0.0, 0.0, 0.0)
    assert decision.target == "instance_0"


def test_weighted_follows_the_shadow_kv_the_gateway_updates_after_each_decision():
    policy = routing("weighted", scorers={"prefix-affinity": 1, "queue-depth": 1})
    shadow = ShadowKV()
    first = route(policy, loads(5, 5, 0), hashes=(1, 2), shadow=shadow)  # queue-depth: to 2
    assert first.target == "instance_2"
    shadow.routed(first.target, (1, 2))  # what the gateway does after the decision
    # Same prefix, loads now even: affinity alone decides, and the shadow says instance 2.
    second = route(policy, loads(0, 0, 0), hashes=(1, 2, 3), shadow=shadow)
    assert second.target == "instance_2"
    assert second.scores == pytest.approx((0.5, 0.5, 0.5 + 0.5 * 2 / 3))


def test_weighted_breakdown_gives_each_scorers_weighted_share_per_instance():
    policy = routing("weighted", scorers={"queue-depth": 1, "load-balance": 3})
    decision = route(policy, loads(0, 2))
    assert decision.breakdown is not None
    assert set(decision.breakdown) == {"queue-depth", "load-balance"}
    assert decision.breakdown["queue-depth"] == pytest.approx((0.25, 0.0))
    assert decision.breakdown["load-balance"] == pytest.approx((0.75, 0.25))
    for i, total in enumerate(decision.scores):
        assert total == pytest.approx(sum(s[i] for s in decision.breakdown.values()))


def test_weighted_normalises_weights():
    a = routing("weighted", scorers={"queue-depth": 1, "load-balance": 3})
    b = routing("weighted", scorers={"queue-depth": 10, "load-balance": 30})
    snapshots = loads(0, 2)
    # queue-depth (1, 0), load-balance (1, 1/3) -> 0.25*qd + 0.75*lb
    assert route(a, snapshots).scores == pytest.approx((1.0, 0.25))
    assert route(b, snapshots).scores == pytest.approx((1.0, 0.25))


def test_weighted_clamps_each_scorer_to_unit_interval():
    policy = routing("weighted", scorers={"kv-utilization": 1})
    decision = route(policy, [snap(0, kv=1.5), snap(1, kv=-0.5), snap(2, kv=0.25)])
    assert decision.scores == (0.0, 1.0, 0.75)
    assert decision.target == "instance_1"


def test_weighted_argmax_ties_go_to_the_first_in_fleet_order_and_scores_cover_every_instance():
    policy = routing("weighted", scorers={"kv-utilization": 1, "load-balance": 1})
    decision = route(policy, [snap(0, queue=1), snap(1), snap(2), snap(3, queue=1)])
    assert decision.target == "instance_1"
    assert len(decision.scores) == 4
    assert decision.scores[1] == decision.scores[2]


@pytest.mark.parametrize(("scorers", "path"), [
    ({"bogus": 1}, "policies.routing.params.scorers.bogus"),
    ({"queue-depth": 0}, "policies.routing.params.scorers.queue-depth"),
    ({"queue-depth": -2}, "policies.routing.params.scorers.queue-depth"),
    ({"queue-depth": float("inf")}, "policies.routing.params.scorers.queue-depth"),
    ({"load-balance": "1"}, "policies.routing.params.scorers.load-balance"),
    ({}, "policies.routing.params.scorers"),
])
def test_weighted_bad_scorers_name_their_path(scorers, path):
    with pytest.raises(ScenarioError) as err:
        routing("weighted", scorers=scorers)
    assert err.value.path == path
    if "bogus" in path:
        assert "kv-utilization, load-aware, load-balance, lora-affinity, no-hit-lru, " \
            "precise-prefix-cache, prefix-affinity, queue-depth" in str(err.value)


# -- prefix-affinity ------------------------------------------------------------------------

def test_prefix_affinity_without_a_match_falls_back_to_least_loaded():
    policy = routing("prefix-affinity")
    decision = route(policy, loads(3, 1, 2), hashes=(1, 2, 3))
    assert decision.target == "instance_1"
    assert decision.reason == "prefix-affinity (cache-miss, fallback to least-loaded, blocks=0)"
    assert route(policy, loads(1, 1, 1), hashes=(7,)).target == "instance_0"  # ties: lowest index


def test_prefix_affinity_follows_the_prefix_even_to_a_busier_instance():
    policy, shadow = routing("prefix-affinity"), ShadowKV()
    first = route(policy, loads(3, 1, 2), hashes=(1, 2, 3), shadow=shadow)
    assert first.target == "instance_1"
    shadow.routed(first.target, (1, 2, 3))  # what the gateway does after the decision
    decision = route(policy, loads(0, 50, 0), hashes=(1, 2, 9), shadow=shadow)
    assert decision.target == "instance_1"
    assert decision.reason == "prefix-affinity (cache-hit, blocks=2)"


def test_prefix_affinity_longest_matched_prefix_wins():
    policy, shadow = routing("prefix-affinity"), ShadowKV()
    shadow.routed("instance_0", (1, 2))
    shadow.routed("instance_2", (1, 2, 3))
    decision = route(policy, loads(0, 0, 9), hashes=(1, 2, 3, 4), shadow=shadow)
    assert decision.target == "instance_2"
    assert decision.reason == "prefix-affinity (cache-hit, blocks=3)"
    assert len(decision.scores) == 3


def test_prefix_affinity_equal_matches_go_to_the_less_loaded():
    policy, shadow = routing("prefix-affinity"), ShadowKV()
    shadow.routed("instance_0", (1, 2))
    shadow.routed("instance_1", (1, 2))
    # instance_2 is unmatched: not chosen
    assert route(policy, loads(4, 2, 0), hashes=(1, 2), shadow=shadow).target == "instance_1"
    other = ShadowKV()
    other.routed("instance_0", (1,))
    other.routed("instance_1", (1,))
    assert route(policy, loads(3, 3, 0), hashes=(1,), shadow=other).target == "instance_0"

