"""From a finished run's records to its evaluation: SLO targets per request, the anomalies
judged at the end, RawMetrics and the fitness."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import numpy as np

from blis_simpy.config.scenario import Scenario
from blis_simpy.config.workload import SLOTargets, TenantsWorkload
from blis_simpy.core.records import Anomaly, Records
from blis_simpy.core.request import State
from blis_simpy.core.scale_log import ScaleLog
from blis_simpy.core.units import US_PER_S
from blis_simpy.metrics.anomalies import counts, judged, oscillations
from blis_simpy.metrics.columns import Table
from blis_simpy.metrics.conventions import Conventions
from blis_simpy.metrics.fitness import (
    COST_TERMS,
    LATENCY_TERMS,
    SLO_TERMS,
    EvaluationResult,
    Term,
    arrivals,
    objectives,
    score,
    sustained,
    tenant_completion,
    work_completion,
)
from blis_simpy.metrics.imbalance import load_imbalance
from blis_simpy.metrics.raw import Measured, meets, raw_metrics, targeted
from blis_simpy.metrics.saturation import overloads
from blis_simpy.metrics.trace.decisions import outcomes
from blis_simpy.metrics.trace.severity import with_severity
from blis_simpy.metrics.trace.shadow import accuracy, compared, divergences
from blis_simpy.metrics.window import Window


def has_targets(target: SLOTargets | None) -> bool:
    return target is not None and target.any_set


def request_targets(scenario: Scenario, requests: Table) -> list[SLOTargets | None]:
    """Each request's SLO targets: its tenant's own, else its SLO class's."""
    lookup = scenario.slo_targets()
    if not (lookup.by_tenant or lookup.by_class):  # none set (most runs): not one per row
        return [None] * len(requests)
    return [lookup.of(tenant, cls)
            for tenant, cls in zip(requests["tenant"], requests["slo_class"], strict=True)]


def measured(records: Records, window: Window) -> Measured:
    """The window applied to the run's requests (the whole run: every request, and the
    completed ones for rates)."""
    req = records.requests
    completed = req.in_state(State.COMPLETED) if window.whole else \
        window.within(req.completed_at)
    return Measured(window.arrived(req.arrival), completed, window.seconds(records.ended_at))


def evaluate(records: Records, scenario: Scenario, requests: Table,
             summary: dict[str, Any], conventions: Conventions, wall_s: float, window: Window,
             scale_log: ScaleLog | None = None
             ) -> tuple[dict[str, Any], EvaluationResult, list[Anomaly]]:
    """RawMetrics over the measurement window, the evaluation, and every anomaly (recorded
    while running and judged now, each with its severity; counted in the metrics when it
    began within the window). A traced run adds the shadow KV's divergences and accuracy."""
    targets = request_targets(scenario, requests)
    anomalies = [*records.anomalies, *judged(records, requests, targets, scenario.evaluation,
                                             scenario.engine.kv_tiers)]
    if scenario.deployment is None:  # a fixed cluster: its replicas are interchangeable
        anomalies += load_imbalance(records, requests, records.ended_at)
    if scale_log is not None:
        anomalies += oscillations(scale_log)
    shadow = None
    if records.decisions is not None:
        shadow = compared(records.decisions, outcomes(requests))
        anomalies += divergences(shadow)
    measure = measured(records, window)
    everyone = np.ones(len(records.requests), dtype=bool)
    good, with_target = meets(requests, targets), targeted(targets)
    metrics = raw_metrics(requests, good, with_target, records.instances, measure, window.start,
                          window.tokens(records.requests, everyone, records.ended_at),
                          conventions.hit_rate(records.instances, *window.prompt_cache(
                              records.requests, measure.arrived)))
    metrics, result, anomalies = evaluation(scenario, metrics, summary, anomalies,
                                            measure.seconds, wall_s, window,
                                            None if shadow is None else accuracy(shadow))
    req = records.requests
    done = req.in_state(State.COMPLETED) & measure.arrived
    work = req.input_len + req.output_len
    share = tenant_completion(req.tenant, work, measure.arrived, done)
    arrival_s = requests.array("arrival_s")
    # The run's end for charging the unserved: its last event, or its last arrival where that
    # came later (the instances' last event is 0 when every request was turned away: newcomer
    # 18 saw a reject-all candidate told its latencies were 10x better than the baseline's).
    ended_s = max(records.ended_at / US_PER_S, float(arrival_s.max()) if len(arrival_s) else 0.0)
    over = arrivals(requests.array("ttft_ms"), requests.array("e2e_ms"), arrival_s,
                    req.in_state(State.COMPLETED), good, with_target,
                    np.asarray(measure.arrived, dtype=bool), ended_s)
    over["work_completion"] = work_completion(work, measure.arrived, done)
    return metrics, dataclasses.replace(result, tenant_completion=share, arrivals=over), \
        anomalies


