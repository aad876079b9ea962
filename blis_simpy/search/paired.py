"""Paired comparison of policies over seeds (common random numbers).

In a sweep every policy sees the same workload for a given seed, so the difference between two
policies is measured seed by seed and the seed-to-seed spread of the workload cancels out: the
confidence interval is Student's t over the per-seed differences, much narrower than comparing
two independent means.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from blis_simpy.core.arguments import instance
from blis_simpy.core.errors import ScenarioError

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_METRICS = ("fitness", "ttft_mean_ms", "ttft_p99_ms", "e2e_mean_ms", "e2e_p99_ms",
                   "tokens_per_sec", "cache_hit_rate", "preemption_count")


def compare_policies(table: pd.DataFrame, baseline: str,
                     metrics: Sequence[str] = DEFAULT_METRICS, confidence: float = 0.95
                     ) -> pd.DataFrame:
    """Per scenario, policy (other than `baseline`) and metric: the mean over seeds of
    (policy - baseline), its `confidence` interval, and the number of paired seeds. A seed
    missing for one of the two is left out of that pair."""
    import pandas as pd

    instance("table", table, pd.DataFrame, "a DataFrame from run_many")
    if not {"scenario", "policy", "seed"} <= set(table.columns):
        raise ScenarioError("table", "has no scenario, policy and seed columns",
                            "a DataFrame from run_many")
    if baseline not in set(table["policy"]):
        raise ScenarioError("baseline", f"no policy named {baseline!r} in the table",
                            ", ".join(sorted(set(table["policy"]))))
    missing = [m for m in metrics if m not in table.columns]
    if missing:
        raise ScenarioError("metrics", f"not columns of the table: {', '.join(missing)}")
    if not 0 < confidence < 1:
        raise ScenarioError("confidence", f"{confidence!r}", "a number between 0 and 1")
    rows = []
    for scenario, runs in table.groupby("scenario", sort=False):
        base = runs[runs.policy == baseline].set_index("seed")
        for policy, other in runs[runs.policy != baseline].groupby("policy", sort=False):
            paired = other.set_index("seed").join(base, rsuffix=".base", how="inner")
            for metric in metrics:
                diff = (paired[metric].astype(float)
                        - paired[f"{metric}.base"].astype(float)).dropna()
                mean, half = interval([float(d) for d in diff], confidence)
                rows.append({"scenario": scenario, "policy": policy, "baseline": baseline,
                             "metric": metric, "seeds": len(diff), "mean_diff": mean,
                             "ci_low": mean - half, "ci_high": mean + half})
    return pd.DataFrame(rows)


def interval(values: list[float], confidence: float) -> tuple[float, float]:
    """Mean and the half-width of its Student-t confidence interval (NaN below 2 values)."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = sum(values) / n
    if n < 2:
        return mean, math.nan
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, t_quantile((1 + confidence) / 2, n - 1) * sd / math.sqrt(n)


def t_within(t: float, df: int) -> float:
    """P(|T| < t) for Student's t with `df` degrees of freedom (Abramowitz & Stegun 26.7.3-4,
    exact for integer df)."""
    theta = math.atan(t / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    if df % 2 == 1:
        total, term = 0.0, 1.0
        for k in range(1, (df - 1) // 2 + 1):
            total += term
            term *= c2 * (2 * k) / (2 * k + 1)
        return 2 / math.pi * (theta + (math.sin(theta) * math.cos(theta) * total
                                       if df > 1 else 0.0))
    total, term = 0.0, 1.0
    for k in range(1, df // 2 + 1):
        total += term
        term *= c2 * (2 * k - 1) / (2 * k)
    return math.sin(theta) * total


def t_quantile(p: float, df: int) -> float:
    """The t value below which a fraction `p` (> 0.5) of Student's t(df) lies, by bisection."""
    target = 2 * p - 1
    low, high = 0.0, 1.0
    while t_within(high, df) < target:
        high *= 2
    for _ in range(200):
        mid = (low + high) / 2
        if t_within(mid, df) < target:
            low = mid
        else:
            high = mid
    return (low + high) / 2
