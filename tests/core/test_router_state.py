"""The gateway's router state (seed 001 §3 `RouterState`, seed G.2): burst detection,
throughput and a bounded load history beside the counters and rates."""

from __future__ import annotations

from blis_simpy.core.router_state import (
    BURST_MIN,
    HISTORY_INTERVAL_US,
    HISTORY_SAMPLES,
    RouterState,
)
from blis_simpy.core.units import US_PER_S


def arrive(state: RouterState, tenant: str, times: list[int]) -> None:
    for t in times:
        state.on_arrival(tenant, t)
        state.on_admit(tenant)


def test_router_state_burst_detected():
    """Seed 001 §3 `TenantState.BurstDetected`: a tenant whose last second carries at least
    twice its earlier rate (and BURST_MIN arrivals) is bursting; a steady one is not, nor is
    one seen for less than a second (no earlier rate to compare with)."""
    state = RouterState()
    steady = [i * 100_000 for i in range(50)]  # 10/s for 5 s
    arrive(state, "steady", steady)
    arrive(state, "bursty", [0, 2 * US_PER_S])  # 2 arrivals in the first 4.9 s ...
    arrive(state, "bursty", [4_900_000 + i * 10_000 for i in range(BURST_MIN)])  # then 4
    clock = state.clock
    assert not state.tenant("steady").burst_detected(clock)
    assert state.tenant("bursty").burst_detected(clock)
    young = RouterState()
    arrive(young, "new", [i * 1_000 for i in range(20)])  # 20 in its first 20 ms
    assert not young.tenant("new").burst_detected(young.clock)
    assert not young.burst_detected()
    # a quiet tenant returning with a burst: nothing before, BURST_MIN now
    arrive(state, "quiet", [0])
    arrive(state, "quiet", [5 * US_PER_S + i for i in range(BURST_MIN)])
    assert state.tenant("quiet").burst_detected(state.clock)
    # the burst passes with its second
    assert not state.tenant("bursty").burst_detected(state.clock + 2 * US_PER_S)


def test_router_state_global_burst_and_throughput():
    """Seed 001 §3 `GlobalRouterMetrics`: `Throughput` is completions per second over the last
    second, as `RequestRate` is arrivals; bursts are judged over all arrivals too."""
    state = RouterState()
    arrive(state, "a", [i * 200_000 for i in range(20)])  # 5/s for 4 s
    assert not state.burst_detected()
    for t in (3_500_000, 3_600_000, 3_700_000):
        state.on_finish("a")
        state.on_complete(t)
    state.clock = 3_800_000
    assert state.throughput() == 3.0
    state.clock = 4_550_000  # the first completion has left the window
    assert state.throughput() == 2.0
    arrive(state, "b", [4_600_000 + i * 1_000 for i in range(30)])
    assert state.burst_detected()
    assert state.completed == 3 and state.in_flight == 47


def test_router_state_history_is_bounded():
    """Seed 001 §3 `HistoricalMetrics`: one load sample per second with arrivals (rate,
    in-flight, throughput as they were just before that second's first arrival, which the
    rate does not count yet), the last HISTORY_SAMPLES kept."""
    state = RouterState()
    times = [i * HISTORY_INTERVAL_US // 4 for i in range(4 * (HISTORY_SAMPLES + 10))]
    arrive(state, "a", times)
    history = state.load_history()
    assert len(history) == HISTORY_SAMPLES
    assert [s.clock for s in history] == [
        i * HISTORY_INTERVAL_US for i in range(10, HISTORY_SAMPLES + 10)]
    last = history[-1]
    assert last.request_rate == 3.0 and last.throughput == 0.0
    assert last.in_flight == 4 * (HISTORY_SAMPLES + 9)
    assert isinstance(history, tuple)  # a policy may keep it: later samples never reach it
