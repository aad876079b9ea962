"""The work a scenario implies (blis_simpy/workload/work.py), counted after every multiplier and
bounded before the run: each feature that used to multiply work past the request and token
limits (the run hung or took 21 GB in 10 s) has a test named after it, refused at once with
the field named; every duration stays positive on the µs clock; the estimate is checked
against what small runs really generate."""

from __future__ import annotations

import copy
import dataclasses
import math
import subprocess
import sys
import time
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blis_simpy.api import prepare, run
from blis_simpy.config.scenario import Scenario
from blis_simpy.core import schema
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.units import MAX_REQUESTS
from blis_simpy.workload import trace_file
from blis_simpy.workload.work import check_work, sources_of
from tests.conftest import BASE
from tests.trace_helpers import azure_text, trace_scenario, write

TENANT: dict[str, Any] = {"id": "t", "prompt": {"type": "constant", "value": 100},
                          "output": {"type": "constant", "value": 20}}


def tenants(tenant: dict[str, Any] | None = None, **workload: Any) -> dict[str, Any]:
    """The test scenario with one tenant (changed by `tenant`) and workload fields."""
    data = copy.deepcopy(BASE)
    data["workload"] = {"type": "tenants", "rate_per_s": 10, "duration_s": 60,
                        "tenants": [{**TENANT, **(tenant or {})}], **workload}
    return data


def refused(data: dict[str, Any]) -> ScenarioError:
    """The error preparing the scenario raises, at once (it used to hang or exhaust memory)."""
    started = time.perf_counter()
    with pytest.raises(ScenarioError) as err:
        prepare(Scenario.from_dict(data))
    assert time.perf_counter() - started < 10
    assert "\n" not in str(err.value)
    return err.value


def test_tiny_burst_interval_is_counted_before_the_run():
    err = refused(tenants({"behavior": {"type": "bursty", "burst_every_s": 1e-6}}))
    assert err.path == "workload.tenants[0].behavior.burst_every_s"
    assert "about 1,200,000,600 requests" in err.problem and "limit is 10,000,000" in str(err)


def test_a_burst_interval_that_rounds_to_0_us_is_refused():
    """An adversarial tenant's bursts at `at += every`: 0 µs looped at t = 0 for ever."""
    err = refused(tenants({"behavior": {"type": "adversarial", "burst_every_s": 4e-7}}))
    assert err.path == "workload.tenants[0].behavior.burst_every_s"
    assert "rounds to 0 µs" in err.problem and err.valid == ">= 1e-06"


def test_many_turns_per_session_are_counted():
    err = refused(tenants({"request_type": "chat", "chat": {
        "turns": {"type": "constant", "value": 1_000_000}}}))
    assert err.path == "workload.tenants[0].chat.turns"
    assert "one request would be about" in err.problem  # the last turn carries it all


def test_many_short_turns_are_counted_as_requests():
    err = refused(tenants({"request_type": "chat", "chat": {
        "turns": {"type": "constant", "value": 20_000}, "context_growth": "bounded",
        "max_context_tokens": 100}}, rate_per_s=100))
    assert err.path == "workload.tenants[0].chat.turns" and "requests" in err.problem


def test_rate_multiplier_is_counted():
    err = refused(tenants({"behavior": {"type": "abusive", "rate_multiplier": 1e9}}))
    assert err.path == "workload.tenants[0].behavior.rate_multiplier"
    assert "rate_multiplier 1e+09" in err.problem


def test_prompt_multiplier_is_counted():
    err = refused(tenants({"behavior": {"type": "abusive", "prompt_multiplier": 1e9}}))
    assert err.path == "workload.tenants[0].behavior.prompt_multiplier"


def test_output_multiplier_is_counted():
    err = refused(tenants({"behavior": {"type": "abusive", "output_multiplier": 1e9}}))
    assert err.path == "workload.tenants[0].behavior.output_multiplier"


def test_load_profile_multiplier_is_counted():
    err = refused(tenants(load_profile={"type": "step", "steps": [
        {"at_s": 1, "multiplier": 1e9}]}))
    assert err.path == "workload.load_profile"


def test_reasoning_chain_is_counted():
    err = refused(tenants({"request_type": "reasoning", "reasoning": {
        "chain_length": {"type": "constant", "value": 1e7}}}))
    assert err.path == "workload.tenants[0].reasoning.chain_length"


def test_agentic_tool_calls_are_counted():
    err = refused(tenants({"request_type": "agentic", "agentic": {
        "tool_call_probability": 1, "max_tool_calls": {"type": "constant", "value": 1e7}}}))
    assert err.path == "workload.tenants[0].agentic.max_tool_calls"


