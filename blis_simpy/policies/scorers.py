"""The scorers of the `weighted` routing template and their weighted sum, compiled (setup.py):
a policy search evaluates them for every request of thousands of runs. The template itself
stays interpreted (policies/routing.py), so user policies can subclass it.

Each scorer maps the routable instances' snapshots to one score each, higher = better, in
[0, 1] for the shipped ones (a user's scorer is clamped to it when combined).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from blis_simpy.core.request import RequestView
from blis_simpy.core.shadow_kv import ShadowKV
from blis_simpy.core.snapshot import InstanceSnapshot

Scorer = Callable[[RequestView, Sequence[InstanceSnapshot], ShadowKV], list[float]]


def queue_depth_scores(req: RequestView, snaps: Sequence[InstanceSnapshot],
                       shadow: ShadowKV) -> list[float]:
    loads = [s.effective_load for s in snaps]
    low, high = min(loads), max(loads)
    if high == low:
        return [1.0] * len(loads)
    return [(high - load) / (high - low) for load in loads]


def kv_utilization_scores(req: RequestView, snaps: Sequence[InstanceSnapshot],
                          shadow: ShadowKV) -> list[float]:
    return [1.0 - s.kv_utilization for s in snaps]


def load_balance_scores(req: RequestView, snaps: Sequence[InstanceSnapshot],
                        shadow: ShadowKV) -> list[float]:
    return [1.0 / (1.0 + s.effective_load) for s in snaps]


def prefix_affinity_scores(req: RequestView, snaps: Sequence[InstanceSnapshot],
                           shadow: ShadowKV) -> list[float]:
    total = len(req.prefix_hashes)
    if total == 0:
        return [0.0] * len(snaps)
    return [shadow.expected_hit(s.id, req.prefix_hashes) / total for s in snaps]


SCORERS: dict[str, Scorer] = {
    "queue-depth": queue_depth_scores,
    "kv-utilization": kv_utilization_scores,
    "load-balance": load_balance_scores,
    "prefix-affinity": prefix_affinity_scores,
}


def combine(scorers: Sequence[tuple[str, Scorer, float]], req: RequestView,
            snaps: Sequence[InstanceSnapshot], shadow: ShadowKV
            ) -> tuple[list[float], dict[str, tuple[float, ...]]]:
    """The composite score of each instance, sum of weight x (score clamped to [0, 1]) over
    the scorers in order, and each scorer's weighted shares."""
    composite = [0.0] * len(snaps)
    breakdown: dict[str, tuple[float, ...]] = {}
    for name, scorer, weight in scorers:
        shares: list[float] = []
        for i, x in enumerate(scorer(req, snaps, shadow)):
            share = weight * (0.0 if x < 0 else 1.0 if x > 1 else x)
            shares.append(share)
            composite[i] += share
        breakdown[name] = tuple(shares)
    return composite, breakdown
