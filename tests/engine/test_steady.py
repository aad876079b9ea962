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


def both_ways(make, paths=None):
    """The run with the steady fast path and without it; `paths` (a dict) gets the fast run's
    step paths counted."""
    fast = make()
    if paths is not None:
        count_paths(fast, paths)
    exact = make()
    for inst in exact.fleet:
        inst.steady = None
    return simulate(fast), simulate(exact)


def assert_same(fast, exact):
    assert fast.summary == exact.summary
    assert fast.steps.equals(exact.steps)
    assert fast.requests.equals(exact.requests)


class StepPaths:
    """An instance's latency model, wrapped to count which path each step took (the engine
    may be compiled, so its methods cannot be wrapped themselves). The exact path passes
    the batch to `step_time`, the steady paths pass `()`; a decode-only step runs while
    nothing is explicit or waiting, and it is a decode step (not a quiet one) when some
    decoder has an event in it."""

    def __init__(self, inst, counts):
        self.inst, self.model, self.counts = inst, inst.latency, counts
        self.output_delay = self.model.output_delay
        self.per_request = self.model.per_request

    def queue_delay(self, input_len):
        return self.model.queue_delay(input_len)

    def step_time(self, new_tokens, decodes, batch, extra_us):
        inst = self.inst
        if not isinstance(batch, tuple):
            self.counts["exact"] += 1
        elif not inst.explicit and not inst.wait_queue and new_tokens == 0:
            due = inst.steady.buckets.get(inst.step_index())
            self.counts["decode" if due else "quiet"] += 1
        return self.model.step_time(new_tokens, decodes, batch, extra_us)


def count_paths(sim, counts):
    counts.update(exact=0, quiet=0, decode=0)
    for inst in sim.fleet:
        inst.latency = StepPaths(inst, counts)


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
    paths: dict[str, int] = {}
    fast, exact = both_ways(lambda: build(s), paths)
    assert_same(fast, exact)
    assert fast.summary["completed_requests"] == 60
    assert paths["exact"] == 0


def test_decode_only_steps_skip_batch_formation_with_the_same_results():
    """A lightly loaded instance mostly runs steps in which every request just decodes: they
    take the quiet and decode-only paths (no batch formation), and a run's steps and results
    are those of the exact path, KV pressure included."""
    s = resolve(scenario(engine={"kv_blocks": 120},
                         workload={"num_requests": 80, "rate_per_s": 4,
                                   "prompt": {"mean": 200, "stdev": 50, "min": 50, "max": 400},
                                   "output": {"mean": 300, "stdev": 100, "min": 20, "max": 600}}))
    paths: dict[str, int] = {}
    fast, exact = both_ways(lambda: build(s), paths)
    assert_same(fast, exact)
    assert fast.summary["preemption_count"] > 0
    assert paths["quiet"] > 100
    assert paths["decode"] > 0