def test_rate_and_duration_alone_are_counted():
    err = refused(tenants(rate_per_s=1e6, duration_s=600))
    assert err.path == "workload.rate_per_s"  # the factor that took it over the limit


def test_max_requests_bounds_the_request_count():
    data = tenants({"behavior": {"type": "abusive", "rate_multiplier": 1e9}}, max_requests=50)
    assert prepare(Scenario.from_dict(data)) is not None


def test_total_tokens_are_bounded():
    data = copy.deepcopy(BASE)
    data["workload"].update(num_requests=MAX_REQUESTS, rate_per_s=1e4,
                            prompt={"mean": 5000, "stdev": 0, "min": 1, "max": 10_000})
    err = refused(data)
    assert err.path == "workload.num_requests" and "tokens" in err.problem


def test_autoscaler_polls_over_the_run_are_bounded():
    data = tenants()
    data["deployment"] = {"models": [{"name": BASE["model"]["name"], "configs": [
        {"id": "a", "replicas": {"initial": 1, "min": 1, "max": 2}}]}],
        "autoscaler": {"interval_s": 1e-6}}
    err = refused(data)
    assert err.path == "deployment.autoscaler.interval_s" and "polls" in err.problem


def test_random_crashes_over_the_run_are_bounded():
    """A crash a millisecond on each of 4 instances for 10,000 s is 40 million crashes."""
    data = tenants(duration_s=10_000, rate_per_s=0.1)
    data["cluster"] = {"instances": 4}
    data["faults"] = {"random_crashes": [{"mtbf_s": {"type": "constant", "value": 1e-3},
                                          "mttr_s": {"type": "constant", "value": 0}}]}
    err = refused(data)
    assert err.path == "faults.random_crashes[0].mtbf_s" and "crashes" in err.problem
    data["faults"]["random_crashes"][0]["instances"] = ["instance_0"]  # 10 million: allowed
    check_work(Scenario.from_dict(data))


def test_a_trace_holding_too_many_tokens_is_refused_at_its_line(tmp_path, monkeypatch):
    monkeypatch.setattr(trace_file, "MAX_TOTAL_TOKENS", 25)
    path = write(tmp_path / "t.csv", azure_text([
        ("2023-11-16 18:17:03.9799600", 10, 5), ("2023-11-16 18:17:04.9799600", 10, 5)]))
    with pytest.raises(ScenarioError, match=r"line 3: the rows so far hold more than 25 "
                       "tokens"):
        prepare(trace_scenario(path))


