"""Issue 35 item 3, the routing scorers the reference's head has: each formula on hand-built
snapshots (the reference's `sim/routing_scorers.go` and the llm-d scorers it cites), their
bounds under hypothesis, and the two that read the instances' real caches against a fake cache
signal (tests/cluster/test_cache_signal.py runs them against real KV caches)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blis_simpy.core.router_state import RouterState
from blis_simpy.core.shadow_kv import ShadowKV
from blis_simpy.policies.scorers import SCORERS, NoHitLRU, combine
from tests.policies.helpers import routing, snap, view


class FakeSignal:
    """Cached blocks per instance id: the first `n` of any prompt's blocks."""

    def __init__(self, cached: dict[str, int]) -> None:
        self.cached = cached
        self.asked: list[tuple[str, int]] = []

    def cached_blocks(self, instance_id, hashes, clock):
        self.asked.append((instance_id, clock))
        return min(self.cached.get(instance_id, 0), len(hashes))


def state_with(cached: dict[str, int] | None = None, clock: int = 0) -> RouterState:
    state = RouterState()
    state.shadow_kv = ShadowKV()
    state.clock = clock
    if cached is not None:
        state.cache_signal = FakeSignal(cached)
    return state


def scores(name, snaps, hashes=(1, 2, 3, 4), state=None, rid="request_0"):
    scorer = SCORERS[name]()
    return scorer.scores(view(rid=rid, hashes=hashes), snaps, state or state_with())


# -- load scorers ---------------------------------------------------------------------------

def test_active_requests_scorer_normalises_by_the_busiest_and_all_equal_busy_scores_zero():
    snaps = [snap(0, in_flight=0), snap(1, in_flight=4), snap(2, in_flight=1)]
    assert scores("active-requests", snaps) == [1.0, 0.0, 0.75]
    assert scores("active-requests", [snap(0, in_flight=3), snap(1, in_flight=3)]) == [0.0, 0.0]
    assert scores("active-requests", [snap(0, in_flight=0), snap(1, in_flight=0)]) == [1.0, 1.0]


def test_running_requests_scorer_is_the_batch_size_min_max_inverted():
    snaps = [snap(0, batch=2, queue=50), snap(1, batch=10), snap(2, batch=6)]
    assert scores("running-requests", snaps) == [1.0, 0.0, 0.5]  # the queue plays no part
    assert scores("running-requests", [snap(0, batch=3), snap(1, batch=3)]) == [1.0, 1.0]


def test_load_aware_scorer_is_half_when_idle_falling_to_zero_at_128_waiting():
    snaps = [snap(0), snap(1, queue=64, batch=99), snap(2, queue=128), snap(3, queue=500)]
    assert scores("load-aware", snaps) == [0.5, 0.25, 0.0, 0.0]


def test_vllm_dp_scorer_counts_a_waiting_request_as_four_running():
    # raw 4*queue + batch: 4, 5, 0 -> inverted min-max over [0, 5]
    snaps = [snap(0, queue=1), snap(1, queue=1, batch=1), snap(2, batch=0)]
    assert scores("vllm-dp", snaps) == pytest.approx([0.2, 0.0, 1.0])
    # one waiting request outweighs three running
    assert scores("vllm-dp", [snap(0, queue=1), snap(1, batch=3)]) == [0.0, 1.0]


# -- real-cache scorers ---------------------------------------------------------------------

def test_precise_prefix_cache_scorer_min_max_normalises_the_really_cached_blocks():
    state = state_with({"instance_0": 1, "instance_1": 4, "instance_2": 2}, clock=7)
    assert scores("precise-prefix-cache", [snap(0), snap(1), snap(2)], state=state) == \
        pytest.approx([0.0, 1.0, 1 / 3])
    assert state.cache_signal.asked == [("instance_0", 7), ("instance_1", 7), ("instance_2", 7)]


def test_precise_prefix_cache_scorer_gives_all_one_when_nothing_tells_instances_apart():
    none = state_with({})
    assert scores("precise-prefix-cache", [snap(0), snap(1)], state=none) == [1.0, 1.0]
    both = state_with({"instance_0": 2, "instance_1": 2})
    assert scores("precise-prefix-cache", [snap(0), snap(1)], state=both) == [1.0, 1.0]
    # a prompt shorter than a block has no hashes: nothing is asked
    assert scores("precise-prefix-cache", [snap(0), snap(1)], hashes=(), state=both) == \
        [1.0, 1.0]


def test_precise_prefix_cache_reads_the_real_cache_not_the_shadow_model():
    state = state_with({"instance_0": 3})
    assert state.shadow_kv is not None
    state.shadow_kv.routed("instance_1", (1, 2, 3, 4))  # the router *thinks* 1 holds it
    precise = scores("precise-prefix-cache", [snap(0), snap(1)], state=state)
    shadow = scores("prefix-affinity", [snap(0), snap(1)], state=state)
    assert precise == [1.0, 0.0] and shadow == [0.0, 1.0]


def test_no_hit_lru_scores_a_warm_request_half_everywhere_and_does_not_learn_from_it():
    scorer = NoHitLRU()
    warm = state_with({"instance_1": 1})
    assert scorer.scores(view(hashes=(1,)), [snap(0), snap(1), snap(2)], warm) == [0.5] * 3
    scorer.chosen(view(hashes=(1,)), "instance_1")
    assert scorer.last_cold == {}


