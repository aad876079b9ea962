"""The search library: one scenario per policy axis on which the choice of policy matters,
with the seeds a search trains on and the seeds its winner is judged on.

Each `search-<axis>` scenario (blis_simpy/scenarios/) sets no fitness weights, so it is scored
by the default score: relative to its own policies, the baseline, on the same seeds
(`blis_simpy.metrics.fitness`). `templates` are the built-in templates of its axis as a search
would start from them (flat candidates; parameters where a template needs them); on the
held-out seeds the best of them beats the worst by at least 20 % on that score
(tests/search/test_library.py). `pathological` names the anomaly each pathological template
raises there (seed F.3). Train on `train_seeds`, choose on them, and report on
`held_out_seeds`: a policy tuned on a few seeds can fit their particular requests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class SearchScenario:
    name: str  # the library scenario
    axis: str  # the bundle axis it separates
    templates: dict[str, dict[str, Any]]  # template name -> flat candidate
    pathological: dict[str, str] = field(default_factory=dict)  # template -> anomaly kind
    train_seeds: tuple[int, ...] = (1, 2, 3)
    held_out_seeds: tuple[int, ...] = (101, 102, 103, 104, 105)


CLASS_SCORES = {"realtime": 10, "interactive": 5, "batch": 0}

SEARCH_LIBRARY: dict[str, SearchScenario] = {s.name: s for s in (
    SearchScenario("search-admission", "admission", {
        "always-admit": {"admission.type": "always-admit"},
        # about what the two replicas serve within their SLO targets (~80 requests/s; the
        # mix's mean prompt is ~1,160 tokens)
        "token-bucket": {"admission.type": "token-bucket", "admission.capacity": 90000,
                         "admission.refill_per_s": 90000},
        "rate-limit": {"admission.type": "rate-limit", "admission.max_requests": 80},
        # each tenant's active requests capped in proportion to its share of the load;
        # capping the batch tenant alone (batch-quota) serves it a fraction of its work,
        # which the default score's evenness factor prices
        "tenant-quota": {"admission.type": "tenant-quota",
                         "admission.quotas": {"chat": 200, "batch": 100}},
        "batch-quota": {"admission.type": "tenant-quota", "admission.quotas": {"batch": 8}},
        "reject-all": {"admission.type": "reject-all"},
    }, {"reject-all": "rejection_burst"}),
    SearchScenario("search-priority", "priority", {
        "constant": {"priority.type": "constant"},
        "slo-based": {"priority.type": "slo-based", "priority.class_scores": CLASS_SCORES},
        "deadline-aware": {"priority.type": "deadline-aware", "priority.deadlines_s": {
            "realtime": 0.15, "interactive": 0.5, "batch": 10}},
        "tenant-priority": {"priority.type": "tenant-priority",
                            "priority.tenants": {"voice": 10, "chat": 5}},
        "inverted-slo": {"priority.type": "inverted-slo",
                         "priority.class_scores": CLASS_SCORES},
    }, {"inverted-slo": "slo_class_inversion"}),
    SearchScenario("search-routing", "routing", {
        "round-robin": {"routing.type": "round-robin"},
        "least-loaded": {"routing.type": "least-loaded"},
        "prefix-affinity": {"routing.type": "prefix-affinity"},
        "weighted": {"routing.type": "weighted"},
        "always-busiest": {"routing.type": "always-busiest"},
    }, {"always-busiest": "load_imbalance"}),
    SearchScenario("search-scheduler", "scheduler", {
        "fcfs": {"scheduler.type": "fcfs"},
        "sjf": {"scheduler.type": "sjf"},
        "priority-fcfs": {"scheduler.type": "priority-fcfs"},
        "reverse-priority": {"scheduler.type": "reverse-priority"},
    }, {"reverse-priority": "priority_inversion"}),
    SearchScenario("search-autoscale", "autoscale", {
        "threshold": {"autoscale.type": "threshold"},
        "target-utilization": {"autoscale.type": "target-utilization"},
        "queue-depth": {"autoscale.type": "queue-depth"},
        "kv-demand": {"autoscale.type": "kv-demand"},
        "oscillator": {"autoscale.type": "oscillator"},
    }, {"oscillator": "scale_oscillation"}),
    SearchScenario("search-pd", "pd", {
        "always": {"pd.type": "always"},
        "never": {"pd.type": "never"},
        "prefix-threshold": {"pd.type": "prefix-threshold", "pd.threshold": 1024},
    }),
    SearchScenario("search-kv-tiers", "kv_tiers", {
        "mirror": {"kv_tiers.type": "mirror"},
        "mirror-fifo": {"kv_tiers.type": "mirror", "kv_tiers.eviction": "fifo"},
        "threshold-0.5": {"kv_tiers.type": "threshold", "kv_tiers.threshold": 0.5},
        "threshold-0.9-fifo": {"kv_tiers.type": "threshold", "kv_tiers.eviction": "fifo"},
        "threshold-1.0-fifo": {"kv_tiers.type": "threshold", "kv_tiers.threshold": 1.0,
                               "kv_tiers.eviction": "fifo"},
    }),
)}


def separation(name: str, seeds: tuple[int, ...] | None = None,
               templates: tuple[str, ...] | None = None, workers: int | None = None
               ) -> pd.DataFrame:
    """Mean default score, latencies and the pathological anomalies of a library scenario's
    templates (or those named) over `seeds` (default: its held-out seeds), best first."""
    from blis_simpy.search.sweep import run_many

    entry = SEARCH_LIBRARY[name]
    chosen = {t: c for t, c in entry.templates.items() if templates is None or t in templates}
    table = run_many(name, chosen, entry.held_out_seeds if seeds is None else seeds,
                     workers=workers)
    columns = ["fitness", "completion", "ttft_mean_ms", "ttft_p99_ms", "e2e_mean_ms",
               "slo_attainment", *sorted({f"anomaly.{kind}" for kind in
                                          entry.pathological.values()} & set(table.columns))]
    means = table.groupby("policy", sort=False)[columns].mean()
    return means.sort_values("fitness", ascending=False)
