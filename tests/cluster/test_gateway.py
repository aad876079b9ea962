"""The gateway's zero-latency stages: taken at once when their event would run next, with
exactly the outcome of scheduling them (same event order, same records)."""

from __future__ import annotations

import pytest
from simpy.events import EventPriority

import blis_simpy
from blis_simpy.cluster.gateway import Gateway
from blis_simpy.config.resolve import resolve
from blis_simpy.core.records import Recorder
from blis_simpy.sim import build
from blis_simpy.sim.run import prepare, simulate
from tests.conftest import scenario, trace_run_scenario, write_trace

# ties at 0.5 s (three requests), single arrivals around them
ROWS = [(0.0, list(range(40)), 30), (0.5, list(range(100, 140)), 5),
        (0.5, list(range(200, 220)), 8), (0.5, list(range(300, 333)), 2),
        (0.500001, list(range(400, 410)), 3), (0.9, list(range(500, 540)), 20)]


class ScheduledGateway(Gateway):
    """Every stage through its event (the compiled gateway's own method cannot be patched;
    an interpreted subclass overrides it)."""

    def _runs_next(self, priority: EventPriority) -> bool:
        return False


def traced(s, *, immediate: bool, monkeypatch: pytest.MonkeyPatch
           ) -> tuple[blis_simpy.Result, int]:
    """The run with the ordered event log, and how many SimPy events it processed."""
    if not immediate:
        monkeypatch.setattr(build, "Gateway", ScheduledGateway)
    sim = prepare(s, recorder=Recorder(events=True, decisions=True))
    monkeypatch.undo()
    events = []
    result = simulate(sim, lambda p: events.append(p.events) if p.done else None)
    return result, events[-1]


@pytest.mark.parametrize("changes", [
    {},
    {"policies": {"routing": {"type": "least-loaded"}}},
    {"policies": {"admission": {"type": "token-bucket", "params": {"capacity": 60,
                                                                   "refill_per_s": 100}}}},
])
def test_immediate_stages_give_the_scheduled_stages_outcome(tmp_path, monkeypatch, changes):
    s = resolve(trace_run_scenario(write_trace(tmp_path / "t.csv", ROWS),
                                   cluster={"instances": 2}, **changes))
    fast, fast_events = traced(s, immediate=True, monkeypatch=monkeypatch)
    slow, slow_events = traced(s, immediate=False, monkeypatch=monkeypatch)
    assert fast.events == slow.events
    assert fast.requests.equals(slow.requests)
    assert fast.steps.equals(slow.steps)
    assert fast.decisions.equals(slow.decisions)
    assert fast_events < slow_events  # the single arrivals' stages took no event


def test_same_time_arrivals_still_precede_their_admissions(tmp_path):
    s = resolve(trace_run_scenario(write_trace(tmp_path / "t.csv", ROWS),
                                   cluster={"instances": 2}))
    result = blis_simpy.run(s, recorder=Recorder(events=True))
    at_tie = [kind for t, kind, _, _ in result.events if t == 500_000]
    assert at_tie[:9] == ["arrival"] * 3 + ["admission"] * 3 + ["routing"] * 3


def test_a_stage_with_latency_keeps_its_event():
    s = resolve(scenario(cluster={"instances": 2, "admission_latency_us": 10,
                                  "routing_latency_us": 5}))
    result = blis_simpy.run(s, recorder=Recorder(events=True))
    times = {}
    for t, kind, name, _ in result.events:
        times.setdefault(name, {})[kind] = t
    for stages in times.values():
        if "routing" in stages:
            assert stages["admission"] == stages["arrival"] + 10
            assert stages["routing"] == stages["admission"] + 5


# --- admission delays are bounded (newcomer 16) --------------------------------------------


def delaying(delay_s: float, **changes):
    """The base scenario with an admission tree that delays every request by `delay_s`."""
    tree = {"type": "decision-tree", "params": {"tree": {"action": "delay",
                                                         "delay_s": delay_s}}}
    return scenario(policies={"admission": tree}, **changes)


def test_a_request_admission_never_admits_is_rejected_after_the_delay_limit():
    from blis_simpy.core.units import MAX_ADMISSION_DELAYS

    result = blis_simpy.run(delaying(1.0))
    summary = result.summary
    assert summary["completed_requests"] == 0
    assert summary["rejected_by_reason"] == {"admission_delay_limit":
                                             summary["arrived_requests"]}
    assert summary["admitted_requests"] == 0  # newcomer 19's #6: it said every one
    assert any("never lets them in" in w for w in summary["warnings"])
    reasons = set(result.requests["reject_reason"])
    assert reasons == {f"admission delayed it {MAX_ADMISSION_DELAYS} times and then by "
                       f"1000000 µs more: past the limit of {MAX_ADMISSION_DELAYS:,} delays "
                       "or the simulated clock's 1,000,000,000 s"}


def test_a_delay_past_the_clocks_limit_is_rejected_at_once_not_an_overflow():
    """2**63 µs was an int64 overflow deep in the compiled loop (a traceback in every entry
    point); now the request is rejected as never admitted, before its event is made."""
    result = blis_simpy.run(delaying(1e12))
    assert result.summary["completed_requests"] == 0
    reasons = set(result.requests["reject_reason"])
    assert all("delayed it 0 times" in r for r in reasons)


def test_the_clock_stops_at_its_limit_and_the_run_says_so():
    """Think times that no scenario value exceeds alone still add up past 1e9 s: the run
    ends at the limit as at a horizon, with a warning, instead of overflowing."""
    data = scenario().to_dict()
    data["workload"] = {"type": "tenants", "rate_per_s": 2, "duration_s": 2, "tenants": [{
        "id": "chat", "request_type": "chat",
        "prompt": {"type": "constant", "value": 50}, "output": {"type": "constant", "value": 5},
        "chat": {"turns": {"type": "constant", "value": 12},
                 "think_time_s": {"type": "constant", "value": 1e9}}}]}
    result = blis_simpy.run(data)
    assert any("clock reached its limit" in w for w in result.summary["warnings"])
    assert result.summary["completed_requests"] >= 1
