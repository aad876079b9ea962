"""When what a step does becomes visible, and the order of one timestamp's events (issue 34,
items 1 and 2).

One instance, 10 ms steps (beta = (10000, 0, 0)) and no queueing or output delay (alpha = 0),
so every step boundary falls on a multiple of 10 ms: r0 (16-token prompt, 3 output tokens)
arrives at 0 and runs in the steps at 0, 10 and 20 ms, finishing at 30 ms.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import blis_simpy
from blis_simpy.policies.admission import ADMIT, AdmissionPolicy
from blis_simpy.policies.routing import RoutingDecision, RoutingPolicy
from blis_simpy.sim.run import prepare, simulate
from tests.conftest import trace_run_scenario, write_trace
from tests.policies.test_policy_code_fuzz import install

STEP_US = 10_000
TEN_MS_STEPS = {"latency": {"alpha": [0, 0, 0], "beta": [STEP_US, 0, 0]}}


def prompt(n: int, start: int) -> list[int]:
    return list(range(start, start + n))


def logging_router(seen: list[tuple[int, str, Any]]) -> str:
    """A router that logs the snapshot of every instance it is shown, then picks the first."""
    def route(self, req, priority, snapshots, state, clock):
        seen.append((clock, req.id, snapshots[0]))
        return RoutingDecision(snapshots[0].id, "", (1.0,))

    return install(type("LoggingRouter", (RoutingPolicy,), {"route": route}))


def two_requests(tmp_path, second_at_s: float, **changes: Any):
    rows = [(0.0, prompt(16, 1000), 3), (second_at_s, prompt(16, 3000), 2)]
    return trace_run_scenario(write_trace(tmp_path / "t.csv", rows),
                              **{**TEN_MS_STEPS, **changes})


def test_d52_router_sees_running_request_until_step_end(tmp_path):
    """Seed D.5.2: a snapshot is the process's state as it is at that instant. r0's last
    token comes at the end of the step that runs 20-30 ms, so a router at 25 ms sees r0
    still running: in flight, in the batch, its KV blocks held (main showed in_flight=0,
    batch=0, kv_util=0.0, free_kv=2000: the completion applied at the step's start).
    Compat mode keeps the reference's view, which applies a step's progress at its start."""
    seen: list[tuple[int, str, Any]] = []
    policies = {"routing": {"type": logging_router(seen)}}
    result = blis_simpy.run(two_requests(tmp_path, 0.025, policies=policies))
    clock, name, snap = seen[1]
    assert (clock, name) == (25_000, "request_1")
    assert snap.in_flight_requests == 1 and snap.batch_size == 1
    assert snap.kv_utilization > 0 and snap.free_kv_blocks < 2000
    assert result.requests.set_index("id").completion_s["request_0"] == 0.03

    seen.clear()
    blis_simpy.run(two_requests(tmp_path, 0.025, policies=policies, compat="blis"))
    snap = seen[1][2]
    assert (snap.in_flight_requests, snap.batch_size, snap.free_kv_blocks) == (0, 0, 2000)


def test_d52_recent_ttft_moves_when_the_first_token_is_emitted(tmp_path):
    """Seed D.5.2: r0's first token is emitted at the end of the step that runs 0-10 ms; a
    router at 5 ms (recent TTFT refreshed on every read) has no TTFT to see yet, and one at
    15 ms sees r0's 10 ms."""
    for at_s, ttft in ((0.005, 0.0), (0.015, 10.0)):
        seen: list[tuple[int, str, Any]] = []
        blis_simpy.run(two_requests(
            tmp_path, at_s, policies={"routing": {"type": logging_router(seen)}},
            cluster={"observability": {"recent_ttft": {"mode": "immediate"}}}))
        assert seen[1][2].recent_ttft_ms == ttft


def test_d52_tenant_active_requests_count_a_request_until_it_finishes(tmp_path):
    """Seed D.5.2 / D.7: an admission policy at 25 ms sees r0's tenant with r0 still active
    (it finishes at 30 ms)."""
    active: list[tuple[int, int]] = []

    def decide(self, req, state, clock):
        active.append((clock, state.tenant(req.tenant_id).active_requests))
        return ADMIT

    logger = install(type("LoggingAdmission", (AdmissionPolicy,), {"decide": decide}))
    blis_simpy.run(two_requests(tmp_path, 0.025, policies={"admission": {"type": logger}}))
    assert active == [(0, 0), (25_000, 1)]


def test_d52_autoscaler_signals_see_a_step_under_way_as_running(tmp_path):
    """Seed D.5.2 / D.7: what the autoscaler reads of an instance (its batch, KV, emitted
    tokens, recent TTFT) at 25 ms is the state then: r0 running with two tokens emitted
    (the steps ending at 10 and 20 ms); the third comes at 30 ms."""
    sim = prepare(two_requests(tmp_path, 0.5))
    instance = sim.fleet.get("instance_0")
    looks: list[tuple[int, int, int, int]] = []

    def look() -> Generator[Any, Any, None]:
        for at in (25_000, 35_000):
            yield sim.env.timeout(at - sim.env.now)
            looks.append((len(instance.running), instance.kv.used, instance.output_tokens,
                          instance.recent_ttft_ms()))

    sim.env.process(look())
    simulate(sim)
    assert looks == [(1, 2, 2, 10.0), (0, 0, 3, 10.0)]


def test_e3_arrival_at_step_boundary_joins_that_step(tmp_path):
    """Seed E.3: at one timestamp instance arrivals come before steps, so r1, routed at
    10 ms (no queueing delay) while r0's step ends then, is scheduled in the step that starts
    at 10 ms (on main it waited for the one at 20 ms: its zero-delay join ran after the
    step). Compat keeps the reference's heap order (docs/differences-from-blis.md, "event
    ties"), unchanged by this."""
    rows = two_requests(tmp_path, 0.010)
    result = blis_simpy.run(rows)
    scheduled = result.requests.set_index("id").scheduled_s
    assert scheduled["request_1"] == 0.01
    events = blis_simpy.run(rows, recorder=blis_simpy.Recorder(events=True)).events
    at_10ms = [(kind, subject) for time, kind, subject, _ in events if time == STEP_US]
    assert at_10ms.index(("queued", "request_1")) < at_10ms.index(("step", "instance_0"))


def test_e3_arrival_with_queueing_delay_ending_at_a_step_start_joins_it(tmp_path):
    """Seed E.3 with a queueing delay of 3 ms (alpha0): r0 is queued at 3 ms and steps at 3,
    13 and 23 ms; r1 arrives at 10 ms, is queued at 13 ms, the tick r0's second step starts,
    and joins that step."""
    rows = [(0.0, prompt(16, 1000), 3), (0.010, prompt(16, 3000), 2)]
    scenario = trace_run_scenario(write_trace(tmp_path / "t.csv", rows),
                                  latency={"alpha": [3000, 0, 0], "beta": [STEP_US, 0, 0]})
    frame = blis_simpy.run(scenario).requests.set_index("id")
    assert frame.queued_s["request_1"] == 0.013
    assert frame.scheduled_s["request_1"] == frame.queued_s["request_1"]
