"""From a finished run's records to its evaluation: SLO targets per request, the anomalies
judged at the end, RawMetrics and the fitness."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from blis_simpy.config.scenario import Scenario
from blis_simpy.config.workload import SLOTargets, TenantsWorkload
from blis_simpy.core.records import Anomaly, Records
from blis_simpy.core.units import US_PER_S
from blis_simpy.metrics.anomalies import counts, judged
from blis_simpy.metrics.columns import Table
from blis_simpy.metrics.conventions import Conventions
from blis_simpy.metrics.fitness import (
    COST_TERMS,
    LATENCY_TERMS,
    SLO_TERMS,
    EvaluationResult,
    Term,
    objectives,
    score,
)
from blis_simpy.metrics.imbalance import load_imbalance
from blis_simpy.metrics.raw import raw_metrics
from blis_simpy.metrics.trace.decisions import outcomes
from blis_simpy.metrics.trace.severity import with_severity
from blis_simpy.metrics.trace.shadow import accuracy, compared, divergences


def has_targets(target: SLOTargets | None) -> bool:
    return target is not None and any(
        v is not None for v in (target.ttft_ms, target.tpot_ms, target.e2e_ms))


def request_targets(scenario: Scenario, requests: Table) -> list[SLOTargets | None]:
    """Each request's SLO targets: its tenant's own, else its SLO class's."""
    by_tenant: dict[str, SLOTargets] = {}
    if isinstance(scenario.workload, TenantsWorkload):
        by_tenant = {t.id: t.slo for t in scenario.workload.tenants if has_targets(t.slo)}
    by_class = {"" if cls == "default" else cls: t
                for cls, t in scenario.evaluation.slo_targets.items()}
    return [by_tenant.get(tenant) or by_class.get(cls)
            for tenant, cls in zip(requests["tenant"], requests["slo_class"], strict=True)]


def evaluate(records: Records, scenario: Scenario, requests: Table,
             summary: dict[str, Any], conventions: Conventions, wall_s: float
             ) -> tuple[dict[str, Any], EvaluationResult, list[Anomaly]]:
    """RawMetrics, the evaluation, and every anomaly (recorded while running and judged now,
    each with its severity). A traced run adds the shadow KV's divergences and accuracy."""
    targets = request_targets(scenario, requests)
    anomalies = [*records.anomalies, *judged(records, requests, targets, scenario.evaluation,
                                             scenario.engine.kv_tiers)]
    if scenario.deployment is None:  # a fixed cluster: its replicas are interchangeable
        anomalies += load_imbalance(records, requests, records.ended_at)
    shadow = None
    if records.decisions is not None:
        shadow = compared(records.decisions, outcomes(requests))
        anomalies += divergences(shadow)
    seconds = records.ended_at / US_PER_S
    metrics = raw_metrics(requests, targets, records.instances, seconds,
                          conventions.hit_rate(records.instances))
    return evaluation(scenario, metrics, summary, anomalies, seconds, wall_s,
                      None if shadow is None else accuracy(shadow))


def evaluation(scenario: Scenario, metrics: dict[str, Any], summary: dict[str, Any],
               anomalies: list[Anomaly], seconds: float, wall_s: float,
               shadow_kv: dict[str, Any] | None = None
               ) -> tuple[dict[str, Any], EvaluationResult, list[Anomaly]]:
    """The anomalies with their severity, their counts in RawMetrics (then the shadow KV's
    accuracy of a traced run), and the fitness."""
    anomalies = with_severity(anomalies, scenario.evaluation)
    metrics["anomalies"] = counts(anomalies)
    if shadow_kv is not None:
        metrics["shadow_kv"] = shadow_kv
    weights = scenario.fitness.weights
    values = objectives(metrics, weights)
    completion = metrics["completion_rate"]
    result = EvaluationResult(
        fitness=score(values, weights, completion), completion=completion, objectives=values,
        weights=dict(weights),
        metrics=metrics, summary=summary, policy_id=policy_id(scenario),
        workload_id=workload_id(scenario), simulated_s=seconds, wall_s=wall_s)
    return metrics, result, anomalies


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


def relative_terms(scenario: Scenario) -> tuple[Term, ...]:
    """The terms of the default (baseline-relative) score for this scenario: the latencies and
    throughput always; SLO attainment and goodput when it sets SLO targets; cost when an
    autoscaler can change it and replicas have a price (`blis_simpy.metrics.fitness`)."""
    terms: tuple[Term, ...] = LATENCY_TERMS
    workload = scenario.workload
    if any(has_targets(t) for t in scenario.evaluation.slo_targets.values()) or (
            isinstance(workload, TenantsWorkload)
            and any(has_targets(t.slo) for t in workload.tenants)):
        terms += SLO_TERMS
    deployment = scenario.deployment
    if deployment is not None and deployment.autoscaler is not None and any(
            config.cost_per_replica_hour > 0 for model in deployment.models
            for config in model.configs):
        terms += COST_TERMS
    return terms
