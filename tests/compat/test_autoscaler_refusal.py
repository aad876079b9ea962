"""The later reference's autoscaling settings (cluster.md §8.1) have no one-to-one conversion
(its replica bounds come from node pools): `convert blis-command` and `convert policy-config`
refuse them by name and say what to write instead."""

from __future__ import annotations

import pytest

from blis_simpy.compat.convert import blis_command
from blis_simpy.core.errors import ScenarioError
from tests.compat.helpers import BASE, error


def test_the_autoscaler_flag_is_refused_by_name_with_advice():
    with pytest.raises(ScenarioError) as err:
        blis_command([*BASE, "--model-autoscaler-interval-us", "1000000"])
    assert err.value.path == "--model-autoscaler-interval-us"
    assert "node_pools" in err.value.problem and "deployment" in err.value.problem


@pytest.mark.parametrize("key", ["autoscaler", "node_pools", "instance_lifecycle"])
def test_autoscaling_sections_of_a_policy_config_are_refused_by_name(tmp_path, key):
    err = error(tmp_path, f"scheduler: fcfs\n{key}: {{}}\n")
    assert err.path.endswith(f": {key}") and "later reference" in err.problem
    assert "deployment" in err.problem and "line 2" in err.problem
