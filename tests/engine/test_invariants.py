"""Seed invariants (plan K.3 / design §13) as hypothesis properties over random small workloads,
including heavy KV pressure that forces preemption: request lifecycle, causality, clock
monotonicity, KV conservation after every operation, and no token counted twice."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from blis_simpy.api import Simulation, build, run
from blis_simpy.config.resolve import resolve
from blis_simpy.core.errors import InvariantError
from blis_simpy.core.records import Recorder
from blis_simpy.core.request import State
from blis_simpy.metrics.gaps import token_gaps
from tests.conftest import trace_run_scenario, write_trace

PREFIXES = [list(range(10_000 + 100 * g, 10_000 + 100 * g + 48)) for g in range(3)]

request_rows = st.lists(
    st.tuples(
        st.integers(0, 40),  # gap to the previous arrival, ms
        st.integers(-1, 2),  # shared prefix group (-1: none)
        st.integers(1, 200),  # own prompt tokens
        st.integers(1, 120),  # output tokens
    ),
    min_size=1, max_size=25,
)
engines = st.fixed_dictionaries({
    "kv_blocks": st.integers(8, 60),
    "block_size": st.sampled_from([4, 16]),
    "max_running_requests": st.integers(1, 8),
    "max_scheduled_tokens": st.integers(8, 256),
    "long_prefill_threshold": st.sampled_from([0, 16, 100]),
})


def build_trace(rows, engine, folder: Path, checks: bool = True) -> Simulation:
    """A run of the random workload, with the debug checks on: KV conservation after every
    block operation and clock monotonicity, each an InvariantError if broken."""
    trace, clock = [], 0
    for seen, (gap, group, own, out) in enumerate(rows, start=1):
        clock += gap
        prompt = (PREFIXES[group] if group >= 0 else []) + list(range(seen * 1000,
                                                                       seen * 1000 + own))
        trace.append((clock / 1000, prompt, out))
    scenario = resolve(trace_run_scenario(write_trace(folder / "t.csv", trace), engine=engine))
    return build(scenario, recorder=Recorder(events=True), checks=checks)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=request_rows, engine=engines)
def test_invariants_hold_under_random_load_and_kv_pressure(rows, engine):
    with tempfile.TemporaryDirectory() as folder:
        sim = build_trace(rows, engine, Path(folder))
        sim.run()  # raises InvariantError if KV conservation or the clock breaks
    records = sim.records()
    req = records.requests
    # clock monotonicity, as the processes saw it
    times = [t for t, _, _, _ in records.events or ()]
    assert times == sorted(times)
    # request lifecycle: exactly one terminal state each, nothing left behind
    assert len(req) == len(rows)
    assert set(req.state) <= {"completed", "rejected"}
    instance = sim.fleet.get("instance_0")
    assert not instance.running and not instance.queue_depth
    for i in range(len(req)):
        if req.state[i] == "rejected":
            assert req.reject_reason[i] and req.emitted[i] == 0
            continue
        # causality
        assert req.arrival[i] <= req.queued_at[i] <= req.first_scheduled[i] \
            <= req.first_token_at[i] <= req.completed_at[i]
        # no token twice, none missing
        assert req.emitted[i] == req.output_len[i]
    # KV: everything released at the end
    assert instance.kv.used == 0
    # one inter-token gap per token after the first, each a positive duration
    done = req.in_state(State.COMPLETED)
    gaps = token_gaps(req, done, records.instances).samples(records.instances)
    assert gaps.count == int((req.output_len[done] - 1).sum())
    assert gaps.count == 0 or gaps.at(0) > 0
    event(f"preempted: {len(records.preemptions) > 0}")


def test_debug_checks_catch_a_kv_pool_that_loses_blocks(tmp_path):
    """The checks are real: a pool whose release forgets a block is caught at once."""
    sim = build_trace([(0, -1, 40, 20), (5, 0, 40, 20)], {"kv_blocks": 60}, tmp_path)
    pool = sim.fleet.get("instance_0").kv
    pool.free.take_one()  # a block vanishes from the free list
    with pytest.raises(InvariantError, match="not conserved"):
        sim.run()


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=request_rows, engine=engines)
def test_summary_counts_each_token_and_request_once(rows, engine):
    with tempfile.TemporaryDirectory() as folder:
        sim = build_trace(rows, engine, Path(folder), checks=False)
        result = run(sim.scenario)
    done = result.requests[result.requests.final_state == "completed"]
    admitted = result.requests[result.requests.final_state != "rejected"]
    assert result.summary["completed_requests"] == len(done)
    assert result.summary["total_output_tokens"] == int(result.requests.generated_tokens.sum())
    assert result.summary["total_output_tokens"] == int(done.output_tokens.sum())
    assert result.summary["total_input_tokens"] == int(admitted.input_tokens.sum())
    assert result.summary["injected_requests"] + result.summary["rejected_requests"] == len(rows)
    assert result.summary["preemption_count"] == int(result.requests.preemptions.sum())
