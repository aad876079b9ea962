"""Small autoscaled scenarios for the cluster, metrics and property tests."""

from __future__ import annotations

import copy
from typing import Any

import blis_simpy
from blis_simpy.config.scenario import Scenario
from blis_simpy.sim.result import Result
from blis_simpy.sim.run import prepare, simulate

MODEL = "meta-llama/llama-3.1-8b-instruct"


def scenario(policy: dict[str, Any] | None = None, *, rate: float = 20.0,
             duration: float = 20.0, pool: dict[str, int] | None = None,
             actuation: dict[str, Any] | None = None, interval: float = 1.0,
             triggers: dict[str, Any] | None = None, seed: int = 7) -> dict[str, Any]:
    """One model, one config (8 requests per batch), a tenants workload; `policy` None: no
    autoscaler (a fixed pool of `initial`)."""
    data: dict[str, Any] = {
        "version": 1, "name": "autoscale-test", "seed": seed,
        "model": {"name": MODEL, "gpu": "H100", "tp": 1},
        "latency": {"type": "blackbox"},  # the catalog's coefficients: what these tests pin
        "engine": {"max_running_requests": 8, "kv_blocks": 2048},  # small: checks stay fast
        "workload": {
            "type": "tenants", "rate_per_s": rate, "duration_s": duration,
            "tenants": [{"id": "app", "slo": {"ttft_ms": 1000},
                         "prompt": {"type": "constant", "value": 500},
                         "output": {"type": "constant", "value": 200}}],
        },
        "deployment": {"models": [{"name": MODEL, "configs": [{
            "id": "pool", "replicas": pool or {"min": 1, "max": 4, "initial": 1},
            "cost_per_replica_hour": 3.6}]}]},
    }
    if policy is not None:
        data["deployment"]["autoscaler"] = {
            "interval_s": interval, "policy": policy, "actuation": actuation or {},
            "triggers": triggers or {}}
    return data


def with_changes(data: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(data)
    out.update(changes)
    return out


def run(data: dict[str, Any], **kwargs: Any) -> Result:
    return blis_simpy.run(Scenario.from_dict(data), **kwargs)


def run_with_log(data: dict[str, Any], **kwargs: Any):  # type: ignore[no-untyped-def]
    """The result and the simulation (its scale_log, fleet) after the run."""
    sim = prepare(Scenario.from_dict(data), **kwargs)
    return simulate(sim), sim
