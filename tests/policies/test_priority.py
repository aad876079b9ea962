"""Priority templates called directly: exact scores, and whether each one ages."""

from __future__ import annotations

import pytest

from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.router_state import RouterState
from tests.policies.helpers import priority, view

S = 1_000_000  # µs


def score(policy, arrival_us=0, clock=0, tenant="", slo=""):
    return policy.compute(view(arrival_us=arrival_us, tenant=tenant, slo=slo), RouterState(),
                          clock)


def test_constant_defaults_to_zero_and_does_not_age():
    policy = priority("constant")
    assert policy.ages is False
    assert score(policy, 0, 0) == 0.0
    assert score(policy, 0, 100 * S, tenant="x", slo="interactive") == 0.0


def test_constant_returns_its_value():
    policy = priority("constant", value=3.5)
    assert score(policy, 0, 0) == 3.5
    assert score(policy, 7 * S, 9 * S) == 3.5


def test_slo_based_default_is_the_references_age_in_seconds():
    policy = priority("slo-based")
    assert policy.ages is True
    assert score(policy, arrival_us=1 * S, clock=1 * S) == 0.0
    assert score(policy, arrival_us=1 * S, clock=3_500_000) == pytest.approx(2.5, abs=1e-12)
    assert score(policy, arrival_us=0, clock=1) == pytest.approx(1e-6)
    # The SLO class is unused by default.
    assert score(policy, 0, 2 * S, slo="interactive") == score(policy, 0, 2 * S, slo="batch")


def test_slo_based_class_scores_default_score_and_age_weight():
    policy = priority("slo-based", class_scores={"interactive": 10}, default_score=-1,
                      age_weight=2)
    assert score(policy, 0, 1 * S, slo="interactive") == pytest.approx(12.0)
    assert score(policy, 0, 1 * S, slo="batch") == pytest.approx(1.0)  # -1 + 2*1
    assert score(policy, 0, 0, slo="") == -1.0
    still = priority("slo-based", class_scores={"a": 4}, age_weight=0)
    assert score(still, 0, 50 * S, slo="a") == 4.0  # no aging with weight 0


def test_slo_based_older_requests_score_higher():
    policy = priority("slo-based")
    assert score(policy, arrival_us=0, clock=5 * S) > score(policy, arrival_us=1 * S,
                                                              clock=5 * S)


@pytest.mark.parametrize("params", [{}, {"class_scores": {"hi": 3}, "default_score": 0.5,
                                         "age_weight": 0.25}])
def test_inverted_slo_is_the_exact_negation_of_slo_based(params):
    slo, inverted = priority("slo-based", **params), priority("inverted-slo", **params)
    assert inverted.ages is True
    for arrival, clock, cls in [(0, 0, ""), (0, 3 * S, "hi"), (2 * S, 2_700_001, "lo"),
                                (123, 98_765_432, "hi")]:
        assert score(inverted, arrival, clock, slo=cls) == -score(slo, arrival, clock, slo=cls)
    # and so the newest request is the most urgent
    assert score(inverted, 1 * S, 5 * S) > score(inverted, 0, 5 * S)


def test_tenant_priority_maps_tenants_and_defaults_the_rest():
    policy = priority("tenant-priority", tenants={"gold": 5, "bronze": -1}, default=-2)
    assert policy.ages is False
    assert score(policy, tenant="gold") == 5.0
    assert score(policy, tenant="bronze") == -1.0
    assert score(policy, tenant="other") == -2.0
    assert score(policy, arrival_us=0, clock=100 * S, tenant="gold") == 5.0  # no aging
    assert score(priority("tenant-priority"), tenant="gold") == 0.0


def test_deadline_aware_earliest_deadline_scores_highest():
    policy = priority("deadline-aware", deadlines_s={"interactive": 0.1})
    assert policy.ages is False
    late_urgent = score(policy, arrival_us=500_000, clock=600_000, slo="interactive")
    early_batch = score(policy, arrival_us=0, clock=600_000, slo="batch")  # default 1 s
    assert late_urgent == pytest.approx(-0.6)  # deadline at 0.5 + 0.1 s
    assert early_batch == pytest.approx(-1.0)  # deadline at 0 + 1 s
    assert late_urgent > early_batch
    # Same class: the earlier arrival has the earlier deadline.
    assert score(policy, 0, 0, slo="interactive") > score(policy, 1, 0, slo="interactive")
    # Independent of the clock.
    assert score(policy, 0, 0, slo="x") == score(policy, 0, 10 * S, slo="x")


def test_deadline_aware_default_deadline_parameter():
    policy = priority("deadline-aware", default_deadline_s=3.0)
    assert score(policy, arrival_us=2 * S) == pytest.approx(-5.0)


@pytest.mark.parametrize(("name", "params", "path"), [
    ("slo-based", {"class_scores": {"x": "high"}}, "class_scores.x"),
    ("slo-based", {"age_weight": -1}, "age_weight"),
    ("inverted-slo", {"class_scores": {"y": float("nan")}}, "class_scores.y"),
    ("tenant-priority", {"tenants": {"gold": True}}, "tenants.gold"),
    ("deadline-aware", {"deadlines_s": {"i": None}}, "deadlines_s.i"),
    ("deadline-aware", {"default_deadline_s": 0}, "default_deadline_s"),
    ("constant", {"value": "high"}, "value"),
    ("constant", {"bogus": 1}, "bogus"),
])
def test_bad_priority_params_name_their_path(name, params, path):
    with pytest.raises(ScenarioError) as err:
        priority(name, **params)
    assert err.value.path == f"policies.priority.params.{path}"
