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


@dataclass(frozen=True, slots=True)
class GroupCounts:
    """How a group's measured requests (those that arrived within the window) ended and how
    many met their SLO targets, and what the group served within the window."""

    requests: int
    completed: int
    rejected: int
    timed_out: int
    served: int  # completed within the window, whenever they arrived
    targeted: int  # measured requests with an SLO target
    targeted_ended: int  # of those, completed, rejected or timed out
    targeted_good: int  # of those, completed within their targets
    any_targeted: int  # the group's requests with a target, measured or not
    good_served: int  # served within their targets (requests with targets)


@dataclass(frozen=True, slots=True)
class Columns:
    """What every group's statistics read, each column converted once for all the groups (a
    trace keyed by user id has thousands of tenants: a conversion per group made the metrics
    quadratic in the requests)."""

    arrived: np.ndarray  # measured: arrived within the window
    completed: np.ndarray  # completed within the window
    done: np.ndarray  # final state completed
    rejected: np.ndarray
    timed_out: np.ndarray
    good: np.ndarray
    judged: np.ndarray
    ttft: np.ndarray
    tpot: np.ndarray
    e2e: np.ndarray
    streams: np.ndarray  # more than one output token: a TPOT sample

    @classmethod
    def of(cls, requests: Table, good: np.ndarray, judged: np.ndarray, measured: Measured
           ) -> Columns:
        state = np.asarray(requests["final_state"], dtype=object)
        ttft, tpot, e2e = (requests.array(name).astype(float)
                           for name in ("ttft_ms", "itl_mean_ms", "e2e_ms"))
        return cls(np.asarray(measured.arrived, dtype=bool),
                   np.asarray(measured.completed, dtype=bool), state == "completed",
                   state == "rejected", state == "timed_out", np.asarray(good, dtype=bool),
                   np.asarray(judged, dtype=bool), ttft, tpot, e2e,
                   requests.array("output_tokens") > 1)


def group_stats(columns: Columns, group: np.ndarray, seconds: float) -> dict[str, Any]:
    """The statistics of the requests at the indices `group` (ascending) that arrived within
    the window; their rates count the group's completions within it. SLO attainment and
    goodput count only the requests with targets (`judged`), and are None without any."""
    c = columns
    rows = c.arrived[group]
    done = rows & c.done[group]
    ended = rows & (c.done[group] | c.rejected[group] | c.timed_out[group])
    served = c.completed[group]
    judged, good = c.judged[group], c.good[group]
    attained = ended & judged
    counts = GroupCounts(int(rows.sum()), int(done.sum()),
                         int((rows & c.rejected[group]).sum()),
                         int((rows & c.timed_out[group]).sum()), int(served.sum()),
                         int((rows & judged).sum()), int(attained.sum()),
                         int((good & attained).sum()), int(judged.sum()),
                         int((good & judged & served).sum()))
    return group_dict(counts, seconds, {
        **distribution("ttft", c.ttft[group][done]),
        **distribution("tpot", c.tpot[group][done & c.streams[group]]),
        **distribution("e2e", c.e2e[group][done])})


def group_dict(counts: GroupCounts, seconds: float, distributions: dict[str, float | None]
               ) -> dict[str, Any]:
    """A group's entry in RawMetrics: counts, rates, SLO attainment and goodput (None
    without targets: nothing to attain), then its TTFT, TPOT and E2E distributions."""
    def rate(count: int) -> float:
        return count / seconds if seconds > 0 else 0.0

    attainment = None
    if counts.targeted:
        attainment = counts.targeted_good / counts.targeted_ended if counts.targeted_ended \
            else 0.0
    return {
        "requests": counts.requests,
        "completed": counts.completed,
        "completion_rate": counts.completed / counts.requests if counts.requests else 0.0,
        "rejected": counts.rejected,
        "timed_out": counts.timed_out,
        "requests_per_s": rate(counts.served),
        "goodput_per_s": rate(counts.good_served) if counts.any_targeted else None,
        "slo_attainment": attainment,
        **distributions,
    }


def groups(requests: Table, column: str) -> list[tuple[str, np.ndarray]]:
    """(value, the ascending indices of its rows) for each value of a string column, in order
    of the value; one pass over the column, not one per value."""
    values = np.asarray(requests[column], dtype=object).tolist()
    keys = sorted(set(values), key=str)
    if len(keys) == 1:  # one value (no tenants, one class: most runs): every row, in order
        return [(keys[0], np.arange(len(values), dtype=np.int64))]
    position = {key: i for i, key in enumerate(keys)}
    codes = np.fromiter((position[v] for v in values), dtype=np.int64, count=len(values))
    order = np.argsort(codes, kind="stable")
    ends = np.cumsum(np.bincount(codes, minlength=len(keys)))
    return [(key, order[end - n:end]) for key, end, n in
            zip(keys, ends.tolist(), np.diff(ends, prepend=0).tolist(), strict=True)]


