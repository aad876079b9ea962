"""Anomaly severity (design §10): how bad one occurrence is, from 0 (negligible) to 1 (as bad
as the type gets), so a summary can rank occurrences of different types.

* `slo_violation`: the worst relative overshoot of a missed target, (value - target) /
  target, capped at 1 (set where it is judged);
* `shadow_divergence`: the difference between expected and actual cached tokens, as a share
  of the prompt (set where it is judged);
* `hol_blocking`, `kv_hol_blocking`: the episode's length in seconds, capped at 1 (a request
  blocked for a second or more);
* `preemption_storm`, `rejection_burst`, `kv_thrashing`: events in the episode / (2 x the
  threshold count), capped at 1 (`kv_thrashing`'s set where it is judged);
* `priority_inversion`, `slo_class_inversion`: 0.25, one out-of-order admission is minor;
  their count carries the weight;
* `scale_oscillation`: an episode's reversals / 10, capped at 1 (set where it is judged: each
  flip pays a replica's provisioning and load, or a drain, for nothing);
* `pd_backpressure`: the episode's length in seconds, capped at 1 (a prefill instance unable to
  admit for a second or more);
* `load_imbalance`: the request's wait in seconds, capped at 1 (set where it is judged);
* `overload`: the largest share of the offered rate the wait queue grew by in the stretch of
  OVERLOADED windows, capped at 1 (set where it is judged: metrics/saturation.py);
* `instance_failure`: 0.5 plus half the downtime in seconds, capped at 1: a crash always
  loses work, and a second or more down is as bad as it gets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from blis_simpy.config.scenario import EvaluationConfig
from blis_simpy.core.records import Anomaly
from blis_simpy.core.units import US_PER_S

INVERSION_SEVERITY = 0.25
JUDGED_WITH_SEVERITY = ("slo_violation", "shadow_divergence", "kv_thrashing",
                        "scale_oscillation", "load_imbalance", "overload")


def severity(anomaly: Anomaly, config: EvaluationConfig) -> float:
    kind = anomaly.type
    if kind in JUDGED_WITH_SEVERITY:
        return anomaly.severity
    if kind in ("hol_blocking", "kv_hol_blocking", "pd_backpressure"):
        return min(1.0, (anomaly.end - anomaly.time) / US_PER_S)
    if kind == "preemption_storm":
        return min(1.0, len(anomaly.requests) / (2 * config.preemption_storm.count))
    if kind == "rejection_burst":
        return min(1.0, len(anomaly.requests) / (2 * config.rejection_burst.count))
    if kind in ("priority_inversion", "slo_class_inversion"):
        return INVERSION_SEVERITY
    if kind == "instance_failure":
        return min(1.0, 0.5 + (anomaly.end - anomaly.time) / US_PER_S / 2)
    raise ValueError(f"no severity rule for anomaly type {kind!r}")


def with_severity(anomalies: Sequence[Anomaly], config: EvaluationConfig) -> list[Anomaly]:
    """Every anomaly with its severity set."""
    return [replace(a, severity=severity(a, config)) for a in anomalies]