def test_no_hit_lru_sends_cold_requests_to_never_used_then_least_recently_used():
    scorer = NoHitLRU()
    cold = state_with({})
    snaps = [snap(0), snap(1), snap(2)]
    order = []
    for i in range(5):
        req = view(rid=f"request_{i}", hashes=(i + 100,))
        s = scorer.scores(req, snaps, cold)
        best = max(range(3), key=lambda j: (s[j], -j))
        scorer.chosen(req, snaps[best].id)
        order.append(best)
    assert order == [0, 1, 2, 0, 1]  # never used first, in fleet order, then the oldest
    # after 0, 1, 2, 0, 1: instance 2 is least recently used, then 0, then 1
    assert scorer.scores(view(rid="request_9", hashes=(9,)), snaps, cold) == [0.5, 0.0, 1.0]


def test_no_hit_lru_learns_only_the_choice_for_the_request_it_scored_last():
    scorer = NoHitLRU()
    scorer.scores(view(rid="request_1", hashes=(1,)), [snap(0), snap(1)], state_with({}))
    scorer.chosen(view(rid="request_2", hashes=(1,)), "instance_1")  # another request
    assert scorer.last_cold == {}
    assert scorer.scores(view(hashes=(1,)), [snap(4)], state_with({})) == [1.0]


def test_a_weighted_policy_with_no_hit_lru_tells_it_where_each_request_went():
    policy = routing("weighted", scorers={"no-hit-lru": 1})
    state = state_with({})
    state.instances = ("instance_0", "instance_1")
    targets = [policy.route(view(rid=f"r{i}", hashes=(i,)), 0.0, [snap(0), snap(1)], state,
                            0).target for i in range(4)]
    assert targets == ["instance_0", "instance_1", "instance_0", "instance_1"]


def test_weighted_keeps_the_shadow_model_only_for_a_scorer_or_bonus_that_reads_it():
    real_cache = {"precise-prefix-cache": 2, "queue-depth": 1}
    assert not routing("weighted", scorers=real_cache).reads_shadow_kv
    assert routing("weighted", scorers={"prefix-affinity": 1}).reads_shadow_kv
    assert routing("weighted", scorers=real_cache, prefix_match_bonus=0.5).reads_shadow_kv


# -- every scorer ---------------------------------------------------------------------------

snapshot_lists = st.lists(
    st.builds(lambda i, q, b, p, f, kv: snap(i, queue=q, batch=b, pending=p, in_flight=f,
                                             kv=kv),
              st.just(0), st.integers(0, 300), st.integers(0, 300), st.integers(0, 50),
              st.integers(0, 400), st.floats(0, 1)),
    min_size=1, max_size=8,
).map(lambda snaps: [snap(i, queue=s.queue_depth, batch=s.batch_size,
                          pending=s.pending_requests, in_flight=s.in_flight_requests,
                          kv=s.kv_utilization) for i, s in enumerate(snaps)])


@settings(max_examples=100, deadline=None)
@given(snaps=snapshot_lists, cached=st.lists(st.integers(0, 6), min_size=8, max_size=8),
       name=st.sampled_from(sorted(SCORERS)))
def test_every_scorer_gives_one_score_in_the_unit_interval_per_instance(snaps, cached, name):
    state = state_with({f"instance_{i}": c for i, c in enumerate(cached)})
    got = scores(name, snaps, hashes=(1, 2, 3, 4, 5, 6), state=state)
    assert len(got) == len(snaps)
    assert all(0.0 <= s <= 1.0 for s in got), got


@settings(max_examples=100, deadline=None)
@given(snaps=snapshot_lists, weights=st.dictionaries(st.sampled_from(sorted(SCORERS)),
                                                     st.floats(0.1, 5), min_size=1),
       bonus=st.sampled_from([0.0, 0.5]), routed=st.lists(st.integers(0, 7), max_size=4))
def test_the_weighted_decision_is_the_first_highest_weighted_sum(snaps, weights, bonus, routed):
    """The compiled `weighted_choice` (the weighted template's route) against its definition:
    `combine`'s composite plus the bonus where the shadow KV holds the first block, the first
    highest wins, its score in the reason."""
    hashes = (1, 2, 3)
    state = state_with({f"instance_{i}": i % 3 for i in range(8)})
    assert state.shadow_kv is not None
    for i in routed:  # some instances expected to hold the prompt's leading blocks
        state.shadow_kv.routed(f"instance_{i}", hashes[:1 + i % 3])
    policy = routing("weighted", scorers=weights, prefix_match_bonus=bonus)
    reference = routing("weighted", scorers=weights, prefix_match_bonus=bonus)
    decision = policy.route(view(hashes=hashes), 0.0, snaps, state, 0)
    composite, breakdown = combine(reference.scorers, view(hashes=hashes), snaps, state)
    if bonus:
        shares = [bonus if state.shadow_kv.expected_hit(s.id, hashes[:1]) else 0.0
                  for s in snaps]
        breakdown["prefix-match-bonus"] = tuple(shares)
        composite = [c + b for c, b in zip(composite, shares, strict=True)]
    best = composite.index(max(composite))
    assert decision.target == snaps[best].id
    assert decision.scores == tuple(composite)
    assert decision.breakdown == breakdown
    assert decision.reason == f"weighted-scoring (score={composite[best]:.3f})"
