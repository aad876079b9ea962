"""Fuzzing the Python API boundary: Scenario objects changed in code skip the YAML loader, so
every entry point checks them again (a max_scheduled_tokens of 0 used to hang forever)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blis_simpy.api import prepare, run
from blis_simpy.core.errors import ScenarioError
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
