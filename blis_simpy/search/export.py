"""What leaves a search: the Pareto rank of a set of candidates over several objectives (001
§9), and the K.4 export of a candidate (policy id, simulated fitness and metrics, and the
config to deploy) for sim-to-real validation."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from blis_simpy.core.errors import ScenarioError
from blis_simpy.search.code import CodePolicy
from blis_simpy.search.sweep import Candidate, candidate_bundle

if TYPE_CHECKING:
    import pandas as pd

Direction = Literal["max", "min"]
# Which way is better for the columns a search usually ranks on.
DIRECTIONS: dict[str, Direction] = {
    "fitness": "max", "completion": "max", "tokens_per_sec": "max", "responses_per_sec": "max",
    "cache_hit_rate": "max", "slo_attainment": "max", "goodput_per_s": "max",
    "jain_fairness": "max", "ttft_mean_ms": "min", "ttft_p99_ms": "min", "e2e_mean_ms": "min",
    "e2e_p99_ms": "min", "itl_mean_ms": "min", "preemption_count": "min",
    "rejection_rate": "min",
}


def pareto_rank(table: pd.DataFrame, objectives: Mapping[str, Direction] | list[str]
                ) -> pd.Series:
    """Non-dominated sorting: 0 for candidates no other beats on every objective, 1 for those
    only rank-0 ones beat, and so on. A row with a missing value in an objective is ranked
    last in it (worse than any number). `objectives` is column -> "max"/"min", or a list of
    columns whose direction `DIRECTIONS` knows."""
    import pandas as pd

    if isinstance(objectives, list):
        unknown = [c for c in objectives if c not in DIRECTIONS]
        if unknown:
            raise ScenarioError("objectives", f"no known direction for {', '.join(unknown)}",
                                "a mapping column -> 'max' or 'min'")
        objectives = {c: DIRECTIONS[c] for c in objectives}
    for column, direction in objectives.items():
        if column not in table.columns:
            raise ScenarioError("objectives", f"{column!r} is not a column of the table")
        if direction not in ("max", "min"):
            raise ScenarioError(f"objectives.{column}", f"{direction!r}", "'max' or 'min'")
    points = [tuple(oriented(value, objectives[c]) for c, value in zip(objectives, row,
                                                                      strict=True))
              for row in table[list(objectives)].itertuples(index=False)]
    ranks = [-1] * len(points)
    remaining = set(range(len(points)))
    rank = 0
    while remaining:
        front = {i for i in remaining
                 if not any(dominates(points[j], points[i]) for j in remaining if j != i)}
        for i in front:
            ranks[i] = rank
        remaining -= front
        rank += 1
    return pd.Series(ranks, index=table.index, name="pareto_rank")


def oriented(value: Any, direction: Direction) -> float:
    """Higher is better after this; a missing value is the worst."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return -math.inf
    return float(value) if direction == "max" else -float(value)


def dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return all(x >= y for x, y in zip(a, b, strict=True)) and a != b


def k4_export(row: Mapping[str, Any], candidate: Candidate) -> dict[str, Any]:
    """Seed K.4's record of one evaluated candidate: its id, the normalised objectives and
    fitness, the raw metrics, and the configuration to deploy (the policy bundle, or the
    axis and source of a code policy)."""
    objectives = {k.removeprefix("objective."): v for k, v in row.items()
                  if k.startswith("objective.")}
    metrics = {k: v for k, v in row.items() if k not in objectives and not k.startswith(
        "objective.") and k not in ("feedback", "error", "fitness") and not (
        isinstance(v, float) and math.isnan(v))}
    if isinstance(candidate, CodePolicy):
        config: dict[str, Any] = {"axis": candidate.axis, "entry": candidate.entry,
                                  "source": candidate.source}
        if candidate.bundle is not None:
            config["bundle"] = candidate.bundle.to_dict()
    else:
        config = candidate_bundle("candidate", candidate).to_dict()
    return {"policy_id": row.get("candidate_id") or row.get("policy_id", ""),
            "sim_fitness": {"fitness": row.get("fitness", 0.0), **objectives},
            "sim_metrics": metrics, "config_for_deployment": config}
