"""Degenerate runs run, and say so (blis_simpy/metrics/warnings.py): `warnings` in the summary
(summary.json) and `warning:` lines on stderr; a healthy run has none."""

from __future__ import annotations

import json

import yaml
from typer.testing import CliRunner

from blis_simpy.api import run
from blis_simpy.cli import app
from blis_simpy.config.scenario import Scenario
from tests.conftest import BASE, merge, scenario

SMALL = {"workload": {"num_requests": 24}}  # enough that percentiles mean something


def small(**changes):
    return scenario(**merge(SMALL, changes))


def test_a_healthy_run_has_no_warnings():
    assert run(small()).warnings == []


def test_everything_rejected_is_warned_with_its_reason_codes():
    result = run(small(policies={"admission": {"type": "reject-all"}}))
    assert result.warnings == ["every request was rejected (24 admission)"]
    assert result.summary["rejected_by_reason"] == {"admission": 24}
    assert result.summary["admitted_requests"] == 0


def test_a_kv_pool_that_cannot_hold_one_request_is_warned():
    result = run(small(engine={"kv_blocks": 1}))
    assert set(result.requests.reject_code) == {"exceeds_kv_capacity"}
    assert any("whole KV pool" in w for w in result.warnings)
    assert result.warnings[0].startswith("every request was rejected")


def test_a_horizon_before_the_first_arrival_is_warned():
    result = run(small(horizon_s=0.000001))
    assert result.summary["arrived_requests"] == 0
    assert result.warnings == ["no request arrived (an empty trace, or a horizon before the "
                               "first arrival): nothing was simulated"]
    assert result.evaluation is not None and result.evaluation.fitness == 0.0


def test_an_empty_trace_runs_and_is_warned(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_time,request_id,model,prefill_tokens,decode_tokens\n")
    data = {k: v for k, v in BASE.items() if k != "workload"}
    result = run(Scenario.from_dict({**data, "workload": {"type": "trace", "path": str(trace)}}))
    assert result.summary["completed_requests"] == 0
    assert result.warnings[0].startswith("no request arrived")


def test_low_completion_is_warned():
    result = run(small(horizon_s=0.3))
    done, arrived = result.summary["completed_requests"], result.summary["arrived_requests"]
    assert done < arrived / 2
    assert any(w.startswith(f"only {done} of {arrived}") for w in result.warnings)


def test_a_tenant_that_never_sends_is_warned():
    tenant = {"prompt": {"type": "constant", "value": 100},
              "output": {"type": "constant", "value": 10}}
    workload = {"type": "tenants", "rate_per_s": 10, "duration_s": 4,
                "tenants": [{"id": "busy", "rate_fraction": 1.0, **tenant},
                            {"id": "quiet", "rate_fraction": 0.0, **tenant}]}
    data = {k: v for k, v in BASE.items() if k != "workload"}
    result = run(Scenario.from_dict({**data, "workload": workload}))
    assert result.warnings == ["tenant 'quiet' sent no request within the run"]


def test_warnings_are_printed_on_stderr_and_written_to_summary_json(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(merge(BASE, {
        "workload": {"num_requests": 25}, "policies": {"admission": {"type": "reject-all"}}})))
    out = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "o"), "--quiet"])
    assert out.exit_code == 0
    assert "warning: every request was rejected (25 admission)" in out.stderr
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["warnings"] == ["every request was rejected (25 admission)"]


def test_a_speculation_rate_for_a_tenant_the_trace_lacks_is_warned(tmp_path):
    """A trace names its tenants only in its rows: a tenant_acceptance key none of them has
    (a typo) cannot be refused before the run, so the run says the rate was never used."""
    from tests.conftest import trace_run_scenario, write_trace

    trace = write_trace(tmp_path / "t.csv", [(0.01 * i, [1, 2, 3, 4], 8) for i in range(6)])
    result = run(trace_run_scenario(trace, compat="none", engine={"speculative": {
        "method": "ngram", "draft_tokens": 2, "acceptance_rate": 0.5,
        "tenant_acceptance": {"zzz": 0.9}}}))
    assert any("tenant_acceptance names 'zzz'" in w for w in result.warnings), result.warnings


def test_a_window_that_excludes_every_request_says_so_not_that_none_arrived():
    """newcomer 16's #11: a window starting after the run measured nothing, and the warning
    said "no request arrived ... nothing was simulated" although every request was."""
    result = run(small(evaluation={"window": {"warmup_s": 1000}}))
    assert result.summary["arrived_requests"] == 0
    assert result.warnings == ["the measurement window (from 1000 s to the run's end) holds "
                               "none of the 24 requests simulated: every latency, rate and "
                               "count describes nothing (evaluation.window)"]


def test_a_percentile_from_few_requests_is_warned_with_their_number():
    result = run(small(workload={"num_requests": 3}))
    assert result.warnings == ["only 3 requests measured: percentiles and rates from fewer "
                               "than 20 describe little (a p99 of so few is their maximum)"]
    ends = sorted(run(small()).requests.arrival_s)
    late = run(small(evaluation={"window": {"warmup_s": float(ends[-2])}}))
    assert late.summary["arrived_requests"] == 2
    assert late.warnings[-1].startswith("only 2 requests measured in the measurement window "
                                        f"(from {float(ends[-2]):g} s to the run's end)")


def test_requests_still_in_an_admission_delay_at_the_end_are_named():
    """newcomer 17's #9: every request delayed past the horizon appeared nowhere in the
    sentence (0 rejected, 0 timed out, 0 queued, 0 running of 240 arrived)."""
    tree = {"if": {"signal": "request.age_s", "op": "<", "value": 30},
            "then": {"action": "delay", "delay_s": 10}, "else": {"action": "admit"}}
    result = run(scenario(**merge(BASE, {"horizon_s": 20, "policies": {
        "admission": {"type": "decision-tree", "params": {"tree": tree}}}})))
    [line] = [w for w in result.warnings if w.startswith("no request completed")]
    arrived = result.summary["arrived_requests"]
    assert arrived > 0
    assert f"{arrived} not yet in an instance's queue (in an admission delay" in line
