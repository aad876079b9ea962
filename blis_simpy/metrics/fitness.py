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

from blis_simpy.metrics.raw import percentile


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
    # The default score's measures over every request that arrived in the window (`arrivals`,
    # below): None where not computed (a streamed run: the completed requests' stand in). Not
    # written to evaluation.json either.
    arrivals: dict[str, float | None] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_file_dict(self) -> dict[str, Any]:
        """Without the wall time: files must be byte-identical across runs of one scenario."""
        data = asdict(self)
        del data["wall_s"], data["tenant_completion"], data["arrivals"]
        return data


# ---------------------------------------------------------------- the default: relative score
#
# Without weights a sweep scores every candidate against a baseline, the scenario's own
# policies run on the same seed (common random numbers: the same requests), term by term:
#
#     fitness = evenness x sustained x quality x clip(cost ratio)   (cost: where priced)
#     quality = exp(mean over the latency terms of clip(ln ratio)), and with SLO targets
#               exp((that mean + clip(ln SLO attainment ratio)) / 2)
#
# where a term's ratio is baseline / candidate for a latency or cost (lower is better) and
# candidate / baseline for a rate or share (higher is better), so above 1 means better.
#
# Every term describes every request that arrived in the window, served or not
# (`arrivals`, below): a request the candidate did not serve (rejected, timed out, or still
# waiting when the run ended) is charged the time from its arrival to the run's end as its
# latency, the wait it was still in when the run stopped (a request left queued to the end
# is charged the same, so turning a request away is never cheaper than making it wait for
# ever), and it counts as an SLO miss. So shedding load pays only when what the served
# requests gain outweighs what the unserved ones are charged: a load the replicas can never
# carry, not a burst that admitting everything rides out late but served. (Before, the
# latency terms described the completed requests only: on search-admission's spike version
# a load-blind dropper rejecting a random third scored 1.36, above every template.)
#
# The latency terms: TTFT and E2E mean and p99 (over every arrival) and output tokens/s.
# Where the scenario sets SLO targets they are half the quality and SLO attainment (the
# arrivals served within their targets over the arrivals with targets) the other half.
# Where an autoscaler can change the cost and replicas have a price, the quality is the
# SLO attainment alone (the latency terms without targets: the SLO states what latency is
# worth paying for) and the cost ratio multiplies it, quality per dollar, so an autoscaler
# that triples the spend for latency the SLO does not value cannot win (always at the
# maximum replicas scored 2.7 on search-autoscale, above every autoscaler, when cost was
# one term of eight).
#
# `evenness` (below) is the worst-served tenant's completed share of its offered work
# (prompt + output tokens: `tenant_completion`) over every tenant's together: starving a
# tenant scores 0, and rejecting the long prompts costs the work they carry; shedding
# evenly is charged by the terms, not twice. The baseline scores its own evenness (1.0 when
# its tenants are served alike); 10 % lower latencies on every latency term score
# (1/0.9)^(4/5) = 1.088 without SLO targets, (1/0.9)^(2/5) = 1.043 with them; a run that
# completes nothing scores 0, and so does one with no request in the measurement window
# (nothing was measured). A log ratio is clipped to +-ln(10) so one term cannot outweigh
# the others; a term the baseline has no value for is left out, and every term but cost
# when the baseline completed nothing in the window (then only the work served is
# compared: the factor is the worst-served tenant's share of it). `sustained` scales a
# saturated candidate down as it does a weighted fitness (module docstring; 0 for one that
# sustained nothing); a baseline that saturates makes every ratio easier to beat, not the
# candidate's own factor. A streamed run keeps no per-request records: its terms fall back
# to the completed requests' figures (`Term.fallback`).

Better = Literal["lower", "higher"]
CLIP = math.log(10.0)


@dataclass(frozen=True, slots=True)
class Term:
    name: str
    column: str  # the metric (a column of a sweep's rows: `arrivals.*`, a RawMetrics key)
    better: Better
    fallback: str | None = None  # the column read where a row lacks `column`


LATENCY_TERMS = (
    Term("ttft_mean", "arrivals.ttft_mean_ms", "lower", "ttft_mean_ms"),
    Term("ttft_p99", "arrivals.ttft_p99_ms", "lower", "ttft_p99_ms"),
    Term("e2e_mean", "arrivals.e2e_mean_ms", "lower", "e2e_mean_ms"),
    Term("e2e_p99", "arrivals.e2e_p99_ms", "lower", "e2e_p99_ms"),
    Term("throughput", "output_tokens_per_s", "higher"))
SLO_TERMS = (Term("slo_attainment", "arrivals.slo_attainment", "higher", "slo_attainment"),)
COST_TERMS = (Term("cost", "cost", "lower"),)
PRICED = frozenset(term.name for term in COST_TERMS)  # multiply the quality, not in its mean
SLO_NAMES = frozenset(term.name for term in SLO_TERMS)  # half the quality


def number(value: Any) -> float | None:
    """A finite number, or None (missing, null, NaN)."""
    if value is None or isinstance(value, bool | str):
        return None
    x = float(value)
    return x if math.isfinite(x) else None


