"""Issue 35 item 3 in a whole run: the library scenario routing-precise-prefix, whose router
reads the replicas' real caches, against the same weights on the router's shadow model."""

from __future__ import annotations

import blis_simpy

SHADOW = {"policies.routing.params.scorers":
          {"prefix-affinity": 2, "queue-depth": 1, "kv-utilization": 1}}


def test_routing_on_real_caches_crowds_replicas_less_than_routing_on_the_shadow_model():
    precise = blis_simpy.run("routing-precise-prefix").summary
    shadow = blis_simpy.run("routing-precise-prefix", overrides=SHADOW).summary
    assert precise["completed_requests"] == shadow["completed_requests"] > 1900
    # about the same share of prompt tokens hit ...
    assert abs(precise["cache_hit_rate"] - shadow["cache_hit_rate"]) < 0.03
    # ... but the shadow keeps sending prompts to replicas that evicted their prefix
    assert precise["preemption_count"] * 1.5 < shadow["preemption_count"]
    # (the tail: 86 against 132 ms since a step's completions are seen at its end; 85
    # against 268 ms when they were seen at its start)
    assert precise["ttft_p99_ms"] * 1.4 < shadow["ttft_p99_ms"]
    assert precise["ttft_mean_ms"] < shadow["ttft_mean_ms"]
