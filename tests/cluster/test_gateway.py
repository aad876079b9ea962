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