def value(row: Mapping[str, Any], term: Term) -> float | None:
    """The term's figure in a row: its column, else its fallback where the row lacks it."""
    if term.column in row or term.fallback is None:
        return number(row.get(term.column))
    return number(row.get(term.fallback))


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


def arrivals(ttft_ms: np.ndarray, e2e_ms: np.ndarray, arrival_s: np.ndarray,
             completed: np.ndarray, good: np.ndarray, judged: np.ndarray,
             arrived: np.ndarray, ended_s: float) -> dict[str, float | None]:
    """The default score's measures over every request that `arrived` within the window: the
    TTFT and E2E means and 99th percentiles, a request not `completed` charged the time from
    its arrival to the run's end (`ended_s`) as its E2E, and as its TTFT unless it had a first
    token; and the SLO attainment, the `good` (completed within their targets) among the
    `judged` (with a target) over those judged (None without any). Nothing arrived: None."""
    if not arrived.any():
        return {"ttft_mean_ms": None, "ttft_p99_ms": None, "e2e_mean_ms": None,
                "e2e_p99_ms": None, "slo_attainment": None}
    done = completed[arrived]
    waited = np.maximum(ended_s - arrival_s[arrived].astype(float), 0.0) * 1000.0
    first = ttft_ms[arrived].astype(float)
    ttft = np.where(np.isfinite(first), first, waited)
    e2e = np.where(done, e2e_ms[arrived].astype(float), waited)
    measured = judged[arrived]
    return {"ttft_mean_ms": float(ttft.mean()), "ttft_p99_ms": percentile(ttft, 99),
            "e2e_mean_ms": float(e2e.mean()), "e2e_p99_ms": percentile(e2e, 99),
            "slo_attainment": float((good[arrived] & measured).sum() / measured.sum())
            if measured.any() else None}


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


def work_completion(work: np.ndarray, arrived: np.ndarray, done: np.ndarray) -> float:
    """The completed share of the offered work (tokens) of every request that arrived (within
    the window); 1.0 when none was offered."""
    offered = float(work[arrived].sum())
    return float(work[arrived & done].sum()) / offered if offered > 0 else 1.0


def evenness(row: Mapping[str, Any]) -> float:
    """The default score's factor for how evenly the work served was spread over the tenants:
    the worst-served tenant's completed share of its work (`tenant_completion`) over every
    tenant's together (`arrivals.work_completion`), so 0 when a tenant was starved or nothing
    completed, and 1 when each was served alike (with one tenant, when anything completed). A
    row without them (a streamed run): 1 when anything completed, else 0."""
    worst = number(row.get("tenant_completion"))
    overall = number(row.get("arrivals.work_completion"))
    if worst is None or overall is None:
        return 1.0 if number(row.get("completion_rate", row.get("completion"))) else 0.0
    return min(1.0, worst / overall) if overall > 0 else 0.0


@dataclass(frozen=True)
class RelativeScore:
    fitness: float
    ratios: dict[str, float]  # term -> oriented ratio (> 1: better than the baseline)


def relative_score(candidate: Mapping[str, Any], baseline: Mapping[str, Any],
                   terms: Sequence[Term]) -> RelativeScore:
    """The candidate's fitness against the baseline's metrics (the rule above). Both are
    mappings of metric name -> value: RawMetrics, or a sweep's rows (whose `requests` and
    `completed` count the window's arrivals and completions, and `arrivals.*` the measures
    over every arrival)."""
    if number(candidate.get("requests")) == 0:  # nothing arrived in the window
        return RelativeScore(0.0, {})
    vacuous = number(baseline.get("completed")) == 0
    logs: dict[str, float] = {}
    for term in terms:
        base = value(baseline, term)
        if base is not None and not (vacuous and term not in COST_TERMS):
            logs[term.name] = log_ratio(value(candidate, term), base, term.better)
    if vacuous:  # nothing to compare but the work served (the worst-served tenant's share)
        served = number(candidate.get("tenant_completion"))
        if served is None:
            served = number(candidate.get("completion_rate", candidate.get("completion")))
        factor = served or 0.0
    else:
        factor = evenness(candidate)
    carried = number(candidate.get("sustained"))
    return RelativeScore(factor * (1.0 if carried is None else carried) * math.exp(quality(logs)),
                         {name: math.exp(v) for name, v in logs.items()})


def quality(logs: Mapping[str, float]) -> float:
    """ln of the quality, times the cost ratio where there is one: the mean of the latency
    and throughput terms' logs; with SLO attainment, half that and half the attainment's."""
    rest = [v for name, v in logs.items() if name not in PRICED and name not in SLO_NAMES]
    slo = [v for name, v in logs.items() if name in SLO_NAMES]
    mean = sum(rest) / len(rest) if rest else 0.0
    if slo:
        mean = (mean + slo[0]) / 2 if rest else slo[0]
    return mean + sum(v for name, v in logs.items() if name in PRICED)