def test_the_limits_hold_through_the_command_line_in_a_subprocess(tmp_path):
    """The issue's worst case (a prompt multiplier: 21 GB in 10 s) exits 2 at once."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tenants({"behavior": {"type": "abusive",
                                                         "prompt_multiplier": 1e9}})))
    done = subprocess.run([sys.executable, "-m", "blis_simpy", "run", str(path), "--out",
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "behavior.prompt_multiplier" in done.stderr and not (tmp_path / "out").exists()


# --- every duration stays positive on the µs clock -----------------------------------------------

def duration_fields() -> list[tuple[type, dataclasses.Field[Any]]]:
    """Every `*_s` field that must be > 0, in every config section and policy parameters."""
    import importlib
    import pkgutil

    import blis_simpy

    found = []
    for module in pkgutil.walk_packages(blis_simpy.__path__, "blis_simpy."):
        if module.name.split(".")[1] not in ("config", "policies", "search"):
            continue
        for obj in vars(importlib.import_module(module.name)).values():
            if isinstance(obj, type) and dataclasses.is_dataclass(obj) \
                    and obj.__module__ == module.name:
                found += [(obj, f) for f in dataclasses.fields(obj)
                          if f.name.endswith("_s") and f.metadata.get("gt") == 0]
    return found


RATES = {"rate_per_s", "gb_per_s", "blocks_per_s", "bandwidth_gb_s"}


def test_every_duration_rounded_to_us_is_checked_to_stay_positive():
    fields = duration_fields()
    assert len(fields) > 15  # the walk found them
    for cls, field in fields:
        hint = schema.field_types(cls)[field.name]
        if field.name in RATES:
            assert not schema.duration(field.name)
            continue
        path = f"{cls.__name__}.{field.name}"
        with pytest.raises(ScenarioError, match="rounds to 0 µs"):
            schema.convert(hint, 4e-7, path, field.metadata)
        assert schema.convert(hint, 1e-6, path, field.metadata) == 1e-6


def test_a_periodic_refresh_of_0_us_is_refused():
    data = copy.deepcopy(BASE)
    data["cluster"] = {"observability": {"queue_depth": {"mode": "periodic",
                                                         "interval_s": 1e-7}}}
    with pytest.raises(ScenarioError, match=r"interval_s: 1e-07 s is 0 µs"):
        Scenario.from_dict(data)


# --- the estimate against real runs --------------------------------------------------------------

DIST = st.sampled_from([{"type": "constant", "value": 30},
                        {"type": "gaussian", "mean": 40, "stdev": 10, "min": 1},
                        {"type": "exponential", "mean": 25}])


@st.composite
def small_tenant(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["completion", "chat", "agentic", "reasoning"]))
    tenant: dict[str, Any] = {"id": "t", "request_type": kind, "prompt": draw(DIST),
                              "output": draw(DIST)}
    if kind == "chat":
        tenant["chat"] = {"turns": {"type": "constant", "value": draw(st.integers(1, 4))},
                          "think_time_s": {"type": "constant", "value": 0.01},
                          "context_growth": draw(st.sampled_from(["linear", "sublinear",
                                                                  "bounded"]))}
    if kind == "agentic":
        tenant["agentic"] = {"tool_call_probability": draw(st.sampled_from([0.0, 0.5, 1.0])),
                             "max_tool_calls": {"type": "constant",
                                                "value": draw(st.integers(0, 3))},
                             "tool_latency_s": {"type": "constant", "value": 0.01}}
    if kind == "reasoning":
        tenant["reasoning"] = {"chain_length": {"type": "constant",
                                                "value": draw(st.integers(1, 4))}}
    behavior = draw(st.sampled_from(["normal", "abusive", "bursty"]))
    if behavior == "abusive":
        tenant["behavior"] = {"type": "abusive", "rate_multiplier": 2, "prompt_multiplier": 2,
                              "output_multiplier": 2}
    elif behavior == "bursty":
        tenant["behavior"] = {"type": "bursty", "burst_every_s": 1,
                              "burst_size": {"type": "constant", "value": 3}}
    return tenant


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_tenant(), st.sampled_from([None, {"type": "step", "steps": [
    {"at_s": 2, "multiplier": 3}]}]))
def test_the_estimate_matches_what_small_runs_generate(tenant, profile):
    data = tenants(tenant, rate_per_s=5, duration_s=6, load_profile=profile)
    data["engine"] = {"kv_blocks": 20_000}
    scenario = Scenario.from_dict(data)
    sources = sources_of(scenario.workload)
    expected = sum(s.requests for s in sources)
    tokens = sum(s.tokens for s in sources)
    requests = run(scenario).requests
    arrived, seen = len(requests), float((requests.input_tokens + requests.output_tokens).sum())
    noise = 4 * math.sqrt(expected) + 5  # Poisson arrivals
    assert abs(arrived - expected) <= noise + 0.35 * expected, (arrived, expected)
    assert seen <= 1.6 * tokens + 200 * noise, (seen, tokens)


def test_every_library_scenario_is_within_the_limits():
    from blis_simpy.config.library import LIBRARY

    for path in sorted(LIBRARY.glob("*.yaml")) + sorted((LIBRARY / "bench").glob("*.yaml")):
        check_work(Scenario.from_yaml(path))



def test_agentic_estimate_counts_the_context_long_sessions_carry():
    """Half the steps call a tool, up to 3 calls: the estimate's carried context is the mean
    of S(S-1)/2 over the session lengths S (1.375 growths), not that of the mean length put
    into it (0.82), which undercounted this run's tokens by half (issue 29 class 4)."""
    agent = {"id": "t", "request_type": "agentic", "prompt": {"type": "constant", "value": 30},
             "output": {"type": "constant", "value": 30},
             "agentic": {"tool_call_probability": 0.5,
                         "max_tool_calls": {"type": "constant", "value": 3},
                         "tool_latency_s": {"type": "constant", "value": 0.01}}}
    data = tenants(agent, rate_per_s=20, duration_s=20)
    data["engine"] = {"kv_blocks": 20_000}
    scenario = Scenario.from_dict(data)
    tokens = sum(s.tokens for s in sources_of(scenario.workload))
    requests = run(scenario).requests
    seen = float((requests.input_tokens + requests.output_tokens).sum())
    assert 0.8 * tokens <= seen <= 1.3 * tokens, (seen, tokens)  # the old estimate: 1.65x
