"""The run summary: the reference's field names and statistics, plus our own counters.

Statistics follow the reference exactly (engine.md §5): values in integer µs, sorted ascending;
mean = sum / n / 1000; percentile p by linear interpolation at rank p/100*(n-1), evaluated in the
reference's operation order so compat mode reproduces its numbers to the last bit.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from blis_simpy.core.units import US_PER_MS, US_PER_S

PERCENTILES = (50, 90, 95, 99)
LATENCIES = ("e2e", "ttft", "itl")
# What the reference prints for a run, in its order; the summary adds p50s and counts of its
# own, which compat/results.py leaves out of the reference's files.
REFERENCE_KEYS = frozenset((
    "instance_id", "completed_requests", "still_queued", "still_running", "injected_requests",
    "total_input_tokens", "total_output_tokens", "vllm_estimated_duration_s",
    "responses_per_sec", "tokens_per_sec",
    *(f"{name}_{stat}_ms" for name in LATENCIES for stat in ("mean", "p90", "p95", "p99")),
    "scheduling_delay_p99_ms", "kv_allocation_failures", "preemption_count",
))


class Samples:
    """A multiset of µs values, optionally with multiplicities: inter-token gaps are step
    durations times the tokens that followed a token in that step, never one value per
    token. Order statistics come from cumulative weights, so no token-sized array is built."""

    def __init__(self, values: np.ndarray, weights: np.ndarray | None = None) -> None:
        values = np.asarray(values, dtype=np.int64)
        if weights is None:
            self.sorted = np.sort(values)
            self.cumulative = None
            self.count = len(values)
            self.total: float = int(self.sorted.sum())
            return
        weights = np.asarray(weights, dtype=np.int64)
        keep = weights > 0
        values, weights = values[keep], weights[keep]
        order = np.argsort(values, kind="stable")
        self.sorted = values[order]
        self.cumulative = np.cumsum(weights[order])
        self.count = int(self.cumulative[-1]) if len(values) else 0
        self.total = int((values * weights).sum())

    def at(self, k: int) -> int:
        """The k-th smallest value (0-based)."""
        if self.cumulative is None:
            return int(self.sorted[k])
        return int(self.sorted[np.searchsorted(self.cumulative, k, side="right")])

    def mean_ms(self) -> float:
        # The reference sums the sorted values as float64; they are integers whose sum stays
        # below 2^53, so that sum is exact and equals this integer sum.
        return self.total / self.count / US_PER_MS if self.count else 0.0

    def percentile_ms(self, p: float) -> float:
        """Linear interpolation at rank p/100*(n-1), in the reference's operation order."""
        n = self.count
        if n == 0:
            return 0.0
        rank = p / 100 * (n - 1)
        lo, hi = ranks(n, p)
        low = self.at(lo)
        if lo == hi:
            return low / US_PER_MS
        return low / US_PER_MS + (self.at(hi) - low) * (rank - lo) / US_PER_MS


class Selected(Samples):
    """Samples known by their count, their sum and the few order statistics a summary reads
    (`ranks`): a streaming run's, whose values are not kept (metrics/order_stats.py)."""

    def __init__(self, count: int, total: int, values: dict[int, int]) -> None:
        self.count, self.total, self.values = count, total, values

    def at(self, k: int) -> int:
        return self.values[k]


def ranks(n: int, p: float) -> tuple[int, int]:
    """The order statistics (0-based) percentile p of n samples interpolates between."""
    rank = p / 100 * (n - 1)
    return math.floor(rank), math.ceil(rank)


def distribution(name: str, samples: Samples) -> dict[str, float]:
    """`<name>_mean_ms` and `<name>_p50/90/95/99_ms`."""
    out = {f"{name}_mean_ms": samples.mean_ms()}
    for p in PERCENTILES:
        out[f"{name}_p{p}_ms"] = samples.percentile_ms(p)
    return out


def rate(count: float, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0


def summary_fields(
    *,
    instance_id: str,
    completed: int,
    still_queued: int,
    still_running: int,
    injected: int,
    input_tokens: int,
    output_tokens: int,
    duration_us: int,
    e2e: Samples,
    ttft: Samples,
    itl: Samples,
    scheduling_delay: Samples,
    preemptions: int,
    kv_allocation_failures: int = 0,
    served: int | None = None,
    served_tokens: float | None = None,
) -> dict[str, Any]:
    """The reference's summary object, fields in its order (`kv_allocation_failures` only
    when non-zero, as the reference omits it), with a p50 next to every p90. The rates count
    `served` completions and `served_tokens` output tokens (a measurement window's: what
    happened within it), by default the completed requests and their tokens."""
    seconds = duration_us / US_PER_S
    out: dict[str, Any] = {
        "instance_id": instance_id,
        "completed_requests": completed,
        "still_queued": still_queued,
        "still_running": still_running,
        "injected_requests": injected,
        "total_input_tokens": input_tokens,
        "total_output_tokens": output_tokens,
        "vllm_estimated_duration_s": seconds,
        "responses_per_sec": rate(completed if served is None else served, seconds),
        "tokens_per_sec": rate(output_tokens if served_tokens is None else served_tokens,
                               seconds),
    }
    out.update(distribution("e2e", e2e))
    out.update(distribution("ttft", ttft))
    out.update(distribution("itl", itl))
    out["scheduling_delay_p99_ms"] = scheduling_delay.percentile_ms(99)
    if kv_allocation_failures:
        out["kv_allocation_failures"] = kv_allocation_failures
    out["preemption_count"] = preemptions
    return out
