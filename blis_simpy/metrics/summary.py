"""The run summary: the reference's field names and statistics, plus our own counters.

Statistics follow the reference exactly (engine.md §5): values in integer µs, sorted ascending;
mean = sum / n / 1000; percentile p by linear interpolation at rank p/100*(n-1), evaluated in the
reference's operation order so compat mode reproduces its numbers to the last bit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

PERCENTILES = (90, 95, 99)


def mean_ms(values: Sequence[int]) -> float:
    return sum(values) / len(values) / 1000 if len(values) else 0.0


def percentile_ms(ordered: Sequence[int], p: float) -> float:
    """Percentile of ascending µs values, in ms; 0 for no values."""
    n = len(ordered)
    if n == 0:
        return 0.0
    rank = p / 100 * (n - 1)
    lo, hi = math.floor(rank), math.ceil(rank)
    if lo == hi:
        return ordered[lo] / 1000
    return ordered[lo] / 1000 + (ordered[hi] - ordered[lo]) * (rank - lo) / 1000


def distribution(name: str, values: np.ndarray) -> dict[str, float]:
    """`<name>_mean_ms` and `<name>_p90/95/99_ms` of µs values."""
    ordered = np.sort(np.asarray(values, dtype=np.int64)).tolist()
    out = {f"{name}_mean_ms": mean_ms(ordered)}
    for p in PERCENTILES:
        out[f"{name}_p{p}_ms"] = percentile_ms(ordered, p)
    return out


def rate(count: int, seconds: float) -> float:
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
    e2e: np.ndarray,
    ttft: np.ndarray,
    itl: np.ndarray,
    scheduling_delay: np.ndarray,
    preemptions: int,
) -> dict[str, Any]:
    """The reference's summary object, fields in its order."""
    seconds = duration_us / 1e6
    out: dict[str, Any] = {
        "instance_id": instance_id,
        "completed_requests": completed,
        "still_queued": still_queued,
        "still_running": still_running,
        "injected_requests": injected,
        "total_input_tokens": input_tokens,
        "total_output_tokens": output_tokens,
        "vllm_estimated_duration_s": seconds,
        "responses_per_sec": rate(completed, seconds),
        "tokens_per_sec": rate(output_tokens, seconds),
    }
    out.update(distribution("e2e", e2e))
    out.update(distribution("ttft", ttft))
    out.update(distribution("itl", itl))
    ordered = np.sort(np.asarray(scheduling_delay, dtype=np.int64)).tolist()
    out["scheduling_delay_p99_ms"] = percentile_ms(ordered, 99)
    out["preemption_count"] = preemptions
    return out
