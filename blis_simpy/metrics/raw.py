"""RawMetrics (seed G.3, design §9): the evaluation view of a run, computed once from the
per-request and per-step tables.

Latency distributions overall, per SLO class and per tenant; throughput; SLO attainment and
goodput; Jain fairness over tenants; cache, preemption, admission and rejection rates;
per-instance utilisation and time-weighted queue depth, batch size and KV use.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
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
    if data.dtype == np.float64:
        return stats(prefix, len(data), lambda: float(data.mean()),
                     lambda p: percentile(data, p))
    return stats(prefix, len(data), lambda: float(data.mean()),
                 lambda p: float(np.percentile(data, p)))


def stats(prefix: str, count: int, mean: Callable[[], float],
          percentile_of: Callable[[int], float]) -> dict[str, float | None]:
    """The STATS of `count` samples, given their mean and a percentile function."""
    out: dict[str, float | None] = {}
    for name, p in STATS:
        key = f"{prefix}_{name}_ms"
        out[key] = None if not count else mean() if p is None else percentile_of(p)
    return out


def linear(n: int, p: int) -> tuple[int, int, float]:
    """numpy's default "linear" percentile of n samples: the order statistics below and
    above rank (n-1)*p/100 (-1: the largest) and the weight of the one above."""
    virtual = (n - 1) * (p / 100)
    below = -1 if virtual >= n - 1 else math.floor(virtual)
    above = -1 if below == -1 else below + 1
    return below, above, virtual - below


def interpolate(a: float, b: float, gamma: float) -> float:
    """numpy's interpolation between neighbouring order statistics, operation for
    operation."""
    diff = b - a
    return b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma


def percentile(data: np.ndarray, p: int) -> float:
    """`np.percentile(data, p)` of float64 samples without NaN: numpy's default "linear"
    method step by step (the same partition, so even 0.0 and -0.0 land where numpy puts them,
    and the same float operations), without the `numpy.ma` import (8 ms of every run's start)
    that numpy's version pulls in on first use."""
    below, above, gamma = linear(len(data), p)
    arr = data.copy()
    arr.partition(sorted({0, -1, below, above}))
    return interpolate(float(arr[below]), float(arr[above]), gamma)


def meets(requests: Table, targets: list[SLOTargets | None]) -> np.ndarray:
    """Completed within every set target (a request without targets only has to complete)."""
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
class GroupCounts:
    """How a group's requests ended, and how many met their SLO targets."""

    requests: int
    completed: int
    rejected: int
    timed_out: int
    ended: int  # completed, rejected or timed out
    good_completed: int  # completed within their targets
    good_ended: int  # of the ended ones (the completed ones are the only good ones)


def group_stats(requests: Table, rows: np.ndarray, good: np.ndarray, seconds: float
                ) -> dict[str, Any]:
    """The statistics of the requests selected by the boolean mask `rows`."""
    state = np.asarray(requests["final_state"], dtype=object)
    done = rows & (state == "completed")
    ended = rows & ((state == "completed") | (state == "rejected") | (state == "timed_out"))
    counts = GroupCounts(int(rows.sum()), int(done.sum()),
                         int((rows & (state == "rejected")).sum()),
                         int((rows & (state == "timed_out")).sum()), int(ended.sum()),
                         int(good[done].sum()), int(good[ended].sum()))
    ttft, tpot, e2e = (requests.array(name).astype(float)
                       for name in ("ttft_ms", "itl_mean_ms", "e2e_ms"))
    return group_dict(counts, seconds, {
        **distribution("ttft", ttft[rows]),
        **distribution("tpot", tpot[done & (requests.array("output_tokens") > 1)]),
        **distribution("e2e", e2e[done])})


def group_dict(counts: GroupCounts, seconds: float, distributions: dict[str, float | None]
               ) -> dict[str, Any]:
    """A group's entry in RawMetrics: counts, rates, SLO attainment and goodput, then its
    TTFT, TPOT and E2E distributions."""
    return {
        "requests": counts.requests,
        "completed": counts.completed,
        "completion_rate": counts.completed / counts.requests if counts.requests else 0.0,
        "rejected": counts.rejected,
        "timed_out": counts.timed_out,
        "requests_per_s": counts.completed / seconds if seconds > 0 else 0.0,
        "goodput_per_s": counts.good_completed / seconds if seconds > 0 else 0.0,
        "slo_attainment": counts.good_ended / counts.ended if counts.ended else 0.0,
        **distributions,
    }


def groups(requests: Table, column: str) -> list[tuple[str, np.ndarray]]:
    """(value, mask) for each value of a string column, in order of the value."""
    values = np.asarray(requests[column], dtype=object)
    return [(key, values == key) for key in sorted(set(values.tolist()), key=str)]


def time_weighted(instances: Sequence[InstanceRecord], seconds: float
                  ) -> dict[str, dict[str, float]]:
    """Per instance: busy fraction and time-averaged queue depth, batch size, KV use."""
    span_us = seconds * US_PER_S
    out = {}
    for table in instances:
        kv_total = table.kv_total
        # a step still running when the run ends (at a horizon) counts up to the end only
        d = (np.minimum(table.start + table.duration, span_us) - table.start).astype(float)
        out[table.id] = levels(span_us, float(d.sum()), float((table.queue_depth * d).sum()),
                               float((table.batch_size * d).sum()),
                               float((table.kv_used / kv_total * d).sum()) if kv_total
                               else None)
    return out


def levels(span_us: float, busy: float, queue: float, batch: float, kv: float | None
           ) -> dict[str, float]:
    """An instance's levels, each held for its steps' durations (the sums given, in µs),
    averaged over the whole run; `kv`: None without a KV pool."""
    def average(total: float) -> float:
        return total / span_us if span_us > 0 else 0.0

    return {"utilization": average(busy), "queue_depth_avg": average(queue),
            "batch_size_avg": average(batch),
            "kv_utilization_avg": 0.0 if kv is None else average(kv)}


@dataclass(frozen=True, slots=True)
class Totals:
    """Whole-run sums RawMetrics reports as rates."""

    arrived: int
    completed: int
    input_tokens: int  # of the completed requests
    generated_tokens: int
    preemptions: int


def raw_metrics(requests: Table, targets: list[SLOTargets | None],
                instances: Sequence[InstanceRecord], seconds: float, cache_hit_rate: float
                ) -> dict[str, Any]:
    good = meets(requests, targets)
    everyone = np.ones(len(requests), dtype=bool)
    done = np.asarray(requests["final_state"], dtype=object) == "completed"
    totals = Totals(len(requests), int(done.sum()),
                    int(requests.array("input_tokens")[done].sum()),
                    int(requests.array("generated_tokens").sum()),
                    int(requests.array("preemptions").sum()))
    return assemble(group_stats(requests, everyone, good, seconds), totals, seconds,
                    cache_hit_rate,
                    {cls: group_stats(requests, rows, good, seconds)
                     for cls, rows in groups(requests, "slo_class")},
                    {t: group_stats(requests, rows, good, seconds)
                     for t, rows in groups(requests, "tenant")},
                    time_weighted(instances, seconds))


def assemble(metrics: dict[str, Any], totals: Totals, seconds: float, cache_hit_rate: float,
             classes: dict[str, dict[str, Any]], tenants: dict[str, dict[str, Any]],
             per_instance: dict[str, dict[str, float]]) -> dict[str, Any]:
    """RawMetrics from the whole run's group entry (`metrics`), its totals, each SLO class's
    and tenant's entries (in order of their names) and each instance's levels."""
    arrived, completed = totals.arrived, totals.completed
    metrics.update({
        "duration_s": seconds,
        "input_tokens_per_s": float(totals.input_tokens) / seconds if seconds > 0 else 0.0,
        "output_tokens_per_s": float(totals.generated_tokens) / seconds
        if seconds > 0 else 0.0,
        "cache_hit_rate": cache_hit_rate,
        "preemption_rate": totals.preemptions / completed if completed else 0.0,
        "admission_rate": 1.0 - metrics["rejected"] / arrived if arrived else 0.0,
        "rejection_rate": metrics["rejected"] / arrived if arrived else 0.0,
    })
    metrics["per_slo_class"] = {cls or "default": entry for cls, entry in classes.items()}
    metrics["per_tenant"] = {t or "default": entry for t, entry in tenants.items()}
    metrics["jain_fairness"] = jain([entry["slo_attainment"] for entry in tenants.values()])
    metrics["instances"] = per_instance
    for key in ("utilization", "queue_depth_avg", "batch_size_avg", "kv_utilization_avg"):
        values = [v[key] for v in per_instance.values()]
        metrics[key] = sum(values) / len(values) if values else 0.0
    return metrics
