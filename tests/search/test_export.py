"""Pareto rank over objectives with directions, and the K.4 export."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from blis_simpy.core.errors import ScenarioError
from blis_simpy.search.code import CodePolicy
from blis_simpy.search.export import k4_export, pareto_rank


def test_pareto_rank_sorts_fronts_with_directions():
    table = pd.DataFrame({"fitness": [0.9, 0.5, 0.9, 0.4, 0.1],
                          "ttft_p99_ms": [200.0, 100.0, 300.0, 150.0, math.nan]})
    ranks = pareto_rank(table, ["fitness", "ttft_p99_ms"])
    # 0 and 1 trade off; 2 is beaten by 0 (same fitness, slower); 3 is beaten by 1;
    # 4 has no latency (worst) and the lowest fitness
    assert list(ranks) == [0, 0, 1, 1, 2]
    flipped = pareto_rank(table, {"fitness": "min", "ttft_p99_ms": "max"})
    assert list(flipped) == [1, 1, 0, 0, 0]


def test_equal_candidates_share_a_rank():
    table = pd.DataFrame({"fitness": [0.5, 0.5]})
    assert list(pareto_rank(table, ["fitness"])) == [0, 0]


def test_pareto_rank_refuses_unknown_columns_and_directions():
    table = pd.DataFrame({"fitness": [1.0], "custom": [2.0]})
    with pytest.raises(ScenarioError, match="no known direction"):
        pareto_rank(table, ["custom"])
    with pytest.raises(ScenarioError, match="not a column"):
        pareto_rank(table, {"missing": "max"})
    with pytest.raises(ScenarioError, match="'max' or 'min'"):
        pareto_rank(table, {"fitness": "up"})


def test_k4_export_has_id_fitness_metrics_and_deployable_config():
    row = {"candidate_id": "routing_v42", "policy_id": "p#1", "fitness": 0.8,
           "objective.throughput": 0.85, "objective.p99_ttft": 0.72, "ttft_p99_ms": 120.0,
           "tokens_per_sec": 900.0, "error": "", "feedback": "text", "itl_mean_ms": math.nan}
    bundle = k4_export(row, {"routing.type": "least-loaded"})
    assert bundle["policy_id"] == "routing_v42"
    assert bundle["sim_fitness"] == {"fitness": 0.8, "throughput": 0.85, "p99_ttft": 0.72}
    assert bundle["sim_metrics"]["ttft_p99_ms"] == 120.0
    assert "itl_mean_ms" not in bundle["sim_metrics"] and "feedback" not in bundle["sim_metrics"]
    assert bundle["config_for_deployment"] == {"routing": {"type": "least-loaded"}}
    code = k4_export(row, CodePolicy("routing", "class Policy(RoutingPolicy):\n    pass\n"))
    assert code["config_for_deployment"]["axis"] == "routing"