def evaluation(scenario: Scenario, metrics: dict[str, Any], summary: dict[str, Any],
               anomalies: list[Anomaly], seconds: float, wall_s: float, window: Window,
               shadow_kv: dict[str, Any] | None = None
               ) -> tuple[dict[str, Any], EvaluationResult, list[Anomaly]]:
    """The anomalies with their severity (the saturation detector's `overload` stretches
    among them), the counts of those that began within the window in RawMetrics (then the
    shadow KV's accuracy of a traced run and the saturation verdict's figures), and the
    fitness, scaled by the share of the offered load the run could sustain."""
    verdict = summary.get("saturation", {})
    anomalies = with_severity([*anomalies, *overloads(verdict)], scenario.evaluation)
    starts = np.array([a.time for a in anomalies], dtype=np.int64)
    metrics["anomalies"] = counts([a for a, keep in zip(anomalies, window.within(starts),
                                                        strict=True) if keep])
    if shadow_kv is not None:
        metrics["shadow_kv"] = shadow_kv
    metrics.update(scale_and_tail(metrics, summary))
    weights = scenario.fitness.weights
    values = objectives(metrics, weights)
    completion = metrics["completion_rate"]
    carried = sustained(verdict)
    plain = scenario.to_dict()  # (once for both ids)
    metrics["saturated"] = verdict.get("verdict") == "saturated"
    metrics["headroom"] = verdict.get("headroom")
    metrics["max_sustainable_rate_per_s"] = verdict.get("max_sustainable_rate_per_s")
    result = EvaluationResult(
        fitness=score(values, weights, completion) * carried, completion=completion,
        sustained=carried, objectives=values,
        weights=dict(weights),
        metrics=metrics, summary=summary, policy_id=policy_id(scenario, plain),
        workload_id=workload_id(scenario, plain), simulated_s=seconds, wall_s=wall_s)
    return metrics, result, anomalies


def scale_and_tail(metrics: dict[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
    """Seed 001 §9's `ScaleEfficiency` (SLO attainment per replica: the attainment over the
    average replica count, the deployment's over the run, a fixed cluster's instances; null
    without SLO targets) and `TailLatencyBlowup` (E2E p99 over E2E p50: 1 when the tail is
    the median, null without completions), from the metrics already computed from records."""
    attainment = metrics["slo_attainment"]
    deployment = summary.get("deployment")
    replicas = deployment["avg_replicas"] if deployment is not None else \
        len(metrics["instances"])
    p50, p99 = metrics["e2e_p50_ms"], metrics["e2e_p99_ms"]
    return {
        "scale_efficiency": attainment / replicas if attainment is not None and replicas > 0
        else None,
        "tail_latency_blowup": p99 / p50 if p50 and p99 is not None else None,
    }


def digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]


def policy_id(scenario: Scenario, plain: dict[str, Any] | None = None) -> str:
    """Readable and stable: the four templates plus a hash of all policy parameters.
    (`plain`: `scenario.to_dict()`, when the caller has it.)"""
    policies = (plain or scenario.to_dict())["policies"]
    names = ",".join(f"{axis}={policies[axis]['type']}" for axis in
                     ("admission", "priority", "routing", "scheduler"))
    return f"{names}#{digest(policies)}"


def workload_id(scenario: Scenario, plain: dict[str, Any] | None = None) -> str:
    """The requests a run served: the workload section and the seed they were drawn with
    (`seeds.workload`, else `seed`: the SimulationKey's workload seed, 001 §13)."""
    plain = plain or scenario.to_dict()
    return f"{scenario.name}:{plain['workload']['type']}:seed={scenario.workload_seed}#" \
        f"{digest(plain['workload'])}"


def relative_terms(scenario: Scenario) -> tuple[Term, ...]:
    """The terms of the default (baseline-relative) score for this scenario: the latencies and
    throughput, and SLO attainment when it sets SLO targets; where an autoscaler can change the
    cost and replicas have a price, SLO attainment (the latencies without targets) and the
    cost, the quality per dollar (`blis_simpy.metrics.fitness`)."""
    workload = scenario.workload
    slo = any(has_targets(t) for t in scenario.evaluation.slo_targets.values()) or (
        isinstance(workload, TenantsWorkload)
        and any(has_targets(t.slo) for t in workload.tenants))
    deployment = scenario.deployment
    if deployment is not None and deployment.autoscaler is not None and any(
            config.cost_per_replica_hour > 0 for model in deployment.models
            for config in model.configs):
        return (SLO_TERMS if slo else LATENCY_TERMS) + COST_TERMS
    return LATENCY_TERMS + SLO_TERMS if slo else LATENCY_TERMS
