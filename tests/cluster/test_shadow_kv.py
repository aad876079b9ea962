"""The router's shadow KV in whole runs: kept by the gateway after every routing decision,
compared with the instances' caches afterwards (design §3, §13 "Shadow divergence tracking")."""

from __future__ import annotations

import numpy as np

import blis_simpy
from blis_simpy.api import build, simulate
from blis_simpy.config.resolve import resolve
from blis_simpy.core.hashing import block_hashes
from tests.conftest import trace_run_scenario, write_trace

PREFIX = list(range(1000, 1064))  # 64 tokens: 4 blocks of 16


def own(start: int, n: int) -> list[int]:
    return list(range(start, start + n))


def evicting_trace(tmp_path):
    """A with the prefix; three long prompts of their own that need the whole small cache (so
    A's freed blocks are reused); then B with A's prefix."""
    rows = [(0.0, PREFIX + own(5000, 16), 1)]
    rows += [(1.0 + i, own(10_000 * (i + 1), 300), 1) for i in range(3)]
    rows.append((5.0, PREFIX + own(6000, 16), 1))
    return write_trace(tmp_path / "t.csv", rows)


def traced_run(trace, **cluster):
    s = trace_run_scenario(trace, engine={"kv_blocks": 24},
                           cluster={"instances": 2, "trace_level": "decisions", **cluster},
                           policies={"routing": {"type": "prefix-affinity"}})
    return blis_simpy.run(s)


def test_bdd_shadow_divergence_when_the_predicted_prefix_was_evicted(tmp_path):
    # Given the router's shadow model predicts the prefix is on instance 0 (A went there)
    # And the instance's cache has evicted it (the long prompts reused its blocks)
    # When a request with the prefix is routed to instance 0
    result = traced_run(evicting_trace(tmp_path))
    routed = result.decisions[result.decisions.stage == "routing"].set_index("request")
    b = routed.loc["request_4"]
    assert routed.loc["request_0", "instance"] == b.instance == "instance_0"
    # Then a shadow_divergence anomaly is logged
    divergences = result.anomalies[result.anomalies.type == "shadow_divergence"]
    assert list(divergences.requests) == ["request_4"]
    assert divergences.instance.iloc[0] == "instance_0"
    assert "expected 64 cached tokens, found 0" in divergences.detail.iloc[0]
    assert divergences.severity.iloc[0] == 64 / 80
    # And the routing record shows ExpectedCacheHit=true, CacheHit=false
    assert (b.expected_cache_hit, b.cache_hit) == ("True", "False")
    assert result.metrics["anomalies"]["shadow_divergence"] == 1
    shadow = result.metrics["shadow_kv"]
    assert shadow["decisions"] == 5 and shadow["expected_hits"] == 1
    assert shadow["actual_hits"] == 0 and shadow["accuracy"] == 0.8


def test_a_hit_the_shadow_did_not_expect_diverges_the_other_way(tmp_path):
    trace = write_trace(tmp_path / "t.csv", [(0.0, PREFIX + own(5000, 16), 1),
                                             (1.0, PREFIX + own(6000, 16), 1)])
    result = traced_run(trace, shadow_kv_capacity=1)  # the router remembers 1 block
    divergence = result.anomalies[result.anomalies.type == "shadow_divergence"]
    assert list(divergence.requests) == ["request_1"]
    assert divergence.detail.iloc[0].startswith("found a prefix hit the shadow KV did not")
    row = result.decisions[result.decisions.request == "request_1"].iloc[-1]
    assert (row.expected_cache_hit, row.cache_hit) == ("False", "True")


def test_agreement_gives_no_divergence_and_full_accuracy(tmp_path):
    trace = write_trace(tmp_path / "t.csv", [(0.0, PREFIX + own(5000, 16), 1),
                                             (1.0, PREFIX + own(6000, 16), 1)])
    result = traced_run(trace)
    assert "shadow_divergence" not in set(result.anomalies.type)
    assert result.metrics["shadow_kv"]["accuracy"] == 1.0
    assert result.metrics["shadow_kv"]["actual_hits"] == 1


def test_the_gateway_updates_the_shadow_on_the_chosen_instance_after_every_decision(tmp_path):
    trace = write_trace(tmp_path / "t.csv", [(0.0, PREFIX + own(5000, 16), 1),
                                             (0.0, own(7000, 32), 1)])
    sim = build(resolve(trace_run_scenario(trace, cluster={"instances": 2},
                                           policies={"routing": {"type": "round-robin"}})))
    assert sim.gateway.state.shadow_kv is None  # nothing reads it, nothing traced: not kept
    sim = build(resolve(trace_run_scenario(trace, cluster={"instances": 2, "trace_level":
                                                           "decisions"},
                                           policies={"routing": {"type": "round-robin"}})))
    simulate(sim)
    shadow = sim.gateway.state.shadow_kv
    assert shadow is not None
    a = block_hashes(np.array(PREFIX + own(5000, 16)), 16)
    b = block_hashes(np.array(own(7000, 32)), 16)
    assert (shadow.expected_hit("instance_0", a), shadow.expected_hit("instance_1", b)) == (5, 2)
    assert (shadow.expected_hit("instance_1", a), shadow.expected_hit("instance_0", b)) == (0, 0)
