"""Paired comparison of policies over seeds (common random numbers).

In a sweep every policy sees the same workload for a given seed, so the difference between two
policies is measured seed by seed and the seed-to-seed spread of the workload cancels out: the
confidence interval is Student's t over the per-seed differences, much narrower than comparing
two independent means.
"""

from __future__ import annotations

import math
import warnings
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
    (policy - baseline), its `confidence` interval, the number of paired seeds and the
    measurement window the metrics describe (`evaluation.window`, the same for every run of a
    scenario; a warning when it starts at 0). A seed missing for one of the two is left out
    of that pair. Seeds whose runs drew the same workload (`workload_id`: `seeds.workload`
    pinned) are one sample: the mean and interval are over distinct workloads (`workloads`;
    fewer than two: no interval), with a warning. A table holding a (scenario, policy, seed)
    twice is refused."""
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
    repeated(table)
    rows = []
    unwindowed = []
    shared: list[str] = []
    for scenario, runs in table.groupby("scenario", sort=False):
        start, end = window(runs, scenario)
        if not start:
            unwindowed.append(str(scenario))
        base = runs[runs.policy == baseline].set_index("seed")
        for policy, other in runs[runs.policy != baseline].groupby("policy", sort=False):
            paired = other.set_index("seed").merge(base, how="inner", left_index=True,
                                                   right_index=True, suffixes=("", ".base"))
            drawn = workloads(paired)
            if drawn.nunique() < len(drawn):
                shared.append(f"{scenario} {policy}: {len(drawn)} seeds, "
                              f"{drawn.nunique()} distinct workload(s)")
            for metric in metrics:
                diff = (paired[metric].astype(float)
                        - paired[f"{metric}.base"].astype(float)).dropna()
                # Seeds that drew the same workload are one sample of it, not several: the
                # interval is over the workloads' mean differences.
                samples = diff.groupby(drawn.loc[diff.index]).mean()
                mean, half = interval([float(d) for d in samples], confidence)
                rows.append({"scenario": scenario, "policy": policy, "baseline": baseline,
                             "metric": metric, "seeds": len(diff),
                             "workloads": len(samples), "mean_diff": mean,
                             "ci_low": mean - half, "ci_high": mean + half,
                             "window_start_s": start, "window_end_s": end})
    if unwindowed:
        warnings.warn(f"compare_policies: {', '.join(unwindowed)} measured from t=0, cold "
                      "prefix caches and empty queues included; on short runs they can decide "
                      "the comparison (set evaluation.window.warmup_s: docs/reference/metrics.md)",
                      UserWarning, stacklevel=2)
    if shared:
        warnings.warn("compare_policies: seeds that drew the same workload (one workload_id: "
                      "seeds.workload pinned, or a trace) are counted once, so the interval "
                      "is over distinct workloads (none below two): " + "; ".join(shared),
                      UserWarning, stacklevel=2)
    return pd.DataFrame(rows)


def repeated(table: pd.DataFrame) -> None:
    """Refuse a table holding one scenario, policy and seed twice (runs are deterministic: a
    repeat is a copy, and counting it would narrow the interval for nothing)."""
    counts = table.groupby(["scenario", "policy", "seed"], sort=False).size()
    twice = counts[counts > 1]
    if len(twice):
        scenario, policy, seed = (str(part) for part in twice.index[0])
        raise ScenarioError("table", f"scenario {scenario}, policy {policy}, seed {seed} is "
                            f"there {int(twice.iloc[0])} times ({len(twice)} such): runs are "
                            "deterministic, so a repeat is a copy, not a sample",
                            "each (scenario, policy, seed) once (drop duplicates of "
                            "concatenated tables)")


def workloads(paired: pd.DataFrame) -> pd.Series:
    """Each paired seed's workload: its `workload_id` (the baseline's; a failed run, which
    has none, or a table without the column: the seed's own)."""
    import pandas as pd

    seeds = pd.Series([f"seed {s}" for s in paired.index], index=paired.index)
    if "workload_id.base" not in paired:
        return seeds
    ids = paired["workload_id.base"].astype(str)
    return ids.where(ids != "", seeds)


def window(runs: pd.DataFrame, scenario: object) -> tuple[float, float | None]:
    """The measurement window the scenario's runs share (a comparison across windows would
    compare different things)."""
    if "window_start_s" not in runs:  # a table from before the window existed
        return 0.0, None
    pairs = {(float(s), None if e is None or e != e else float(e))
             for s, e in zip(runs.window_start_s, runs.window_end_s, strict=True)
             if s == s}  # failed runs (zero rows) have none
    if len(pairs) > 1:
        raise ScenarioError("table", f"the runs of {scenario} used different measurement "
                            f"windows {sorted(pairs, key=str)}", "one evaluation.window per "
                            "scenario")
    return pairs.pop() if pairs else (0.0, None)


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
