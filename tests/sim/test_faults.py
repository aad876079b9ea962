"""The `faults:` section: crashes at given times and at random (MTBF/MTTR from the "faults"
stream), a whole pool lost, slowed instances; lost requests retried with a limit and a
back-off, or failed; the autoscaler replacing capacity; the metrics, the anomaly, the event log
and the faults table; the same seed giving the same run."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import blis_simpy
from blis_simpy.api import prepare, simulate
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.records import Recorder
from tests.cluster.autoscale_helpers import scenario as autoscaled
from tests.conftest import merge, scenario


def run(faults: dict[str, Any], **changes: Any) -> blis_simpy.Result:
    changes.setdefault("cluster", {"instances": 2})
    return blis_simpy.run(scenario(faults=faults, **changes), checks=True,
                          recorder=Recorder(events=True))


def test_a_crash_at_a_time_with_retries_serves_everything():
    result = run({"crashes": [{"at_s": 0.5, "instances": ["instance_0"], "repair_s": 0.4}]})
    f = result.summary["faults"]
    assert f["crashes"] == f["repairs"] == 1
    assert f["lost_requests"] > 0 and f["retried_requests"] == f["lost_requests"]
    assert f["failed_requests"] == 0 and result.summary["completed_requests"] == 40
    assert f["lost_tokens"] > 0 and 0 < f["goodput_lost_fraction"] < 1
    # instance_0 was down 0.4 s of the run, instance_1 never
    assert 0.5 < f["availability"] < 1 and f["downtime_s"] == pytest.approx(0.4)


def test_lose_fails_every_request_the_instance_held():
    result = run({"crashes": [{"at_s": 0.5, "instances": ["instance_0"]}],
                  "requests": {"on_failure": "lose"}})
    f = result.summary["faults"]
    failed = result.requests[result.requests.final_state == "failed"]
    assert f["failed_requests"] == len(failed) == f["lost_requests"] > 0
    assert f["retries"] == 0
    assert failed.reject_reason.str.startswith("lost with instance_0").all()
    assert failed.completion_s.isna().all()


def test_a_failed_request_stays_failed_when_its_client_timeout_passes():
    """A request that failed (lost with its instance, no retry) has ended: its client's
    timeout, passing later, neither turns it into a timed-out one nor ends it twice."""
    result = run({"crashes": [{"at_s": 0.5, "instances": ["instance_0"]}],
                  "requests": {"on_failure": "lose"}}, workload={"timeout_s": 1.0})
    f = result.summary["faults"]
    failed = result.requests[result.requests.final_state == "failed"]
    assert f["failed_requests"] == len(failed) == f["lost_requests"] > 0
    assert failed.timed_out_s.isna().all()
    assert result.summary["timed_out_requests"] == (result.requests.final_state
                                                     == "timed_out").sum()


def test_retries_stop_at_the_limit_with_doubling_back_off():
    """Both instances down for good: nothing can take a retry, so every request in flight or
    arriving uses all its retries (0.1 s, then 0.2 s, then 0.4 s later) and fails."""
    result = run({"crashes": [{"at_s": 0.3}],
                  "requests": {"max_retries": 3, "backoff_s": 0.1}})
    faults = result.faults
    first = faults[faults.event == "retry"].groupby("request").time_s.apply(list)
    waits = [np.diff(times).round(6).tolist() for times in first if len(times) == 3]
    assert waits and all(w == [0.1, 0.2] for w in waits)
    f = result.summary["faults"]
    assert f["failed_requests"] == 40 - result.summary["completed_requests"]
    failed = result.requests[result.requests.final_state == "failed"]
    assert failed.reject_reason.str.endswith("after 3 retries").all()


def test_a_whole_pool_lost_is_replaced_by_the_autoscaler():
    data = autoscaled({"type": "threshold"}, rate=10, duration=4,
                      pool={"min": 2, "max": 4, "initial": 2},
                      actuation={"provisioning_s": {"type": "constant", "value": 0.5}})
    data["faults"] = {"crashes": [{"at_s": 1.0, "config": "pool", "reason": "node lost"}]}
    sim = prepare(Scenario.from_dict(data), checks=True)
    result = simulate(sim)
    states = {inst.id: str(inst.state) for inst in sim.fleet}
    assert states["instance_0"] == states["instance_1"] == "dead"
    replaced = [e for e in result.scale_events.itertuples() if "replace" in e.reason]
    assert replaced and replaced[0].time_s >= 1.0 and replaced[0].to == 2
    assert result.summary["completed_requests"] > 0
    assert result.summary["faults"]["crashes"] == 2
    anomalies = result.anomalies[result.anomalies.type == "instance_failure"]
    assert len(anomalies) == 2 and (anomalies.detail.str.startswith("node lost")).all()


def test_a_replica_lost_for_good_is_no_longer_counted_or_billed():
    """A fixed pool of 2 loses instance_1 for good at 1 s (no repair, no autoscaler): from
    then on one replica is left, in replicas.csv, the replica-seconds, the average and the
    cost; a dead replica is not billed as if it still ran."""
    data = autoscaled(None, rate=10, duration=4, pool={"min": 2, "max": 2, "initial": 2})
    data["faults"] = {"crashes": [{"at_s": 1.0, "instances": ["instance_1"]}]}
    result = blis_simpy.run(Scenario.from_dict(data), checks=True)
    replicas = result.replicas
    assert replicas.replicas.iloc[-1] == 1 and replicas.replicas.max() == 2
    pool = result.summary["deployment"]["configs"]["pool"]
    seconds = pool["replica_seconds"] / pool["avg_replicas"]  # the run's length
    assert pool["replica_seconds"] == pytest.approx(seconds + 1.0)
    assert pool["avg_replicas"] < 1.5 and pool["peak_replicas"] == 2


def test_random_crashes_follow_the_seed():
    faults = {"random_crashes": [{"mtbf_s": {"type": "exponential", "mean": 0.3},
                                  "mttr_s": {"type": "constant", "value": 0.05}}]}
    a, b = run(faults), run(faults)
    assert a.faults.equals(b.faults) and a.requests.equals(b.requests)
    assert a.summary["faults"]["crashes"] >= 2
    other = run(faults, seed=8)
    assert not a.faults.equals(other.faults)
    states = a.requests.final_state.value_counts().to_dict()
    assert states.get("completed", 0) + states.get("failed", 0) == 40
    assert states.get("failed", 0) == a.summary["faults"]["failed_requests"]


def test_a_slowdown_multiplies_step_times_for_its_window():
    base = blis_simpy.run(scenario())
    slow = run({"slowdowns": [{"at_s": 0.4, "for_s": 0.3, "factor": 3.0}]},
               cluster={"instances": 1})
    steps = slow.steps
    inside = steps[(steps.start_s >= 0.4) & (steps.start_s < 0.7)]
    assert len(inside) > 0
    later = steps[steps.start_s >= 0.7]
    # the model's step time for the same tokens is a third of the slowed one
    b0, b1, b2 = scenario().latency.beta  # type: ignore[misc]
    expected = (b0 + b1 * inside.prefill_tokens + b2 * inside.decode_requests).astype(int)
    assert np.allclose(inside.duration_ms * 1000, np.round(expected * 3), atol=1)
    expected_later = (b0 + b1 * later.prefill_tokens + b2 * later.decode_requests).astype(int)
    assert np.allclose(later.duration_ms * 1000, expected_later, atol=1)
    assert slow.summary["e2e_mean_ms"] > base.summary["e2e_mean_ms"]
    rows = slow.faults
    assert list(rows.event) == ["slow", "normal"] and list(rows.time_s) == [0.4, 0.7]


def test_crashes_are_in_the_event_log_and_the_anomalies():
    result = run({"crashes": [{"at_s": 0.5, "instances": ["instance_1"], "repair_s": 0.2}]})
    kinds = {kind for _, kind, _, _ in result.events}
    assert {"crashed", "repaired", "retried"} <= kinds
    anomaly = result.anomalies[result.anomalies.type == "instance_failure"].iloc[0]
    assert (anomaly.instance, anomaly.time_s, anomaly.end_s) == ("instance_1", 0.5, 0.7)
    assert anomaly.requests and 0.5 <= anomaly.severity <= 1
    assert result.metrics["anomalies"]["instance_failure"] == 1


def test_a_run_without_faults_writes_nothing_new(tmp_path):
    result = blis_simpy.run(scenario())
    assert "faults" not in result.summary and result.faults is None
    result.save(tmp_path / "run")
    assert not (tmp_path / "run" / "faults.csv").exists()


def test_faults_are_written_to_a_table(tmp_path):
    result = run({"crashes": [{"at_s": 0.5, "instances": ["instance_1"]}]})
    result.save(tmp_path / "run")
    text = (tmp_path / "run" / "faults.csv").read_text().splitlines()
    assert text[0] == "time_s,event,instance,request,detail"
    assert any(",crash,instance_1,," in line for line in text)


def test_p_d_instances_fail_and_their_handoffs_with_them():
    from tests.cluster.pd_helpers import pd_scenario

    data = pd_scenario(prefill=2, decode=2, rate=30)
    data = merge(data, {"faults": {"crashes": [
        {"at_s": 0.4, "instances": ["instance_0"], "repair_s": 0.2},
        {"at_s": 0.5, "instances": ["instance_2"], "repair_s": 0.2}]}})
    result = blis_simpy.run(Scenario.from_dict(data), checks=True)
    states = set(result.requests.final_state)
    assert states <= {"completed", "failed"}
    assert result.summary["faults"]["lost_requests"] > 0
    assert result.summary["completed_requests"] > 0
    assert result.summary["faults"]["crashes"] == 2
