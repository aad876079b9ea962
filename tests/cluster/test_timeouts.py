"""Client timeouts (issue 11): a request whose client gives up is abandoned wherever it is
(gateway stage, queueing delay, wait queue, batch: its KV blocks freed) and ends `timed_out`,
counted in the summary, as an SLO miss and never as goodput."""

from __future__ import annotations

import numpy as np
import pytest

from blis_simpy.api import prepare, simulate
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.records import Recorder
from tests.conftest import BASE, merge, scenario

TIMEOUT_S = 1.0  # a request is served in about 0.4 s; the queue takes longer
OVERLOAD = {  # one instance, 4 running at most, arrivals far faster than service
    "engine": {"kv_blocks": 400, "max_running_requests": 4},
    "workload": {"type": "distribution", "num_requests": 60, "rate_per_s": 200,
                 "prompt": {"mean": 300, "stdev": 0, "min": 300, "max": 300},
                 "output": {"mean": 60, "stdev": 0, "min": 60, "max": 60},
                 "timeout_s": TIMEOUT_S},
}


def with_workload(workload: dict) -> Scenario:
    return Scenario.from_dict({**merge(BASE, {"engine": OVERLOAD["engine"]}),
                               "workload": workload})


def run(sc: Scenario):
    sim = prepare(sc, recorder=Recorder(events=True), checks=True)
    return sim, simulate(sim)


def test_client_timeout_abandons_requests_waiting_and_running_and_frees_their_kv():
    sim, result = run(scenario(**OVERLOAD))
    req = result.requests
    timed_out = req[req.final_state == "timed_out"]
    assert set(req.final_state) == {"completed", "timed_out"}
    waited = timed_out[timed_out.scheduled_s.isna()]
    ran = timed_out[timed_out.scheduled_s.notna()]
    assert len(waited) and len(ran), "some gave up waiting, some in the batch"
    # each one at its arrival + the timeout exactly, with no completion or latency of its own
    assert np.allclose(timed_out.timed_out_s - timed_out.arrival_s, TIMEOUT_S)
    assert timed_out.completion_s.isna().all() and timed_out.e2e_ms.isna().all()
    assert (timed_out.first_token_s.fillna(0) <= timed_out.timed_out_s).all()
    done = req[req.final_state == "completed"]
    assert (done.e2e_ms <= TIMEOUT_S * 1000 + 1e-6).all()
    assert done.timed_out_s.isna().all()
    instance = sim.fleet.get("instance_0")
    assert instance is not None
    assert instance.kv.used == 0 and not instance.running and not instance.wait_queue
    summary = result.summary
    assert summary["timed_out_requests"] == len(timed_out)
    assert summary["completed_requests"] + summary["timed_out_requests"] == len(req)
    assert any("timed out" in w for w in result.warnings)
    timed = [s for _, kind, s, _ in result.events or () if kind == "timed_out"]
    assert sorted(timed) == sorted(timed_out.id)


def test_timed_out_requests_count_as_slo_misses_and_never_as_goodput():
    targets = {"evaluation": {"slo_targets": {"default": {"e2e_ms": 1e6}}}}
    _, result = run(scenario(**merge(OVERLOAD, targets)))
    metrics = result.metrics
    completed, timed_out = metrics["completed"], metrics["timed_out"]
    assert timed_out > 0
    good_fraction = metrics["slo_attainment"] * (completed + timed_out)
    assert good_fraction <= completed + 1e-9
    assert metrics["goodput_per_s"] <= metrics["requests_per_s"]
    _, relaxed = run(scenario(**merge(OVERLOAD, {"workload": {"timeout_s": None}})))
    assert relaxed.metrics["timed_out"] == 0


def test_client_gives_up_inside_the_gateway():
    """An admission latency longer than the timeout: nothing is ever admitted or routed."""
    _, result = run(scenario(cluster={"admission_latency_us": 5000},
                             workload={"num_requests": 10, "timeout_s": 0.001}))
    req = result.requests
    assert (req.final_state == "timed_out").all()
    assert req.admitted_s.isna().all() and req.routed_s.isna().all()
    assert result.summary["timed_out_requests"] == 10


def test_a_timeout_never_reached_changes_nothing():
    _, plain = run(scenario(**merge(OVERLOAD, {"workload": {"timeout_s": None}})))
    _, patient = run(scenario(**merge(OVERLOAD, {"workload": {"timeout_s": 3600}})))
    assert patient.requests.timed_out_s.isna().all()
    assert patient.requests.equals(plain.requests)
    assert patient.steps.equals(plain.steps)


def test_a_tenant_timeout_overrides_the_workload_timeout():
    tenants = {"type": "tenants", "rate_per_s": 200, "duration_s": 0.3, "timeout_s": 0.2,
               "tenants": [
                   {"id": "patient", "timeout_s": 60,
                    "prompt": {"type": "constant", "value": 300},
                    "output": {"type": "constant", "value": 120}},
                   {"id": "hasty",
                    "prompt": {"type": "constant", "value": 300},
                    "output": {"type": "constant", "value": 120}}]}
    _, result = run(with_workload(tenants))
    by_tenant = result.requests.groupby("tenant").final_state
    assert set(by_tenant.get_group("patient")) == {"completed"}
    assert "timed_out" in set(by_tenant.get_group("hasty"))


def test_a_chat_session_ends_at_a_timed_out_turn():
    chat = {"type": "tenants", "rate_per_s": 100, "duration_s": 0.2, "timeout_s": 0.15,
            "tenants": [{"id": "c", "request_type": "chat",
                         "chat": {"turns": {"type": "constant", "value": 4},
                                  "think_time_s": {"type": "constant", "value": 0.01}},
                         "prompt": {"type": "constant", "value": 300},
                         "output": {"type": "constant", "value": 120}}]}
    _, result = run(with_workload(chat))
    req = result.requests
    assert (req.final_state == "timed_out").any()
    for _, turns in req.groupby("session"):
        states = list(turns.sort_values("turn").final_state)
        if "timed_out" in states:  # no turn follows the one its client gave up on
            assert states.index("timed_out") == len(states) - 1


def test_compat_refuses_client_timeouts():
    data = merge(BASE, {"compat": "blis", "workload": {"arrival": "constant",
                                                       "timeout_s": 1.0}})
    with pytest.raises(ScenarioError) as err:
        Scenario.from_dict(data)
    assert err.value.path == "workload.timeout_s"


@pytest.mark.parametrize("bad", [0, -1, "soon", float("inf")])
def test_a_bad_timeout_names_the_field(bad):
    with pytest.raises(ScenarioError) as err:
        Scenario.from_dict(merge(BASE, {"workload": {"timeout_s": bad}}))
    assert err.value.path == "workload.timeout_s"