def time_weighted(instances: Sequence[InstanceRecord], start_us: int, seconds: float
                  ) -> dict[str, dict[str, float]]:
    """Per instance: busy fraction and time-averaged queue depth, batch size, KV use over the
    `seconds` from `start_us` (the whole run: from 0 to its end)."""
    span_us = seconds * US_PER_S
    out = {}
    for table in instances:
        kv_total = table.kv_total
        d = clipped(table.start, table.duration, start_us, span_us)
        out[table.id] = levels(span_us, float(d.sum()), float((table.queue_depth * d).sum()),
                               float((table.batch_size * d).sum()),
                               float((table.kv_used / kv_total * d).sum()) if kv_total
                               else None)
    return out


def clipped(start: np.ndarray, duration: np.ndarray, start_us: int, span_us: float
            ) -> np.ndarray:
    """Each step's time within the `span_us` from `start_us`: a step still running when the
    window ends (at a horizon, or at its end) counts up to its end only, and one that began
    before the window from the window's start."""
    d = (np.minimum(start + duration, start_us + span_us)
         - np.maximum(start, start_us)).astype(float)
    return np.maximum(d, 0.0) if start_us else d


def levels(span_us: float, busy: float, queue: float, batch: float, kv: float | None
           ) -> dict[str, float]:
    """An instance's levels, each held for its steps' durations (the sums given, in µs),
    averaged over the window; `kv`: None without a KV pool."""
    def average(total: float) -> float:
        return total / span_us if span_us > 0 else 0.0

    return {"utilization": average(busy), "queue_depth_avg": average(queue),
            "batch_size_avg": average(batch),
            "kv_utilization_avg": 0.0 if kv is None else average(kv)}


@dataclass(frozen=True, slots=True)
class Totals:
    """Sums RawMetrics reports as rates and shares."""

    arrived: int  # within the window
    completed: int  # of those
    input_tokens: int  # of the requests completed within the window
    output_tokens: float  # emitted within the window
    preemptions: int  # of the requests that arrived within the window


def raw_metrics(requests: Table, good: np.ndarray, judged: np.ndarray,
                instances: Sequence[InstanceRecord], measured: Measured, start_us: int,
                output_tokens: float, cache_hit_rate: float) -> dict[str, Any]:
    """RawMetrics over the measured requests (`measured`); `good` and `judged` are `meets`
    and `targeted` of their SLO targets (computed once by the caller, which reads them too);
    `output_tokens` are those emitted within the window that starts at `start_us`. Without
    any SLO target the attainment, goodput and fairness are null: there is nothing to
    attain."""
    done = (np.asarray(requests["final_state"], dtype=object) == "completed") & measured.arrived
    totals = Totals(int(measured.arrived.sum()), int(done.sum()),
                    int(requests.array("input_tokens")[measured.completed].sum()),
                    output_tokens,
                    int(requests.array("preemptions")[measured.arrived].sum()))
    columns, seconds = Columns.of(requests, good, judged, measured), measured.seconds
    return assemble(group_stats(columns, np.arange(len(requests)), seconds), totals,
                    measured.seconds, cache_hit_rate,
                    {cls: group_stats(columns, rows, seconds)
                     for cls, rows in groups(requests, "slo_class")},
                    {t: group_stats(columns, rows, seconds)
                     for t, rows in groups(requests, "tenant")},
                    time_weighted(instances, start_us, measured.seconds))


def assemble(metrics: dict[str, Any], totals: Totals, seconds: float, cache_hit_rate: float,
             classes: dict[str, dict[str, Any]], tenants: dict[str, dict[str, Any]],
             per_instance: dict[str, dict[str, float]]) -> dict[str, Any]:
    """RawMetrics from the whole run's group entry (`metrics`), its totals, each SLO class's
    and tenant's entries (in order of their names) and each instance's levels."""
    arrived, completed = totals.arrived, totals.completed
    metrics.update({
        "duration_s": seconds,
        "input_tokens_per_s": float(totals.input_tokens) / seconds if seconds > 0 else 0.0,
        "output_tokens_per_s": totals.output_tokens / seconds if seconds > 0 else 0.0,
        "cache_hit_rate": cache_hit_rate,
        "preemption_rate": totals.preemptions / completed if completed else 0.0,
        "admission_rate": 1.0 - metrics["rejected"] / arrived if arrived else 0.0,
        "rejection_rate": metrics["rejected"] / arrived if arrived else 0.0,
    })
    metrics["per_slo_class"] = {cls or "default": entry for cls, entry in classes.items()}
    metrics["per_tenant"] = {t or "default": entry for t, entry in tenants.items()}
    attained = [entry["slo_attainment"] for entry in tenants.values()
                if entry["slo_attainment"] is not None]
    metrics["jain_fairness"] = jain(attained) if attained else None
    metrics["instances"] = per_instance
    for key in ("utilization", "queue_depth_avg", "batch_size_avg", "kv_utilization_avg"):
        values = [v[key] for v in per_instance.values()]
        metrics[key] = sum(values) / len(values) if values else 0.0
    return metrics
