"""The fitness weights' boundary: a weight given twice or every weight 0 is refused before the
run, as a scenario's duplicate key is, rather than scoring with the last value or scoring
every run 0 without a word."""

from __future__ import annotations

import pytest

from blis_simpy.config.fitness import parse_weights
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import ScenarioError
from tests.conftest import BASE, merge


def test_fitness_weights_given_twice_are_refused():
    with pytest.raises(ScenarioError) as err:
        parse_weights("throughput:1,throughput:9")
    assert err.value.path == "--fitness-weights"
    assert "'throughput' is given twice" in str(err.value)


@pytest.mark.parametrize("text", ["throughput:0", "throughput:0,p99_ttft:0.0"])
def test_fitness_weights_all_zero_are_refused(text):
    with pytest.raises(ScenarioError) as err:
        parse_weights(text)
    assert "every weight is 0" in str(err.value)


def test_fitness_weights_all_zero_in_a_scenario_are_refused():
    with pytest.raises(ScenarioError) as err:
        Scenario.from_dict(merge(BASE, {"fitness": {"weights": {"goodput": 0}}}))
    assert err.value.path == "fitness.weights" and "every weight is 0" in str(err.value)


def test_fitness_weights_with_one_above_zero_are_kept():
    assert parse_weights("throughput:0,goodput:2") == {"throughput": 0.0, "goodput": 2.0}
