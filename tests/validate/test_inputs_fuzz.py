"""Fuzzing the measured-data boundary: a bundled set's stage, and a vLLM, SGLang, GuideLLM or
per-request result, with one value made hostile. The contract: reading raises ScenarioError
naming where, or the stage is valid and builds a scenario; never a traceback from deep
inside. Coefficient files likewise."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blis_simpy.config import step_models
from blis_simpy.core.errors import ScenarioError
from blis_simpy.validate.harness import Latency, checked, stage_scenario
from blis_simpy.validate.importers import Hints, read
from blis_simpy.validate.sets import parse
from tests.config.test_scenario_fuzz import HOSTILE, leaves, replaced
from tests.validate.helpers import training_facts
from tests.validate.test_importers import SGLANG, VLLM

SET = {**{k: v for k, v in training_facts().items() if k != "stages"},
       "stages": training_facts()["stages"][:1]}
SET_LEAVES = [p for p in leaves(SET) if p[0] in ("stages", "defaults")]
FILES = {"vllm.json": VLLM, "sglang.jsonl": SGLANG,
         "requests.jsonl": {"arrival_s": 0.0, "input_tokens": 100, "output_tokens": 10,
                            "ttft_ms": 50, "e2e_ms": 150}}
SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])


@SETTINGS
@given(st.sampled_from(SET_LEAVES), HOSTILE)
def test_a_hostile_value_in_a_set_is_named_or_harmless(path, value):
    try:
        measured = parse(replaced(SET, path, value), "fuzz.json")
    except ScenarioError as exc:
        assert str(exc).startswith("fuzz.json")
        return
    for stage in measured.stages:
        with contextlib.suppress(ScenarioError):  # named; anything else fails the test
            checked(stage, stage_scenario(stage, Latency.default(), max_requests=5))


@SETTINGS
@given(st.sampled_from(sorted(FILES)), st.data(), HOSTILE)
def test_a_hostile_value_in_a_benchmark_file_is_named_or_harmless(tmp_path_factory, name,
                                                                  data, value):
    record = dict(FILES[name])
    key = data.draw(st.sampled_from(sorted(record)))
    record[key] = value
    path = tmp_path_factory.mktemp("fuzz") / name
    lines = [record, {**FILES[name], "arrival_s": 1.0}] if name == "requests.jsonl" else [record]
    try:
        path.write_text("\n".join(json.dumps(r) for r in lines))
    except ValueError:  # not JSON-serialisable as written by a real tool: nothing to read
        return
    hints = Hints(model="Qwen/Qwen3-8B")
    try:
        measured = read(path, hints)
    except ScenarioError:
        return
    for stage in measured.stages:
        with contextlib.suppress(ScenarioError):  # named; anything else fails the test
            checked(stage, stage_scenario(stage, Latency.default(), max_requests=5))


@SETTINGS
@given(st.sampled_from(step_models.NAMES), HOSTILE)
def test_a_hostile_coefficient_is_named(tmp_path_factory, name, value):
    data = {"family": "vllm",
            "coefficients": {**step_models.bundled("vllm").coefficients.as_dict(), name: value}}
    path: Path = tmp_path_factory.mktemp("c") / "c.json"
    try:
        path.write_text(json.dumps(data))
    except ValueError:
        return
    try:
        loaded = step_models.load(str(path))
    except ValueError as exc:
        assert name in str(exc)
        return
    assert getattr(loaded.coefficients, name) >= 0


@pytest.mark.parametrize("value", [2**70, 10**7, 0, True, 1.5])
def test_distinct_prompts_beyond_the_stage_are_named_before_any_memory_is_taken(value):
    """A hostile `distinct_prompts` (2**70 once took the fuzz run to 18 GB: one prefix group
    each) is refused by the set's reader, naming the field."""
    bad = {**SET, "stages": [{**SET["stages"][0], "distinct_prompts": value}]}
    with pytest.raises(ScenarioError, match="distinct_prompts"):
        parse(bad, "fuzz.json")


@pytest.mark.parametrize("field", ["requests", "concurrency"])
def test_a_stage_count_beyond_a_run_is_named(field):
    stage = {**SET["stages"][0], "load": {"arrival": "concurrency", "requests": 10,
                                          "concurrency": 2, field: 2**70}}
    with pytest.raises(ScenarioError, match=field):
        parse({**SET, "stages": [stage]}, "fuzz.json")
