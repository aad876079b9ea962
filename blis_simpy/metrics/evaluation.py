"""From a finished simulation to its evaluation: SLO targets per request, the anomalies
judged at the end, RawMetrics, the per-instance time series and the fitness."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np
import pandas as pd

from blis_simpy.config.scenario import Scenario
from blis_simpy.engine.simulation import Simulation
from blis_simpy.metrics.collect import StepTable
from blis_simpy.metrics.fitness import EvaluationResult, objectives, score
from blis_simpy.metrics.raw import finish_anomalies, raw_metrics
from blis_simpy.metrics.report import hit_rate
from blis_simpy.workload.spec import SLOTargets, TenantsWorkload


def has_targets(target: SLOTargets | None) -> bool:
    return target is not None and any(
        v is not None for v in (target.ttft_ms, target.tpot_ms, target.e2e_ms))


def request_targets(scenario: Scenario, requests: pd.DataFrame) -> list[SLOTargets | None]:
    """Each request's SLO targets: its tenant's own, else its SLO class's."""
    by_tenant: dict[str, SLOTargets] = {}
    if isinstance(scenario.workload, TenantsWorkload):
        by_tenant = {t.id: t.slo for t in scenario.workload.tenants if has_targets(t.slo)}
    by_class = {"" if cls == "default" else cls: t
                for cls, t in scenario.evaluation.slo_targets.items()}
    return [by_tenant.get(tenant) or by_class.get(cls)
            for tenant, cls in zip(requests.tenant, requests.slo_class, strict=True)]


def evaluate(sim: Simulation, steps: list[StepTable], requests: pd.DataFrame,
             summary: dict[str, Any], wall_s: float) -> tuple[dict[str, Any], EvaluationResult]:
    scenario = sim.scenario
    targets = request_targets(scenario, requests)
    ev = scenario.evaluation
    finish_anomalies(sim.anomalies, requests, targets,
                     ev.preemption_storm.count, round(ev.preemption_storm.window_s * 1e6),
                     ev.rejection_burst.count, round(ev.rejection_burst.window_s * 1e6))
    seconds = sim.ended_at / 1e6
    metrics = raw_metrics(requests, targets, steps, [i.name for i in sim.instances],
                          scenario.engine.kv_blocks or 0, seconds,
                          hit_rate(sim.instances, scenario.compat == "blis"),
                          sum(i.preemptions for i in sim.instances))
    counts = {kind: 0 for kind in sorted({a.type for a in sim.anomalies.records})}
    for anomaly in sim.anomalies.records:
        counts[anomaly.type] += 1
    metrics["anomalies"] = counts
    weights = scenario.fitness.weights
    values = objectives(metrics, weights)
    result = EvaluationResult(
        fitness=score(values, weights), objectives=values, weights=dict(weights),
        metrics=metrics, summary=summary, policy_id=policy_id(scenario),
        workload_id=workload_id(scenario), simulated_s=seconds, wall_s=wall_s)
    return metrics, result


def digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]


def policy_id(scenario: Scenario) -> str:
    """Readable and stable: the four templates plus a hash of all policy parameters."""
    plain = scenario.to_dict()["policies"]
    names = ",".join(f"{axis}={plain[axis]['type']}" for axis in
                     ("admission", "priority", "routing", "scheduler"))
    return f"{names}#{digest(plain)}"


def workload_id(scenario: Scenario) -> str:
    plain = scenario.to_dict()
    return f"{scenario.name}:{plain['workload']['type']}:seed={scenario.seed}#" \
        f"{digest(plain['workload'])}"


def instance_series(sim: Simulation, steps: list[StepTable]) -> pd.DataFrame:
    """Each instance's levels at every step start: queue depth, batch size, KV use."""
    total = sim.scenario.engine.kv_blocks or 1
    frames = [pd.DataFrame({
        "instance": inst.name,
        "time_s": table.start / 1e6,
        "queue_depth": table.queue_depth,
        "batch_size": table.batch_size,
        "kv_utilization": table.kv_used / total,
        "busy_s": table.duration / 1e6,
    }) for inst, table in zip(sim.instances, steps, strict=True)]
    frame = pd.concat(frames, ignore_index=True)
    order = np.lexsort((frame.instance.to_numpy(), frame.time_s.to_numpy()))
    return frame.iloc[order].reset_index(drop=True)
