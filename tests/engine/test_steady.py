"""The steady-decode fast path is an optimisation only: with it and without it (every request
handled one by one each step) a run must produce identical steps and per-request results."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings

from blis_simpy.api import simulate
from blis_simpy.config.resolve import resolve
from blis_simpy.sim.build import build
from tests.conftest import scenario, trace_run_scenario
from tests.engine.test_invariants import build_trace, engines, request_rows


def both_ways(make):
    fast = make()
    exact = make()
    for inst in exact.fleet:
        inst.steady = None
    return simulate(fast), simulate(exact)


def assert_same(fast, exact):
    assert fast.summary == exact.summary
    assert fast.steps.equals(exact.steps)
    assert fast.requests.equals(exact.requests)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=request_rows, engine=engines)
def test_fast_path_matches_exact_path_on_random_workloads(rows, engine):
    with tempfile.TemporaryDirectory() as folder:
        trace = build_trace(rows, engine, Path(folder)).scenario.workload.path
        fast, exact = both_ways(lambda: build(resolve(trace_run_scenario(
            Path(trace), engine=engine))))
    assert_same(fast, exact)


def test_fast_path_matches_exact_path_on_a_busy_compat_run():
    s = resolve(scenario(compat="blis", engine={"kv_blocks": 600},
                         workload={"num_requests": 150, "rate_per_s": 60, "prefix_tokens": 40}))
    fast, exact = both_ways(lambda: build(s))
    assert exact.summary["preemption_count"] > 0
    assert_same(fast, exact)


def test_a_prefill_overrunning_the_budget_at_the_batch_end_stays_on_the_fast_path():
    """Long prompts arrive while others decode: the newest request's chunk is cut to the
    budget left. The fast path cuts it as the exact path does instead of falling back."""
    s = resolve(scenario(engine={"max_scheduled_tokens": 512, "long_prefill_threshold": 0},
                         workload={"num_requests": 60, "rate_per_s": 30,
                                   "prompt": {"mean": 900, "stdev": 100, "min": 600, "max": 1200},
                                   "output": {"mean": 40, "stdev": 10, "min": 5, "max": 80}}))
    fallbacks = []
    sim = build(s)
    for inst in sim.fleet:
        exact_step = inst._exact_step
        inst._exact_step = (  # type: ignore[method-assign]
            lambda now, index, f=exact_step: fallbacks.append(index) or f(now, index))
    fast = simulate(sim)
    exact = build(s)
    for inst in exact.fleet:
        inst.steady = None
    assert_same(fast, simulate(exact))
    assert fast.summary["completed_requests"] == 60
    assert len(fallbacks) == 0


def test_decode_only_steps_skip_batch_formation_with_the_same_results():
    """A lightly loaded instance mostly runs steps in which every request just decodes: they
    take the quiet and decode-only paths (no batch formation), and a run's steps and results
    are those of the exact path, KV pressure included."""
    s = resolve(scenario(engine={"kv_blocks": 120},
                         workload={"num_requests": 80, "rate_per_s": 4,
                                   "prompt": {"mean": 200, "stdev": 50, "min": 50, "max": 400},
                                   "output": {"mean": 300, "stdev": 100, "min": 20, "max": 600}}))
    taken = {"_quiet_step": 0, "_decode_step": 0}
    sim = build(s)
    for inst in sim.fleet:
        for name in taken:
            method = getattr(inst, name)

            def counted(*args, _name=name, _method=method):
                taken[_name] += 1
                return _method(*args)

            setattr(inst, name, counted)
    fast = simulate(sim)
    exact = build(s)
    for inst in exact.fleet:
        inst.steady = None
    assert_same(fast, simulate(exact))
    assert fast.summary["preemption_count"] > 0
    assert taken["_quiet_step"] > 100
    assert taken["_decode_step"] > 0
