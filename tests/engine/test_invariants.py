"""Seed invariants (plan K.3 / design §13) as hypothesis properties over random small workloads,
including heavy KV pressure that forces preemption: request lifecycle, causality, clock
monotonicity, KV conservation after every operation, and no token counted twice."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from blis_simpy.api import run
from blis_simpy.config.resolve import resolve
from blis_simpy.engine.kvcache import KVCache
from blis_simpy.engine.request import State
from blis_simpy.engine.simulation import Simulation
from blis_simpy.metrics.collect import StepTable, token_gaps
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


def build(rows, engine, folder: Path) -> Simulation:
    trace, clock = [], 0
    for seen, (gap, group, own, out) in enumerate(rows, start=1):
        clock += gap
        prompt = (PREFIXES[group] if group >= 0 else []) + list(range(seen * 1000,
                                                                       seen * 1000 + own))
        trace.append((clock / 1000, prompt, out))
    return Simulation(resolve(trace_run_scenario(write_trace(folder / "t.csv", trace),
                                                 engine=engine)))


class CheckedKV(KVCache):
    """A KV cache that verifies conservation after every operation."""

    def allocate(self, req, start, tokens):
        ok = super().allocate(req, start, tokens)
        self.check()
        return ok

    def attach(self, req, cached):
        super().attach(req, cached)
        self.check()

    def release(self, req):
        super().release(req)
        self.check()


def checked(sim: Simulation) -> Simulation:
    for inst in sim.instances:
        kv = CheckedKV(inst.kv.total, inst.kv.block_size)
        inst.kv = kv
    return sim


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=request_rows, engine=engines)
def test_invariants_hold_under_random_load_and_kv_pressure(rows, engine):
    with tempfile.TemporaryDirectory() as folder:
        sim = checked(build(rows, engine, Path(folder)))
        clock = []
        inner = sim.instances[0]._step

        def watched():
            clock.append(sim.env.now)
            return inner()

        sim.instances[0]._step = watched
        sim.run()
    instance = sim.instances[0]
    # clock monotonicity
    assert clock == sorted(clock)
    # request lifecycle: exactly one terminal state each, nothing left behind
    assert len(sim.requests) == len(rows)
    assert all(r.state in (State.COMPLETED, State.REJECTED) for r in sim.requests)
    assert not instance.running and not instance.wait_queue
    for req in sim.requests:
        if req.state is State.REJECTED:
            assert req.reject_reason and req.emitted == 0
            continue
        # causality
        assert req.arrival <= req.queued_at <= req.first_scheduled <= req.first_token_at
        assert req.first_token_at <= req.completed_at
        # no token twice, none missing
        assert req.emitted == req.output_len
    # KV: everything released, conservation held throughout (CheckedKV)
    assert instance.kv.used == 0
    # one inter-token gap per token after the first, each a positive duration
    done = [r for r in sim.requests if r.state is State.COMPLETED]
    steps = [StepTable.of(instance)]
    gaps = token_gaps(done, steps).samples(steps)
    assert gaps.count == sum(r.output_len - 1 for r in done)
    assert gaps.count == 0 or gaps.at(0) > 0
    event(f"preempted: {instance.preemptions > 0}")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=request_rows, engine=engines)
def test_summary_counts_each_token_and_request_once(rows, engine):
    with tempfile.TemporaryDirectory() as folder:
        sim = build(rows, engine, Path(folder))
        result = run(sim.scenario)
    done = result.requests[result.requests.final_state == "completed"]
    admitted = result.requests[result.requests.final_state != "rejected"]
    assert result.summary["completed_requests"] == len(done)
    assert result.summary["total_output_tokens"] == int(result.requests.generated_tokens.sum())
    assert result.summary["total_output_tokens"] == int(done.output_tokens.sum())
    assert result.summary["total_input_tokens"] == int(admitted.input_tokens.sum())
    assert result.summary["injected_requests"] + result.summary["rejected_requests"] == len(rows)
    assert result.summary["preemption_count"] == int(result.requests.preemptions.sum())
