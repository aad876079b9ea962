"""Regret on hand-built routing decisions (docs/decision-traces.md, "Regret")."""

from __future__ import annotations

import numpy as np
import pytest

from blis_simpy.core.records import Candidate
from blis_simpy.metrics.trace.regret import estimated_ttft_ms, prefill_ms_per_token, regret


def cand(instance: str, score: float, wait_ms: float = 0.0, hit: int = 0) -> Candidate:
    return Candidate(instance, score, wait_ms=wait_ms, expected_hit_tokens=hit)


def test_choosing_the_best_on_both_counts_has_no_regret():
    g = regret([cand("a", 2.0, wait_ms=1), cand("b", 1.0, wait_ms=5)], "a", 100, 0.1)
    assert g is not None
    assert (g.score, g.ttft_ms, g.best_instance) == (0.0, 0.0, "a")
    assert g.chosen_ttft_ms == pytest.approx(1 + 100 * 0.1)


def test_score_regret_is_best_score_minus_chosen_score_over_all_candidates():
    candidates = [cand("a", 0.9), cand("b", 0.5), cand("c", 0.2)]
    assert regret(candidates, "c", 10, 0.0).score == pytest.approx(0.7)
    assert regret(candidates, "b", 10, 0.0).score == pytest.approx(0.4)


def test_ttft_regret_is_the_wait_on_the_chosen_queue_beyond_the_best_alternatives():
    # same prompt cost everywhere: only the estimated waits differ
    g = regret([cand("a", 1.0, wait_ms=40), cand("b", 0.5, wait_ms=15),
                cand("c", 0.1, wait_ms=25)], "a", 200, 0.05)
    assert g.best_instance == "b"
    assert g.ttft_ms == pytest.approx(25.0)
    assert g.best_ttft_ms == pytest.approx(15 + 200 * 0.05)


def test_an_expected_cache_hit_elsewhere_counts_as_saved_prefill():
    # 1000-token prompt at 0.02 ms a token: 20 ms of prefill; b is expected to hold 800 tokens
    g = regret([cand("a", 1.0, wait_ms=5), cand("b", 0.0, wait_ms=5, hit=800)], "a", 1000, 0.02)
    assert g.best_instance == "b"
    assert g.chosen_ttft_ms == pytest.approx(25.0)
    assert g.best_ttft_ms == pytest.approx(5 + 200 * 0.02)
    assert g.ttft_ms == pytest.approx(16.0)


def test_a_hit_never_counts_more_tokens_than_the_prompt():
    assert estimated_ttft_ms(cand("a", 0, wait_ms=3, hit=5000), 100, 1.0) == 3.0


def test_equal_estimates_go_to_the_first_candidate_the_best_scored():
    g = regret([cand("b", 2.0, wait_ms=10), cand("a", 1.0, wait_ms=10)], "a", 10, 0.0)
    assert (g.best_instance, g.ttft_ms) == ("b", 0.0)


def test_a_chosen_instance_missing_from_the_candidates_has_no_regret_record():
    assert regret([cand("a", 1.0)], "z", 10, 0.1) is None


def test_prefill_cost_per_token_is_the_fitted_slope_of_step_time():
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 2048, 200)
    decodes = rng.integers(0, 64, 200)
    duration_us = 6000 + 17.5 * tokens + 40 * decodes  # the blackbox form: recovered exactly
    assert prefill_ms_per_token(tokens, decodes, duration_us) == pytest.approx(0.0175)


def test_prefill_cost_is_zero_without_enough_distinct_steps():
    assert prefill_ms_per_token(np.array([5, 5, 5]), np.zeros(3), np.array([1, 2, 3])) == 0.0
    assert prefill_ms_per_token(np.array([1]), np.zeros(1), np.array([9])) == 0.0
