"""The Python API's conveniences: `run(scenario, seed=..., overrides={...})`, and DataFrames
per tenant, SLO class and instance next to the request and step tables."""

from __future__ import annotations

import pandas as pd
import pytest

from blis_simpy.api import run
from blis_simpy.core.errors import ScenarioError
from tests.conftest import scenario

BASE = scenario(workload={"num_requests": 12})


def test_seed_and_overrides_change_the_run_as_the_cli_set_does():
    result = run(BASE, seed=11, overrides={"cluster.instances": 2,
                                           "policies.routing.type": "least-loaded"})
    assert result.scenario.seed == 11
    assert result.scenario.cluster.instances == 2
    assert set(result.requests.instance) == {"instance_0", "instance_1"}
    assert result.summary == run(BASE, seed=11, overrides={
        "cluster.instances": 2, "policies.routing.type": "least-loaded"}).summary


def test_a_bad_override_is_an_error_naming_its_path():
    with pytest.raises(ScenarioError, match=r"^engine\.max_scheduled_tokens"):
        run(BASE, overrides={"engine.max_scheduled_tokens": 0})
    with pytest.raises(ScenarioError, match="dotted paths"):
        run(BASE, overrides={"": 1})
    with pytest.raises(ScenarioError, match=r"^overrides: expected a mapping .* got list"):
        run(BASE, overrides=["cluster.instances=2"])  # type: ignore[arg-type]  # the CLI's form


def test_group_tables_count_every_request_once():
    result = run(BASE, overrides={"cluster.instances": 2})
    for table, column in ((result.by_tenant(), "tenant"), (result.by_slo_class(), "slo_class"),
                          (result.by_instance(), "instance")):
        assert isinstance(table, pd.DataFrame) and column in table.columns
        assert table.requests.sum() == len(result.requests)
        assert table.completed.sum() == result.summary["completed_requests"]
    by_instance = result.by_instance().set_index("instance")
    for instance in result.summary["instances"]:
        assert by_instance.loc[instance["instance_id"], "completed"] == \
            instance["completed_requests"]


def test_a_library_scenario_runs_by_name_from_the_api_as_from_the_command_line():
    result = run("quickstart", overrides={"workload.num_requests": 5})
    assert result.summary["completed_requests"] == 5
    with pytest.raises(ScenarioError, match=r"neither a file nor a library scenario.*quickstart"):
        run("quickstartt")


def test_a_result_shows_as_one_line_of_headline_figures():
    """A notebook cell ending in `run(...)` shows the run, not megabytes of tables."""
    result = run(scenario(workload={"num_requests": 20}))
    shown = repr(result)
    assert "\n" not in shown and len(shown) < 300
    assert f"{result.summary['completed_requests']} of 20 requests completed" in shown
