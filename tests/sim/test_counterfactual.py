"""Counterfactual regret by replay (blis_simpy/sim/counterfactual.py): a sampled routing
decision is re-run with the request sent elsewhere, and the actual TTFT/E2E difference is
reported beside the decision trace's estimate."""

from __future__ import annotations

import pytest

from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.records import Recorder
from blis_simpy.sim.counterfactual import Forced, outcome, regret_summary, replay_regret
from blis_simpy.sim.run import prepare, simulate
from tests.conftest import scenario


def busy(routing: str = "always-busiest"):
    """Two replicas, a burst: where a request goes decides how long it waits."""
    return scenario(cluster={"instances": 2}, policies={"routing": {"type": routing}},
                    workload={"num_requests": 40, "rate_per_s": 200.0})


def test_a_replay_to_the_same_target_is_the_run_itself():
    """Deterministic: forcing the decision the policy made changes nothing."""
    plain = simulate(prepare(busy()))
    sim = prepare(busy(), recorder=Recorder())
    request = plain.requests.id[10]
    chosen = plain.requests.instance[10]
    sim.gateway.routing = Forced(sim.gateway.routing, request, chosen)
    again = simulate(sim)
    assert outcome(again, request) == outcome(plain, request)
    assert again.requests.equals(plain.requests)


def test_replay_measures_what_the_other_instance_would_have_given():
    table = replay_regret(busy(), sample=5)
    assert len(table) == 5  # two replicas: one alternative per decision
    assert (table.chosen != table.alternative).all()
    summary = regret_summary(table)
    # always-busiest piles requests on one replica: the idle one was better for some
    assert (summary.replay_regret_ms > 0).any()
    for row in summary.itertuples():
        assert row.replay_regret_ms == pytest.approx(
            max(0.0, row.ttft_ms - row.best_alternative_ttft_ms))
        assert row.regret_error_ms == pytest.approx(
            abs(row.estimated_regret_ms - row.replay_regret_ms))
    # the replays are real runs: the alternative's TTFT is its own, not the chosen's
    assert (table.alternative_ttft_ms != table.ttft_ms).any()


def test_sample_is_spread_over_the_run_and_validated():
    table = replay_regret(busy("round-robin"), sample=3)
    assert len(table) == 3 and table.time_s.is_monotonic_increasing
    with pytest.raises(ScenarioError, match="sample"):
        replay_regret(busy(), sample=0)
