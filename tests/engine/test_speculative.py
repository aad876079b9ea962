"""Issue 35 item 7, speculative decoding (n-gram): `engine.speculative` drafts tokens each decode
step, a geometric draw from the instance's own stream accepts a prefix of them, the step verifies
1 + drafted positions (their cost in the step models, their KV room), and summary.json's
`speculation` counts them. Invariants under hypothesis: tokens never exceed the output length and
KV blocks are conserved (the debug checks after every block operation) with speculative tokens;
other draws do not move; bad keys exit 2 naming the key; the library scenario raises tokens/s."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import blis_simpy
from blis_simpy.config.library import LIBRARY
from blis_simpy.config.scenario import Scenario
from blis_simpy.config.speculation import SpeculativeConfig
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.ordering import Background
from tests.conftest import BASE, merge
from tests.engine.test_invariants import build_trace, engines, request_rows
from tests.sim.test_cluster_invariants import clusters, simulated

TENANT = {"prompt": {"type": "gaussian", "mean": 200, "stdev": 50, "min": 8, "max": 800},
          "output": {"type": "gaussian", "mean": 60, "stdev": 20, "min": 1, "max": 150}}


def spec_data(k: int = 4, rate: float = 0.7, **changes: Any) -> dict[str, Any]:
    data = {**{key: v for key, v in BASE.items() if key != "workload"},
            "engine": {"speculative": {"draft_tokens": k, "acceptance_rate": rate}},
            "workload": {"type": "tenants", "rate_per_s": 20, "duration_s": 2.0,
                         "tenants": [{"id": "t", **TENANT}]}}
    return merge(data, changes)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=request_rows, engine=engines, k=st.integers(1, 6),
       rate=st.sampled_from([0.0, 0.3, 0.8, 1.0]))
def test_tokens_never_exceed_the_output_and_kv_is_conserved_with_speculation(rows, engine, k,
                                                                             rate):
    """Random small workloads under KV pressure (preemption included), the debug checks on
    (KV conservation after every block operation); a watcher sees no running request emit more
    than its output length; at the end every token came exactly once and every block is back."""
    engine = {**engine, "speculative": {"draft_tokens": k, "acceptance_rate": rate}}
    with tempfile.TemporaryDirectory() as folder:
        sim = build_trace(rows, engine, Path(folder))
        broken: list[str] = []

        def watch():
            while sim.work_left():
                for inst in sim.fleet:
                    for r in inst.running:
                        if r.emitted > r.max_tokens:
                            broken.append(f"{r.name}: {r.emitted} > {r.max_tokens}")
                yield Background(sim.env, 500)

        sim.env.process(watch())
        sim.run()  # raises InvariantError if KV conservation or the clock breaks
    assert not broken, broken[:5]
    records = sim.records()
    req = records.requests
    instance = sim.fleet.get("instance_0")
    assert not instance.running and instance.kv.used == 0
    for i in range(len(req)):
        if req.state[i] == "completed":
            assert req.emitted[i] == req.output_len[i]
    drafted, accepted, steps = records.speculation
    assert 0 <= accepted <= drafted <= k * steps
    if rate == 0.0:
        assert accepted == 0
    if rate == 1.0:
        assert accepted == drafted


def test_the_acceptance_draw_matches_the_configured_rate_and_tokens_per_step_rise():
    result = blis_simpy.run(spec_data(4, 0.7, workload={"tenants": [
        {"id": "t", **TENANT, "output": {"type": "constant", "value": 400}}]}))
    spec = result.summary["speculation"]
    expected = SpeculativeConfig(draft_tokens=4, acceptance_rate=0.7)
    assert spec["expected_tokens_per_step"] == pytest.approx(expected.expected_tokens())
    # the cap near each output's end trims few drafts: close to the full-length figures
    assert spec["acceptance_rate"] == pytest.approx(spec["expected_acceptance_rate"], abs=0.02)
    assert spec["tokens_per_verify_step"] == pytest.approx(expected.expected_tokens(), abs=0.1)
    assert (result.requests["final_state"] == "completed").all()
    assert (result.requests["generated_tokens"] == 400).all()


def test_speculation_draws_from_its_own_stream_so_the_workload_does_not_move():
    on = blis_simpy.run(spec_data())
    off = blis_simpy.run(merge(spec_data(), {"engine": {"speculative": None}}))
    for column in ("arrival_s", "input_tokens", "output_tokens"):
        assert np.array_equal(on.requests[column].to_numpy(), off.requests[column].to_numpy())
    again = blis_simpy.run(spec_data())
    assert again.summary["speculation"] == on.summary["speculation"]


def test_a_verify_step_costs_more_than_a_decode_but_less_than_its_tokens_in_decodes():
    """The physical model: verifying 1 + 4 positions of a small batch is memory-bound, so it
    costs little more than one decode step and far less than five."""
    base = {"latency": {"type": "physical", "alpha": None, "beta": None},
            "workload": {"type": "tenants", "rate_per_s": 4, "duration_s": 2.0,
                         "tenants": [{"id": "t", **TENANT}]}}
    on = blis_simpy.run(spec_data(4, 0.0, **base))
    off = blis_simpy.run(merge(spec_data(**base), {"engine": {"speculative": None}}))
    step_on = on.steps[on.steps["decode_requests"] > 0]["duration_ms"].median()
    step_off = off.steps[off.steps["decode_requests"] > 0]["duration_ms"].median()
    assert step_off < step_on < 2 * step_off


def test_off_leaves_no_section_and_no_key():
    plain = blis_simpy.run(merge(BASE, {"workload": {"num_requests": 5}}))
    assert "speculation" not in plain.summary
    assert "speculative" not in plain.scenario.to_dict()["engine"]


def test_the_library_scenario_raises_tokens_per_second_at_acceptance_0_7():
    path = LIBRARY / "speculative-decoding.yaml"
    on = blis_simpy.run(path)
    off = blis_simpy.run(path, overrides={"engine.speculative": None})
    spec = on.summary["speculation"]
    assert spec["acceptance_rate"] == pytest.approx(spec["expected_acceptance_rate"], abs=0.02)
    assert on.summary["tokens_per_sec"] > 1.8 * off.summary["tokens_per_sec"]


@pytest.mark.parametrize(("change", "path"), [
    ({"engine": {"speculative": {"draft_tokens": 0, "acceptance_rate": 0.5}}},
     "engine.speculative.draft_tokens"),
    ({"engine": {"speculative": {"draft_tokens": 65, "acceptance_rate": 0.5}}},
     "engine.speculative.draft_tokens"),
    ({"engine": {"speculative": {"draft_tokens": 2, "acceptance_rate": 1.5}}},
     "engine.speculative.acceptance_rate"),
    ({"engine": {"speculative": {"draft_tokens": 2, "acceptance_rate": -0.1}}},
     "engine.speculative.acceptance_rate"),
    ({"engine": {"speculative": {"acceptance_rate": "high"}}},
     "engine.speculative.acceptance_rate"),
    ({"engine": {"speculative": {"draft_tokens": 2, "acceptance_rate": 0.5,
                                 "method": "draft"}}}, "engine.speculative.method"),
    ({"engine": {"speculative": {"draft_tokens": 2, "acceptance_rate": 0.5, "colour": 1}}},
     "engine.speculative.colour"),
    ({"compat": "blis"}, "engine.speculative"),
])
def test_bad_speculative_keys_fail_before_the_run_naming_the_key(change, path):
    with pytest.raises(ScenarioError) as err:
        blis_simpy.prepare(merge(spec_data(), change))
    assert err.value.path == path, str(err.value)


def test_a_bad_speculative_key_exits_2_naming_it_and_what_is_valid(tmp_path):
    from typer.testing import CliRunner

    from blis_simpy.cli import app
    from blis_simpy.core.yamlio import dump_yaml

    path = tmp_path / "s.yaml"
    path.write_text(dump_yaml(merge(spec_data(), {"engine": {"speculative": {
        "method": "eagle"}}})))
    out = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "o")])
    assert out.exit_code == 2 and "engine.speculative.method" in out.output
    assert "ngram" in out.output and "Traceback" not in out.output


@st.composite
def speculative_clusters(draw: st.DrawFn) -> Scenario:
    """tests/sim's random clusters (every policy template, tenants, sessions, closed loops,
    timeouts, horizons, small KV caches), native ones, with speculation on."""
    scenario = draw(clusters())
    assume(scenario.compat == "none")
    return Scenario.from_dict(merge(scenario.to_dict(), {"engine": {"speculative": {
        "draft_tokens": draw(st.integers(1, 6)),
        "acceptance_rate": draw(st.sampled_from([0.0, 0.5, 0.9, 1.0]))}}}))


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.filter_too_much])
@given(scenario=speculative_clusters())
def test_at_cluster_scale_kv_is_conserved_and_no_request_gets_more_than_its_output(scenario):
    """With the debug checks on (KV conservation after every block operation, a monotone
    clock), every request ends in one state with no more tokens than its output length (a
    completed one with exactly that many), no step exceeds its engine's limits, and the
    summary counts each token once."""
    run = simulated(scenario)
    req, steps, summary = run.result.requests, run.result.steps, run.result.summary
    assert set(req.final_state) <= {"completed", "rejected", "timed_out", "arriving", "queued",
                                    "running"}
    assert (req.generated_tokens <= req.output_tokens).all()
    done = req[req.final_state == "completed"]
    assert (done.generated_tokens == done.output_tokens).all()
    assert summary["total_output_tokens"] == int(req.generated_tokens.sum())
    engine = run.sim.scenario.engine
    assert (steps.kv_blocks_used <= engine.kv_blocks).all()
    assert (steps.batch_size <= engine.max_running_requests).all()
    spec = summary["speculation"]
    assert 0 <= spec["accepted_tokens"] <= spec["drafted_tokens"]
