"""RawMetrics (seed G.3, design §9): the evaluation view of a run, computed once from the
per-request and per-step tables.

Latency distributions overall, per SLO class and per tenant; throughput; SLO attainment and
goodput; Jain fairness over tenants; cache, preemption, admission and rejection rates;
per-instance utilisation and time-weighted queue depth, batch size and KV use.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from blis_simpy.config.workload import SLOTargets
from blis_simpy.core.records import InstanceRecord
from blis_simpy.core.units import US_PER_S

STATS = (("mean", None), ("p50", 50), ("p90", 90), ("p95", 95), ("p99", 99), ("max", 100))


def distribution(prefix: str, values: pd.Series) -> dict[str, float | None]:
    """mean, p50..p99 (linear interpolation at rank p/100*(n-1)) and max, in ms; None (null in
    metrics.json) without samples: no sample is no evidence of a good latency."""
    data = values.dropna().to_numpy(dtype=float)
    out: dict[str, float | None] = {}
    for name, p in STATS:
        if not len(data):
            out[f"{prefix}_{name}_ms"] = None
        elif p is None:
            out[f"{prefix}_{name}_ms"] = float(data.mean())
        else:
            out[f"{prefix}_{name}_ms"] = float(np.percentile(data, p))
    return out


def meets(requests: pd.DataFrame, targets: list[SLOTargets | None]) -> pd.Series:
    """Completed within every set target (a request without targets only has to complete)."""
    def limit(field: str) -> np.ndarray:
        return np.array([np.inf if t is None or getattr(t, field) is None
                         else getattr(t, field) for t in targets], dtype=float)

    ok = requests.final_state.to_numpy() == "completed"
    for column, field in (("ttft_ms", "ttft_ms"), ("itl_mean_ms", "tpot_ms"),
                          ("e2e_ms", "e2e_ms")):
        ok &= ~(requests[column].to_numpy(dtype=float) > limit(field))
    return pd.Series(ok, index=requests.index, dtype=bool)


def violated(row: Any, target: SLOTargets) -> list[str]:
    missed = []
    for field, value in (("ttft_ms", row.ttft_ms), ("tpot_ms", row.itl_mean_ms),
                         ("e2e_ms", row.e2e_ms)):
        goal = getattr(target, field)
        if goal is not None and value > goal:
            missed.append(f"{field} {value:.6g} > {goal:g}")
    return missed


def jain(values: Sequence[float]) -> float:
    """(sum x)^2 / (n * sum x^2); 0 when there is nothing to compare."""
    total, squares = sum(values), sum(v * v for v in values)
    return total * total / (len(values) * squares) if values and squares else 0.0


def group_stats(frame: pd.DataFrame, good: pd.Series, seconds: float) -> dict[str, Any]:
    done = frame[frame.final_state == "completed"]
    ended = frame[frame.final_state.isin(["completed", "rejected", "timed_out"])]
    out: dict[str, Any] = {
        "requests": len(frame),
        "completed": len(done),
        "completion_rate": len(done) / len(frame) if len(frame) else 0.0,
        "rejected": int((frame.final_state == "rejected").sum()),
        "timed_out": int((frame.final_state == "timed_out").sum()),
        "requests_per_s": len(done) / seconds if seconds > 0 else 0.0,
        "goodput_per_s": int(good.loc[done.index].sum()) / seconds if seconds > 0 else 0.0,
        "slo_attainment": float(good.loc[ended.index].mean()) if len(ended) else 0.0,
    }
    out.update(distribution("ttft", frame.ttft_ms))
    out.update(distribution("tpot", done.itl_mean_ms[done.output_tokens > 1]))
    out.update(distribution("e2e", done.e2e_ms))
    return out


def time_weighted(instances: Sequence[InstanceRecord], seconds: float
                  ) -> dict[str, dict[str, float]]:
    """Per instance: busy fraction and time-averaged queue depth, batch size, KV use."""
    span_us = seconds * US_PER_S
    out = {}
    for table in instances:
        kv_total = table.kv_total
        # a step still running when the run ends (at a horizon) counts up to the end only
        d = (np.minimum(table.start + table.duration, span_us) - table.start).astype(float)

        def average(level: np.ndarray, d: np.ndarray = d) -> float:
            """A level held for each step's duration, averaged over the whole run."""
            return float((level * d).sum() / span_us) if span_us > 0 else 0.0

        out[table.id] = {
            "utilization": average(np.ones_like(d)),
            "queue_depth_avg": average(table.queue_depth),
            "batch_size_avg": average(table.batch_size),
            "kv_utilization_avg": average(table.kv_used / kv_total) if kv_total else 0.0,
        }
    return out


def raw_metrics(requests: pd.DataFrame, targets: list[SLOTargets | None],
                instances: Sequence[InstanceRecord], seconds: float, cache_hit_rate: float
                ) -> dict[str, Any]:
    good = meets(requests, targets)
    metrics = group_stats(requests, good, seconds)
    done = requests[requests.final_state == "completed"]
    arrived = len(requests)
    preemptions = int(requests.preemptions.sum())
    metrics.update({
        "duration_s": seconds,
        "input_tokens_per_s": float(done.input_tokens.sum()) / seconds if seconds > 0 else 0.0,
        "output_tokens_per_s": float(requests.generated_tokens.sum()) / seconds
        if seconds > 0 else 0.0,
        "cache_hit_rate": cache_hit_rate,
        "preemption_rate": preemptions / len(done) if len(done) else 0.0,
        "admission_rate": 1.0 - metrics["rejected"] / arrived if arrived else 0.0,
        "rejection_rate": metrics["rejected"] / arrived if arrived else 0.0,
    })
    metrics["per_slo_class"] = {
        cls or "default": group_stats(frame, good, seconds)
        for cls, frame in sorted(requests.groupby("slo_class"), key=lambda kv: str(kv[0]))
    }
    tenants = sorted(requests.groupby("tenant"), key=lambda kv: str(kv[0]))
    metrics["per_tenant"] = {t or "default": group_stats(f, good, seconds) for t, f in tenants}
    metrics["jain_fairness"] = jain([group_stats(f, good, seconds)["slo_attainment"]
                                     for _, f in tenants])
    per_instance = time_weighted(instances, seconds)
    metrics["instances"] = per_instance
    for key in ("utilization", "queue_depth_avg", "batch_size_avg", "kv_utilization_avg"):
        values = [v[key] for v in per_instance.values()]
        metrics[key] = sum(values) / len(values) if values else 0.0
    return metrics
