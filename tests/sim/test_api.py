"""The Python API's conveniences: `run(scenario, seed=..., overrides={...})`, and DataFrames
per tenant, SLO class and instance next to the request and step tables."""

from __future__ import annotations

from pathlib import Path

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
    with pytest.raises(ScenarioError, match="dotted key paths"):
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


# --- one set of scenario forms and overrides everywhere (issue 31 item 8, issue 37 item 5) ---

SMALL = {"workload.num_requests": 8}


def forms(tmp_path):
    """The same scenario as a path, a library name, a Scenario and a mapping."""
    import blis_simpy

    path = tmp_path / "quickstart.yaml"
    library = "quickstart"
    path.write_text((Path(blis_simpy.__file__).parent / "scenarios" / "quickstart.yaml")
                    .read_text())
    obj = blis_simpy.load(library)
    return {"path": path, "str path": str(path), "library name": library, "object": obj,
            "mapping": obj.to_dict()}


def test_every_entry_point_takes_every_scenario_form_and_mapping_overrides(tmp_path):
    import blis_simpy

    seen = set()
    for form in forms(tmp_path).values():
        loaded = blis_simpy.load(form, overrides=SMALL)
        assert loaded.workload.num_requests == 8 and loaded.name == "quickstart"
        result = blis_simpy.run(form, overrides=SMALL)
        seen.add(json_of(result.summary))
        table = blis_simpy.run_many(form, overrides=SMALL, workers=1)
        assert list(table.scenario) == ["quickstart"] and table.completed_requests[0] == 8
    assert len(seen) == 1  # the same run whatever the form
    assert blis_simpy.Scenario.from_yaml(tmp_path / "quickstart.yaml",
                                         SMALL).workload.num_requests == 8


def json_of(summary: dict) -> str:
    import json

    return json.dumps(summary, sort_keys=True, default=str)


def test_run_many_takes_library_names_as_run_does():
    """Issue 37 item 5: run_many said "cannot read routing-weighted"."""
    import blis_simpy

    table = blis_simpy.run_many(["quickstart", "routing-weighted"], workers=1,
                                overrides={"quickstart": SMALL,
                                           "routing-weighted": {"workload.duration_s": 0.2}})
    assert list(table.scenario) == ["quickstart", "routing-weighted"]


def test_run_many_overrides_for_every_scenario_or_each_its_own():
    import blis_simpy

    table = blis_simpy.run_many({"a": "quickstart", "b": "quickstart"},
                                overrides={"a": {"workload.num_requests": 5},
                                           "b": {"workload.num_requests": 7}}, workers=1)
    assert list(table.completed_requests) == [5, 7]
    with pytest.raises(ScenarioError, match=r"mixes scenario names"):
        blis_simpy.run_many({"a": "quickstart"}, overrides={"a": {}, "seed": 3})
    with pytest.raises(ScenarioError, match=r"^overrides"):
        blis_simpy.run_many("quickstart", overrides=["seed=3"])  # type: ignore[arg-type]


def test_overrides_are_a_mapping_everywhere(tmp_path):
    import blis_simpy

    path = forms(tmp_path)["path"]
    for call in (lambda: blis_simpy.Scenario.from_yaml(path, ["seed=3"]),
                 lambda: blis_simpy.load(path, overrides=["seed=3"]),
                 lambda: blis_simpy.run(path, overrides=["seed=3"])):
        with pytest.raises(ScenarioError, match="expected a mapping of dotted key paths"):
            call()  # type: ignore[arg-type]
    with pytest.raises(ScenarioError, match=r"^scenario: got int"):
        blis_simpy.load(3)  # type: ignore[arg-type]


def test_load_and_the_forms_are_exported():
    import blis_simpy

    assert "load" in blis_simpy.__all__ and blis_simpy.load is blis_simpy.api.load


POLICY = '''
from blis_simpy.policies.routing import RoutingDecision, RoutingPolicy

class First(RoutingPolicy):
    def route(self, req, priority, snapshots, state, clock):
        return RoutingDecision(snapshots[0].id, "first", tuple(0.0 for _ in snapshots))

class NoSuper(First):
    def __init__(self, params):
        self.seen = params

def helper():
    return None
'''


def user_scenario(tmp_path, module: str, cls: str):
    folder = tmp_path / "elsewhere"
    folder.mkdir(exist_ok=True)
    (folder / f"{module}.py").write_text(POLICY)
    path = folder / "s.yaml"
    path.write_text("version: 1\nmodel: {name: meta-llama/llama-3.1-8b-instruct}\n"
                    "cluster: {instances: 2}\n"
                    f"policies: {{routing: {{type: '{module}:{cls}'}}}}\n"
                    "workload: {num_requests: 6, rate_per_s: 10}\n")
    return path


def test_a_user_policy_next_to_the_scenario_file_is_found_through_the_api(tmp_path,
                                                                          monkeypatch):
    import blis_simpy

    monkeypatch.chdir(tmp_path)  # not the scenario's folder
    result = blis_simpy.run(user_scenario(tmp_path, "nextdoor_policy", "First"))
    assert set(result.requests.instance) == {"instance_0"}


@pytest.mark.parametrize(("cls", "message"), [
    ("Missing", r"nextdoor_errors\.py defines no 'Missing' \(valid: "
                r"nextdoor_errors:First, nextdoor_errors:NoSuper\)"),
    ("helper", "'nextdoor_errors:helper' is a function, not a class"),
    ("NoSuper", r"NoSuper.__init__ did not call super\(\).__init__\(params\)"),
])
def test_user_policy_errors_name_the_real_problem(tmp_path, cls, message):
    import blis_simpy

    with pytest.raises(ScenarioError, match=message):
        blis_simpy.run(user_scenario(tmp_path, "nextdoor_errors", cls))


def test_a_seed_given_twice_differently_is_refused_naming_both():
    """`seed=7` with an override `seed: 9` ran seed 7 and said nothing (newcomer 19 #10c);
    the same seed twice is fine."""
    with pytest.raises(ScenarioError, match=r"seed.*given twice, 7 and 9"):
        run("quickstart", seed=7, overrides={"seed": 9, "workload.num_requests": 5})
    assert run("quickstart", seed=7, overrides={"seed": 7, "workload.num_requests": 5}
               ).summary["completed_requests"] == 5


def test_simulate_refuses_a_folder_that_is_not_an_output_folder(tmp_path):
    """A plain path raised AttributeError from deep in a streaming run (newcomer 19 #8)."""
    from blis_simpy.sim.run import prepare, simulate

    with pytest.raises(ScenarioError, match=r"folder: expected an OutputFolder.*got"):
        simulate(prepare("quickstart"), folder=tmp_path / "x", record_mode="stream")
