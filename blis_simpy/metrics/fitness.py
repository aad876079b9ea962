"""Fitness: a weighted sum of normalised metrics, for policy search (GEPA, OpenEvolve).

Every key maps a raw metric to [0, 1], higher is better, so weights compose. The weighted sum
is sum(weight * normalised) (weights are not renormalised, as in the reference); the vector of
normalised values is reported too, for multi-objective search.

The fitness is that sum times the completion rate (completed / arrived requests). A search
maximises this number, and latency statistics describe only the requests that completed: a
policy that rejects or strands most requests would otherwise look fast. So a run that
completes nothing scores 0, the bottom, and every request that does not complete (rejected,
still queued or running at the horizon) costs its share of the score. A latency key without
samples normalises to 0, never to a perfect 1.

A saturated run (metrics/saturation.py: the wait queue grew all along) completes everything
it was offered only because a finite workload drains in the end; its fitness is further
scaled by `sustained` = the sustainable rate / the offered rate, the share of the offered load
it could carry for good (1 for a run that keeps up).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any


def latency(ms: float) -> float:
    """1 / (1 + latency in ms): the reference's normalisation of a latency."""
    return 1.0 / (1.0 + ms)


def saturating(scale: float) -> Callable[[float], float]:
    return lambda x: x / (x + scale)


# key -> (raw metric in RawMetrics, normalisation, description for the docs)
KEYS: dict[str, tuple[str, Callable[[float], float], str]] = {
    "throughput": ("requests_per_s", saturating(100.0), "rps / (rps + 100)"),
    "tokens_per_sec": ("output_tokens_per_s", saturating(10_000.0), "tps / (tps + 10000)"),
    "goodput": ("goodput_per_s", saturating(100.0), "good req/s / (that + 100)"),
    "p99_ttft": ("ttft_p99_ms", latency, "1 / (1 + ms)"),
    "p50_ttft": ("ttft_p50_ms", latency, "1 / (1 + ms)"),
    "mean_ttft": ("ttft_mean_ms", latency, "1 / (1 + ms)"),
    "p99_e2e": ("e2e_p99_ms", latency, "1 / (1 + ms)"),
    "p50_e2e": ("e2e_p50_ms", latency, "1 / (1 + ms)"),
    "mean_e2e": ("e2e_mean_ms", latency, "1 / (1 + ms)"),
    "p99_tpot": ("tpot_p99_ms", latency, "1 / (1 + ms)"),
    "mean_tpot": ("tpot_mean_ms", latency, "1 / (1 + ms)"),
    "slo_attainment": ("slo_attainment", float, "fraction of requests meeting their SLO"),
    "fairness": ("jain_fairness", float, "Jain index over tenants"),
    "cache_hit_rate": ("cache_hit_rate", float, "prefix-cache hit rate"),
    "rejection_rate": ("rejection_rate", lambda r: 1.0 - r, "1 - rejected / arrived"),
    "preemption_rate": ("preemption_rate", lambda r: 1.0 / (1.0 + r),
                        "1 / (1 + preemptions per completed request)"),
}


def objectives(metrics: Mapping[str, Any], weights: Mapping[str, float]) -> dict[str, float]:
    """Normalised value of every weighted key."""
    out = {}
    for key in weights:
        raw, normalise, _ = KEYS[key]
        value = metrics[raw]
        out[key] = 0.0 if value is None else normalise(float(value))
    return out


def sustained(saturation: Mapping[str, Any]) -> float:
    """The share of the offered load a saturated run could carry for good; 1 otherwise."""
    best = saturation.get("max_sustainable_rate_per_s")
    if saturation.get("verdict") != "saturated" or not best:
        return 1.0
    return min(1.0, best / saturation["offered_rate_per_s"])


def score(values: Mapping[str, float], weights: Mapping[str, float], completion: float
          ) -> float:
    """The fitness: the weighted sum scaled by the completion rate (module docstring)."""
    return completion * sum(weights[k] * values[k] for k in weights)


@dataclass(frozen=True)
class EvaluationResult:
    """One evaluation of a (policy, workload) pair, as a search framework consumes it."""

    fitness: float
    completion: float  # completed / arrived: the factor the weighted sum was scaled by
    sustained: float  # sustainable / offered rate when saturated, else 1: the other factor
    objectives: dict[str, float]
    weights: dict[str, float]
    metrics: dict[str, Any]
    summary: dict[str, Any]
    policy_id: str
    workload_id: str
    simulated_s: float
    wall_s: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_file_dict(self) -> dict[str, Any]:
        """Without the wall time: files must be byte-identical across runs of one scenario."""
        data = asdict(self)
        del data["wall_s"]
        return data
