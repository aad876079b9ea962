"""Small scenarios and user policies for the search tests."""

from __future__ import annotations

from typing import Any

from blis_simpy.config.scenario import Scenario
from blis_simpy.policies.routing import RoundRobin, RoutingPolicy
from tests.conftest import BASE, merge


def prefix_scenario(**changes: Any) -> Scenario:
    """Two instances, a small KV cache and requests sharing a few long system prompts: where
    a request is routed decides what stays cached, so routing policies differ clearly."""
    data = merge(BASE, {"name": "prefix", "cluster": {"instances": 2},
                        "engine": {"kv_blocks": 200}, "fitness": {"weights": {"mean_ttft": 1.0}},
                        **changes})
    data["workload"] = {"type": "tenants", "rate_per_s": 60, "duration_s": 2,
                  "prefix_groups": [
                      {"id": f"p{i}", "length": {"type": "constant", "value": 1024},
                       "popularity": 1} for i in range(4)],
                  "tenants": [{"id": "t", "rate_fraction": 1.0,
                               "prefix": {"reuse_probability": 0.9},
                               "prompt": {"type": "constant", "value": 64},
                               "output": {"type": "constant", "value": 32}}]}
    return Scenario.from_dict(data)


class Crashing(RoutingPolicy):
    """Raises on its third request: a candidate broken at run time, not at load."""

    def __init__(self, params: object = None) -> None:
        super().__init__(params)
        self.calls = 0
        self.turns = RoundRobin()

    def route(self, req, priority, snapshots, state, clock):
        self.calls += 1
        if self.calls == 3:
            raise ZeroDivisionError("scripted failure")
        return self.turns.route(req, priority, snapshots, state, clock)
