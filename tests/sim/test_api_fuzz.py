"""Fuzzing the Python API boundary: Scenario objects changed in code skip the YAML loader, so
every entry point checks them again (a max_scheduled_tokens of 0 used to hang forever)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blis_simpy.api import compare_policies, load, prepare, run, simulate
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.records import Recorder
from tests.conftest import scenario

BASE = scenario(workload={"num_requests": 5})
SECTIONS = ("engine", "cluster", "latency", "workload", "model")
BAD = st.sampled_from([None, -1, 0, -0.5, math.nan, math.inf, 2**70, "x", [], {}, object()])


def changed(section: str, name: str, value: Any):
    part = getattr(BASE, section)
    return dataclasses.replace(BASE, **{section: dataclasses.replace(part, **{name: value})})


def test_numbers_out_of_domain_max_scheduled_tokens_zero_through_the_api_is_refused():
    with pytest.raises(ScenarioError, match=r"engine\.max_scheduled_tokens: must be >= 1"):
        run(changed("engine", "max_scheduled_tokens", 0))


def test_a_scenario_of_the_wrong_kind_is_refused():
    with pytest.raises(ScenarioError, match=r"scenario: got int \(valid: a Scenario, a YAML"):
        run(42)  # type: ignore[arg-type]


@st.composite
def field_changes(draw: st.DrawFn) -> tuple[str, str, Any]:
    section = draw(st.sampled_from(SECTIONS))
    names = [f.name for f in dataclasses.fields(getattr(BASE, section)) if f.name != "type"]
    return section, draw(st.sampled_from(names)), draw(BAD)


@settings(max_examples=200, deadline=None)
@given(field_changes())
def test_a_bad_field_set_in_python_is_an_error_naming_it_or_a_valid_scenario(change):
    section, name, value = change
    try:
        prepare(changed(section, name, value))
    except ScenarioError as exc:
        assert exc.path.startswith(section) or section in str(exc), (change, str(exc))


def test_a_whole_section_replaced_by_garbage_is_named():
    with pytest.raises(ScenarioError, match=r"^engine: expected a mapping"):
        run(dataclasses.replace(BASE, engine=5))  # type: ignore[arg-type]


# --- numpy values and wrong-type arguments (issue 29, class 7) -----------------------------------

SMALL = scenario(workload={"num_requests": 3})


def test_numpy_scalars_are_accepted_wherever_python_numbers_are():
    """np.int64 seeds and overrides were refused while numpy floats passed."""
    result = run(SMALL, seed=np.int64(3), checks=np.bool_(False),
                 overrides={"cluster.instances": np.int64(2),
                            "workload.rate_per_s": np.float32(2.5),
                            "engine.max_running_requests": np.arange(9)[8],
                            "latency.alpha": np.array(SMALL.latency.alpha)})
    assert result.scenario.seed == 3 and type(result.scenario.seed) is int
    assert result.scenario.cluster.instances == 2
    assert result.scenario.engine.max_running_requests == 8
    assert result.summary == run(SMALL, seed=3, overrides={
        "cluster.instances": 2, "workload.rate_per_s": 2.5,
        "engine.max_running_requests": 8}).summary


@pytest.mark.parametrize("value", [np.timedelta64(5), np.timedelta64(5, "s"),
                                   np.datetime64(5, "s"), np.array([5], dtype="m8")])
def test_numpy_times_and_dates_are_not_numbers(value):
    """np.timedelta64(5) was taken as 5 requests per second (its tolist() is 5)."""
    with pytest.raises(ScenarioError, match=r"^workload\.rate_per_s: expected float, got "
                       r"(timedelta64|datetime64|ndarray)"):
        load(SMALL, overrides={"workload.rate_per_s": value})


def test_a_numpy_long_double_is_taken_as_the_float_it_holds():
    """np.longdouble(10) was refused for an int field where 10.0 is accepted."""
    long = load(SMALL, overrides={"cluster.instances": np.longdouble(2),
                                  "workload.rate_per_s": np.longdouble(2.5)})
    plain = load(SMALL, overrides={"cluster.instances": 2.0, "workload.rate_per_s": 2.5})
    assert long == plain and type(long.cluster.instances) is int
    with pytest.raises(ScenarioError, match=r"^cluster\.instances: expected int, got float "
                       r"2\.5"):
        load(SMALL, overrides={"cluster.instances": np.longdouble(2.5)})


@pytest.mark.filterwarnings("ignore:fitness is 0")
def test_numpy_seeds_from_arange_run_in_a_sweep():
    import blis_simpy

    table = blis_simpy.run_many(SMALL, seeds=np.arange(2), workers=np.int64(1))
    assert table.seed.tolist() == [0, 1]
    assert [type(s) for s in table.seed.tolist()] == [int, int]


def run_many_small(**kwargs: Any):
    import blis_simpy

    return blis_simpy.run_many(kwargs.pop("scenarios", SMALL), **{"workers": 1, **kwargs})


WRONG_ARGUMENTS = {  # call -> the message it must start with
    "run-progress": (lambda: run(SMALL, 5), "progress: expected a function"),
    "run-recorder": (lambda: run(SMALL, recorder=5), "recorder: expected a Recorder"),
    "run-recorder-class": (lambda: run(SMALL, recorder=Recorder),
                           "recorder: expected a Recorder (blis_simpy.Recorder(events=True)) "
                           "or None, got the class Recorder"),
    "run-checks": (lambda: run(SMALL, checks="no"), "checks: expected True or False"),
    "run-seed": (lambda: run(SMALL, seed="7"), "seed: expected int, got str '7'"),
    "simulate-sim": (lambda: simulate(5), "sim: expected a Simulation"),  # type: ignore
    "recorder-events": (lambda: Recorder(events="x"), "events: expected True or False"),
    "save-force": (lambda: run(SMALL).save("unused", force="yes"),
                   "force: expected True or False"),
    "save-out-dir": (lambda: run(SMALL).save(5), "out_dir: expected a folder path"),
    "from-yaml-path": (lambda: Scenario.from_yaml(5), "path: expected a scenario file"),
    "from-yaml-text": (lambda: Scenario.from_yaml_text(5), "text: expected the scenario's"),
    "run-many-scenarios": (lambda: run_many_small(scenarios=5), "scenarios: expected a "
                           "scenario (a Scenario, a YAML path, a library name"),
    "run-many-scenario-entry": (lambda: run_many_small(scenarios=[SMALL, 5]),
                                "scenarios[1]: got int"),
    "run-many-policies": (lambda: run_many_small(policies=["a"]), "policies: expected a "
                          "mapping"),
    "run-many-seeds": (lambda: run_many_small(seeds=5), "seeds: expected a list of integers"),
    "run-many-seed": (lambda: run_many_small(seeds=[1, 1.5]), "seeds[1]: expected int"),
    "run-many-workers": (lambda: run_many_small(workers="2"), "workers: expected int"),
    "run-many-no-workers": (lambda: run_many_small(workers=0), "workers: must be >= 1"),
    "run-many-executor": (lambda: run_many_small(executor=5), "executor: expected a "
                          "concurrent.futures.Executor"),
    "run-many-progress": (lambda: run_many_small(progress=5), "progress: expected a function"),
    "run-many-limits": (lambda: run_many_small(limits=5), "limits: expected a Limits"),
    "compare-table": (lambda: compare_policies(5, "a"), "table: expected a DataFrame"),
}


@pytest.mark.parametrize("case", sorted(WRONG_ARGUMENTS))
def test_a_wrong_type_argument_names_the_argument_and_what_is_valid(case, tmp_path,
                                                                     monkeypatch):
    monkeypatch.chdir(tmp_path)
    call, start = WRONG_ARGUMENTS[case]
    with pytest.raises(ScenarioError) as err:
        call()
    assert str(err.value).startswith(start), str(err.value)
    assert list(tmp_path.iterdir()) == []


ODD = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=True),
                st.text(max_size=5), st.lists(st.integers(0, 3), max_size=3),
                st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
                st.sampled_from([object(), Recorder, np.int64(2), np.float32(1.5),
                                 np.bool_(True), np.arange(3), b"x", len]))


@settings(max_examples=150, deadline=None)
@given(recorder=ODD, checks=ODD, seed=ODD)
def test_any_argument_to_prepare_builds_or_is_an_error_naming_it(recorder, checks, seed):
    try:
        prepare(SMALL, recorder=recorder, checks=checks, seed=seed)
    except ScenarioError as exc:
        assert exc.path in ("recorder", "checks", "seed"), str(exc)


def test_a_value_nested_too_deeply_or_inside_itself_is_an_error_not_a_recursion_error():
    """A 2,000-level params mapping built in Python passed the loader and failed with a
    RecursionError when the scenario was next copied (or after the run, when written)."""
    deep: dict[str, Any] = {}
    inner = deep
    for _ in range(2000):
        inner["a"] = {}
        inner = inner["a"]
    itself: dict[str, Any] = {}
    itself["a"] = itself
    for value in (deep, itself):
        with pytest.raises(ScenarioError, match=r"^policies\.routing\.params: nested more "
                           "than 100 levels"):
            prepare(SMALL, overrides={"policies.routing": {"type": "tests.search."
                                                           "prefix_owner_policy:Policy",
                                                           "params": value}})
