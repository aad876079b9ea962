"""RawMetrics (seed G.3, design §9): the evaluation view of a run, computed once from the
per-request and per-step tables.

Latency distributions overall, per SLO class and per tenant; throughput; SLO attainment and
goodput; Jain fairness over tenants; cache, preemption, admission and rejection rates;
per-instance utilisation and time-weighted queue depth, batch size and KV use.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from blis_simpy.config.workload import SLOTargets
from blis_simpy.core.records import InstanceRecord
from blis_simpy.core.units import US_PER_S
from blis_simpy.metrics.columns import Table

STATS = (("mean", None), ("p50", 50), ("p90", 90), ("p95", 95), ("p99", 99), ("max", 100))


def distribution(prefix: str, values: np.ndarray) -> dict[str, float | None]:
    """mean, p50..p99 (linear interpolation at rank p/100*(n-1)) and max, in ms; None (null in
    metrics.json) without samples: no sample is no evidence of a good latency."""
    data = values[~np.isnan(values)]
    exact = data.dtype == np.float64
    out: dict[str, float | None] = {}
    for name, p in STATS:
        if not len(data):
            out[f"{prefix}_{name}_ms"] = None
        elif p is None:
            out[f"{prefix}_{name}_ms"] = float(data.mean())
        elif exact:
            out[f"{prefix}_{name}_ms"] = percentile(data, p)
        else:
            out[f"{prefix}_{name}_ms"] = float(np.percentile(data, p))
    return out


def percentile(data: np.ndarray, p: int) -> float:
    """`np.percentile(data, p)` of float64 samples without NaN: numpy's default "linear"
    method step by step (the same partition, so even 0.0 and -0.0 land where numpy puts them,
    and the same float operations), without the `numpy.ma` import (8 ms of every run's start)
    that numpy's version pulls in on first use."""
    n = len(data)
    virtual = (n - 1) * (p / 100)
    below = -1 if virtual >= n - 1 else math.floor(virtual)
    above = -1 if below == -1 else below + 1
    arr = data.copy()
    arr.partition(sorted({0, -1, below, above}))
    gamma = virtual - below
    a, b = float(arr[below]), float(arr[above])
    diff = b - a
    return b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma


def targeted(targets: list[SLOTargets | None]) -> np.ndarray:
    """The requests with at least one SLO target: only they have something to attain."""
    return np.array([t is not None and any(v is not None for v in (t.ttft_ms, t.tpot_ms,
                                                                    t.e2e_ms))
                     for t in targets], dtype=bool)


def meets(requests: Table, targets: list[SLOTargets | None]) -> np.ndarray:
    """Completed within every set target (a request without targets only has to complete;
    `targeted` tells them apart)."""
    def limit(field: str) -> np.ndarray:
        return np.array([np.inf if t is None or getattr(t, field) is None
                         else getattr(t, field) for t in targets], dtype=float)

    ok = np.asarray(requests["final_state"], dtype=object) == "completed"
    for column, field in (("ttft_ms", "ttft_ms"), ("itl_mean_ms", "tpot_ms"),
                          ("e2e_ms", "e2e_ms")):
        ok &= ~(requests.array(column).astype(float) > limit(field))
    return ok


def violated(values: tuple[float, float, float], target: SLOTargets) -> list[str]:
    """The targets missed, given a request's (TTFT, mean ITL, E2E) in ms."""
    missed = []
    for field, value in zip(("ttft_ms", "tpot_ms", "e2e_ms"), values, strict=True):
        goal = getattr(target, field)
        if goal is not None and value > goal:
            missed.append(f"{field} {value:.6g} > {goal:g}")
    return missed


def jain(values: Sequence[float]) -> float:
    """(sum x)^2 / (n * sum x^2); 0 when there is nothing to compare."""
    total, squares = sum(values), sum(v * v for v in values)
    return total * total / (len(values) * squares) if values and squares else 0.0


@dataclass(frozen=True, slots=True)
class Measured:
    """The measurement window applied to a run's requests (metrics/window.py): who is measured
    (arrived within it), what counts towards rates (completed within it) and its length."""

    arrived: np.ndarray
    completed: np.ndarray
    seconds: float

    def rate(self, count: float) -> float:
        return count / self.seconds if self.seconds > 0 else 0.0


def group_stats(requests: Table, group: np.ndarray, good: np.ndarray, judged: np.ndarray,
                measured: Measured) -> dict[str, Any]:
    """The statistics of the requests selected by the boolean mask `group` that arrived
    within the window; their rates count the group's completions within it. SLO attainment
    and goodput count only the requests with targets (`judged`), and are None without any."""
    rows = group & measured.arrived
    state = np.asarray(requests["final_state"], dtype=object)
    done = rows & (state == "completed")
    ended = rows & ((state == "completed") | (state == "rejected") | (state == "timed_out"))
    served = group & measured.completed
    count, completed = int(rows.sum()), int(done.sum())
    attainment = goodput = None
    if (rows & judged).any():
        attained = ended & judged
        attainment = float(good[attained].mean()) if attained.any() else 0.0
    if (group & judged).any():
        goodput = measured.rate(int((good & judged)[served].sum()))
    out: dict[str, Any] = {
        "requests": count,
        "completed": completed,
        "completion_rate": completed / count if count else 0.0,
        "rejected": int((rows & (state == "rejected")).sum()),
        "timed_out": int((rows & (state == "timed_out")).sum()),
        "requests_per_s": measured.rate(int(served.sum())),
        "goodput_per_s": goodput,
        "slo_attainment": attainment,
    }
    ttft, tpot, e2e = (requests.array(name).astype(float)
                       for name in ("ttft_ms", "itl_mean_ms", "e2e_ms"))
    out.update(distribution("ttft", ttft[rows]))
    out.update(distribution("tpot", tpot[done & (requests.array("output_tokens") > 1)]))
    out.update(distribution("e2e", e2e[done]))
    return out


def groups(requests: Table, column: str) -> list[tuple[str, np.ndarray]]:
    """(value, mask) for each value of a string column, in order of the value."""
    values = np.asarray(requests[column], dtype=object)
    return [(key, values == key) for key in sorted(set(values.tolist()), key=str)]


def time_weighted(instances: Sequence[InstanceRecord], start_us: int, seconds: float
                  ) -> dict[str, dict[str, float]]:
    """Per instance: busy fraction and time-averaged queue depth, batch size, KV use over the
    `seconds` from `start_us` (the whole run: from 0 to its end)."""
    span_us = seconds * US_PER_S
    stop_us = start_us + span_us
    out = {}
    for table in instances:
        kv_total = table.kv_total
        # a step still running when the window ends counts up to its end only, and one that
        # began before the window from the window's start
        d = (np.minimum(table.start + table.duration, stop_us)
             - np.maximum(table.start, start_us)).astype(float)
        d = np.maximum(d, 0.0) if start_us else d

        def average(level: np.ndarray, d: np.ndarray = d) -> float:
            """A level held for each step's duration, averaged over the window."""
            return float((level * d).sum() / span_us) if span_us > 0 else 0.0

        out[table.id] = {
            "utilization": average(np.ones_like(d)),
            "queue_depth_avg": average(table.queue_depth),
            "batch_size_avg": average(table.batch_size),
            "kv_utilization_avg": average(table.kv_used / kv_total) if kv_total else 0.0,
        }
    return out


def raw_metrics(requests: Table, targets: list[SLOTargets | None],
                instances: Sequence[InstanceRecord], measured: Measured, start_us: int,
                output_tokens: float, cache_hit_rate: float) -> dict[str, Any]:
    """RawMetrics over the measured requests (`measured`); `output_tokens` are those emitted
    within the window that starts at `start_us`. Without any SLO target the attainment,
    goodput and fairness are null: there is nothing to attain."""
    good, judged = meets(requests, targets), targeted(targets)
    everyone = np.ones(len(requests), dtype=bool)
    metrics = group_stats(requests, everyone, good, judged, measured)
    state = np.asarray(requests["final_state"], dtype=object)
    done = (state == "completed") & measured.arrived
    arrived = int(measured.arrived.sum())
    preemptions = int(requests.array("preemptions")[measured.arrived].sum())
    completed = int(done.sum())
    metrics.update({
        "duration_s": measured.seconds,
        "input_tokens_per_s": measured.rate(
            float(requests.array("input_tokens")[measured.completed].sum())),
        "output_tokens_per_s": measured.rate(output_tokens),
        "cache_hit_rate": cache_hit_rate,
        "preemption_rate": preemptions / completed if completed else 0.0,
        "admission_rate": 1.0 - metrics["rejected"] / arrived if arrived else 0.0,
        "rejection_rate": metrics["rejected"] / arrived if arrived else 0.0,
    })
    metrics["per_slo_class"] = {
        cls or "default": group_stats(requests, rows, good, judged, measured)
        for cls, rows in groups(requests, "slo_class")
    }
    tenants = [(t, group_stats(requests, rows, good, judged, measured))
               for t, rows in groups(requests, "tenant")]
    metrics["per_tenant"] = {t or "default": stats for t, stats in tenants}
    attained = [stats["slo_attainment"] for _, stats in tenants
                if stats["slo_attainment"] is not None]
    metrics["jain_fairness"] = jain(attained) if attained else None
    per_instance = time_weighted(instances, start_us, measured.seconds)
    metrics["instances"] = per_instance
    for key in ("utilization", "queue_depth_avg", "batch_size_avg", "kv_utilization_avg"):
        values = [v[key] for v in per_instance.values()]
        metrics[key] = sum(values) / len(values) if values else 0.0
    return metrics
