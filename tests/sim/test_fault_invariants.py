"""The cluster invariants with faults drawn at random (hypothesis): random small clusters
(tests/sim/test_cluster_invariants.py, native mode) whose instances crash at random times and
by MTBF/MTTR, for a while or for good, all at once or one by one, are slowed, and lose their
requests to retries or failure; and P/D clusters whose prefill and decode instances crash.

Checked on every run, with the debug checks on (KV conservation after every block operation,
the wipe of a failed instance's pool included; in-flight counts never negative, never
drifting from the requests: InvariantError otherwise):
* every request ends in exactly one terminal state (completed, rejected, timed out or failed;
  still in flight only when a horizon cut the run), and the counts add up;
* no KV block is held and no request counted in flight once a run has ended on its own;
* nothing is routed to an instance while it is down (from its crash to its repair, in the
  order the event log holds them).
"""

from __future__ import annotations

from typing import Any

from hypothesis import event, given
from hypothesis import strategies as st

from blis_simpy.api import prepare, simulate
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.records import Recorder
from tests.cluster.pd_helpers import pd_scenario
from tests.conftest import BASE, merge
from tests.sim.test_cluster_invariants import SETTINGS, TERMINAL, UNFINISHED, clusters

REPAIR = st.sampled_from([None, 0.0, 0.01, 0.1])


@st.composite
def faults(draw: st.DrawFn, instances: int) -> dict[str, Any]:
    names = [f"instance_{i}" for i in range(instances)]
    some = st.lists(st.sampled_from(names), min_size=0, max_size=instances, unique=True)
    section: dict[str, Any] = {
        "crashes": [{"at_s": draw(st.floats(0, 0.4)), "instances": draw(some),
                     "repair_s": draw(REPAIR)} for _ in range(draw(st.integers(0, 3)))],
        "slowdowns": [{"at_s": draw(st.floats(0, 0.3)), "for_s": draw(st.floats(0.001, 0.3)),
                       "factor": draw(st.sampled_from([0.5, 2.0, 10.0])),
                       "instances": draw(some)} for _ in range(draw(st.integers(0, 2)))],
        "requests": {"on_failure": draw(st.sampled_from(["retry", "retry", "lose"])),
                     "max_retries": draw(st.integers(0, 3)),
                     "backoff_s": draw(st.sampled_from([0.0, 0.01, 0.1]))},
    }
    if draw(st.booleans()):
        repair = draw(st.sampled_from([None, {"type": "constant", "value": 0.01},
                                       {"type": "exponential", "mean": 0.05}]))
        section["random_crashes"] = [{
            "mtbf_s": {"type": "exponential", "mean": draw(st.sampled_from([0.05, 0.2, 1.0]))},
            "mttr_s": repair, "instances": draw(some)}]
    return section


@st.composite
def faulty_clusters(draw: st.DrawFn) -> Scenario:
    data = draw(clusters()).to_dict()
    data["compat"] = "none"  # faults are native only
    if data["workload"].get("arrival") == "constant":
        data["workload"]["arrival"] = "poisson"
    data["faults"] = draw(faults(data["cluster"]["instances"]))
    return Scenario.from_dict(data)


@st.composite
def faulty_pd(draw: st.DrawFn) -> Scenario:
    prefill, decode = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    data = pd_scenario(prefill=prefill, decode=decode, rate=draw(st.sampled_from([20, 60])),
                       requests=draw(st.integers(5, 30)), prompt=draw(st.sampled_from([64, 512])),
                       decode_kv_blocks=draw(st.sampled_from([None, 64])),
                       seed=draw(st.integers(0, 2**31)))
    data["faults"] = draw(faults(prefill + decode))
    return Scenario.from_dict(data)


def check(scenario: Scenario) -> None:
    sim = prepare(scenario, recorder=Recorder(events=True), checks=True)
    result = simulate(sim)
    req, summary = result.requests, result.summary
    cut = scenario.horizon_us is not None
    states = set(req.final_state)
    assert states <= (TERMINAL | {"failed"} | (UNFINISHED | {"transferring"} if cut else set()))
    assert req.id.is_unique
    failed = req[req.final_state == "failed"]
    assert failed.completion_s.isna().all() and (failed.reject_reason != "").all()
    assert summary["faults"]["failed_requests"] == len(failed)
    ended = req.final_state.isin(TERMINAL | {"failed"})
    assert int(ended.sum()) + int((~ended).sum()) == summary["arrived_requests"] == len(req)
    if not cut:
        for inst in sim.fleet:
            assert inst.kv.used == 0, inst.id
        assert not any(sim.gateway.in_flight.values())
        assert not any(sim.gateway.pending.values())
    assert_never_routed_while_down(result.events or (), result.faults)
    event(f"crashes={summary['faults']['crashes']} failed={len(failed)} "
          f"retried={summary['faults']['retried_requests'] > 0}")


def assert_never_routed_while_down(events: Any, faults: Any) -> None:
    """Walk the event log in the order things happened (one list, sorted stably by time):
    an instance is down from its `crashed` entry to its `repaired` one. Times alone cannot
    decide the boundary ticks: at a crash's tick a request may be routed before the crash
    (and is then lost with it), at a repair's tick one retried after the repair is routed to
    the instance legitimately, one retried before it finds nothing routable."""
    down: set[str] = set()
    crashes = repairs = 0
    for time, kind, request, target in events:
        if kind == "crashed":
            down.add(target)
            crashes += 1
        elif kind == "repaired":
            down.discard(target)
            repairs += 1
        elif kind == "routing":
            assert target not in down, f"{request} routed to {target} at {time} while it is down"
    assert crashes == int((faults.event == "crash").sum()) if len(faults) else crashes == 0
    assert repairs == int((faults.event == "repair").sum()) if len(faults) else repairs == 0


def test_requests_held_through_a_crash_are_routed_only_after_the_repair():
    """The boundary the log walk decides (hypothesis found it): a crash at 0 repaired at
    10 ms, the gateway's flow-control queue holding the requests meanwhile; the repair
    releases them at its own tick, so they are routed at 10 ms, after the repair in the log.
    (A retry falling due at that tick runs before it, BC-4, and finds nothing routable.)"""
    data = merge(BASE, {"compat": "none",
                        "cluster": {"instances": 1, "flow_control": {
                            "saturation": {"type": "never"}, "max_queue_depth": 8}},
                        "workload": {"arrival": "constant", "num_requests": 4, "rate_per_s": 200},
                        "faults": {"crashes": [{"at_s": 0.0, "instances": ["instance_0"],
                                                "repair_s": 0.01}]}})
    result = simulate(prepare(Scenario.from_dict(data), recorder=Recorder(events=True),
                              checks=True))
    at_repair = [(kind, target) for time, kind, _, target in result.events if time == 10_000]
    assert ("repaired", "instance_0") in at_repair
    repaired = at_repair.index(("repaired", "instance_0"))
    routed = [i for i, (kind, _) in enumerate(at_repair) if kind == "routing"]
    assert routed and all(i > repaired for i in routed), at_repair
    assert_never_routed_while_down(result.events, result.faults)
    assert (result.requests.final_state == "completed").all()


@SETTINGS
@given(scenario=faulty_clusters())
def test_invariants_hold_with_random_faults(scenario):
    check(scenario)


@SETTINGS
@given(scenario=faulty_pd())
def test_invariants_hold_with_random_faults_on_p_d_pools(scenario):
    check(scenario)
