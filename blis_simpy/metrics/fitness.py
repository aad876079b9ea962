"""Fitness for policy search (GEPA, OpenEvolve): a weighted sum of normalised metrics when the
scenario gives weights, else a score relative to a baseline (`relative_score`, below).

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

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np


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
    if saturation.get("verdict") != "saturated" or best is None:
        return 1.0
    return min(1.0, best / saturation["offered_rate_per_s"])  # 0 when it sustained nothing


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
    # The default score's completion factor (`tenant_completion`); None where it was not
    # computed (a streamed run: the completion stands in). Not written to evaluation.json,
    # whose fitness is the weighted one.
    tenant_completion: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_file_dict(self) -> dict[str, Any]:
        """Without the wall time: files must be byte-identical across runs of one scenario."""
        data = asdict(self)
        del data["wall_s"], data["tenant_completion"]
        return data


# ---------------------------------------------------------------- the default: relative score
#
# Without weights a sweep scores every candidate against a baseline, the scenario's own
# policies run on the same seed (common random numbers: the same requests), term by term:
#
#     fitness = served x sustained x exp(mean over terms of clip(ln ratio))
#
# where a term's ratio is baseline / candidate for a latency or cost (lower is better) and
# candidate / baseline for a rate or share (higher is better), so above 1 means better.
# `served` (`tenant_completion`, below) is the worst-served tenant's share of its offered
# work (prompt + output tokens) that completed: shedding a request costs what it weighs, so
# a candidate cannot buy the latency terms' clip by starving a tenant (its factor is 0) or by
# rejecting the long prompts (which carry more than their number's share of the work); with
# one tenant and requests of one size it is the completion rate. The latency terms describe
# only the requests that completed, so shedding load, which makes what is left faster, can
# pay: on an overloaded scenario it does by SLO goodput too (search-admission: a third
# rejected at random, goodput 32.6/s against the baseline's 25.2/s), and a row's feedback
# says how many more requests a candidate left undone than the baseline. The baseline itself
# scores its own factor (1.0 when every request completes); 10 % lower latencies on every
# latency term score about 1.09; a run that completes nothing scores 0, and so does one with
# no request in the measurement window (nothing was measured). A log ratio is clipped to
# +-ln(10) so one term cannot outweigh the others; a term the baseline has no value for is
# left out, and every term but cost when the baseline completed nothing in the window (its
# latencies are then the summary's zeros, not measurements). `sustained` scales a saturated
# candidate down as it does a weighted fitness (module docstring; 0 for one that sustained
# nothing); a baseline that saturates makes every ratio easier to beat, not the candidate's
# own factor.

Better = Literal["lower", "higher"]
CLIP = math.log(10.0)


@dataclass(frozen=True, slots=True)
class Term:
    name: str
    column: str  # the metric (a RawMetrics / summary key, a column of a sweep's rows)
    better: Better


LATENCY_TERMS = (Term("ttft_mean", "ttft_mean_ms", "lower"),
                 Term("ttft_p99", "ttft_p99_ms", "lower"),
                 Term("e2e_mean", "e2e_mean_ms", "lower"),
                 Term("e2e_p99", "e2e_p99_ms", "lower"),
                 Term("throughput", "output_tokens_per_s", "higher"))
SLO_TERMS = (Term("slo_attainment", "slo_attainment", "higher"),
             Term("goodput", "goodput_per_s", "higher"))
COST_TERMS = (Term("cost", "cost", "lower"),)


def number(value: Any) -> float | None:
    """A finite number, or None (missing, null, NaN)."""
    if value is None or isinstance(value, bool | str):
        return None
    x = float(value)
    return x if math.isfinite(x) else None


def log_ratio(candidate: float | None, baseline: float, better: Better) -> float:
    """ln of the oriented ratio (> 0: the candidate is better), clipped to +-CLIP; a
    candidate without a value is the worst."""
    if candidate is None:
        return -CLIP
    good, bad = (baseline, candidate) if better == "lower" else (candidate, baseline)
    if bad <= 0:
        return CLIP if good > 0 else 0.0
    if good <= 0:
        return -CLIP
    return max(-CLIP, min(CLIP, math.log(good / bad)))


def tenant_completion(tenant: Sequence[str], work: np.ndarray, arrived: np.ndarray,
                      done: np.ndarray) -> float:
    """The worst-served tenant's completed share of its offered work: over the requests that
    arrived (within the window), per tenant, the `work` (tokens) of those `done` over the work
    of all; the minimum over the tenants that sent any (1.0 when none did: nothing was
    offered, and the completion rate says the rest)."""
    names = np.asarray(tenant, dtype=object)[arrived].astype(str)
    if not len(names):
        return 1.0
    _, codes = np.unique(names, return_inverse=True)  # one pass, not one per tenant
    work = work[arrived].astype(float)
    offered = np.bincount(codes, weights=work)
    served = np.bincount(codes, weights=np.where(done[arrived], work, 0.0))
    sent = offered > 0
    return min(1.0, float((served[sent] / offered[sent]).min())) if sent.any() else 1.0


@dataclass(frozen=True)
class RelativeScore:
    fitness: float
    ratios: dict[str, float]  # term -> oriented ratio (> 1: better than the baseline)


def relative_score(candidate: Mapping[str, Any], baseline: Mapping[str, Any],
                   terms: Sequence[Term]) -> RelativeScore:
    """The candidate's fitness against the baseline's metrics (the rule above). Both are
    mappings of metric name -> value: RawMetrics, or a sweep's rows (whose `requests` and
    `completed` count the window's arrivals and completions)."""
    if number(candidate.get("requests")) == 0:  # nothing arrived in the window
        return RelativeScore(0.0, {})
    vacuous = number(baseline.get("completed")) == 0
    logs: dict[str, float] = {}
    for term in terms:
        base = number(baseline.get(term.column))
        if base is not None and not (vacuous and term not in COST_TERMS):
            logs[term.name] = log_ratio(number(candidate.get(term.column)), base, term.better)
    served = number(candidate.get("tenant_completion"))
    if served is None:
        served = number(candidate.get("completion_rate", candidate.get("completion"))) or 0.0
    carried = number(candidate.get("sustained"))
    mean = sum(logs.values()) / len(logs) if logs else 0.0
    return RelativeScore(served * (1.0 if carried is None else carried) * math.exp(mean),
                         {name: math.exp(value) for name, value in logs.items()})
