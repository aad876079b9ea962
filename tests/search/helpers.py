"""Small scenarios and user policies for the search tests."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import blis_simpy
from blis_simpy.config.scenario import Scenario
from blis_simpy.policies.routing import RoundRobin, RoutingPolicy
from tests.conftest import BASE, merge

PACKAGE = str(Path(blis_simpy.__file__).resolve().parent).encode()


def processes_with(marker: str) -> set[int]:
    """Every process whose command line holds `marker`, less those that belong to another
    checkout's sandbox (an ancestor binds another blis_simpy folder into it): another test run
    on the same machine. An orphan that outlived its sandbox has no such ancestor and counts."""
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes() \
                    and not foreign(int(pid)):
                found.add(int(pid))
        except OSError:
            continue
    return found


def foreign(pid: int) -> bool:
    """Is `pid` inside a sandbox that another checkout of blis_simpy started?"""
    while pid > 1:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        bound = {argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == b"--ro-bind"}
        packages = {path for path in bound if path.endswith(b"/blis_simpy")}
        if packages:
            return PACKAGE not in packages
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # the parent, after the command's name
    return False


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
