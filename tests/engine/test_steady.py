"""The steady-decode fast path is an optimisation only: with it and without it (every request
handled one by one each step) a run must produce identical steps and per-request results."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
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
        self.bulk = getattr(self.model, "bulk", False)

    def queue_delay(self, input_len):
        return self.model.queue_delay(input_len)

    def step_time(self, new_tokens, decodes, batch, extra_us):
        inst = self.inst
        if not isinstance(batch, tuple):
            self.counts["exact"] += 1
        elif not inst.explicit and not inst.wait_queue and new_tokens == 0:
            due = inst.steady.peek(inst.step_index())
            self.counts["decode" if due else "quiet"] += 1
        return self.model.step_time(new_tokens, decodes, batch, extra_us)

    def bulk_step_time(self, batch, decoders, context, extra_us):
        """The steady paths of a model that reads the batch: the implicit decoders' count and
        context sum must be those of the running requests not in `batch`, one by one."""
        inst = self.inst
        implicit = [r for r in inst.running if r.lazy_base >= 0]
        index = inst.step_index()
        assert decoders == len(implicit)
        assert context == sum(r.progress + index - r.lazy_base for r in implicit)
        assert not any(r.lazy_base >= 0 for r in batch)
        if not inst.explicit and not inst.wait_queue and not batch:
            due = inst.steady.peek(index)
            self.counts["decode" if due else "quiet"] += 1
        else:
            self.counts["steady"] += 1
        return self.model.bulk_step_time(batch, decoders, context, extra_us)


def count_paths(sim, counts):
    counts.update(exact=0, quiet=0, decode=0, steady=0)
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


PHYSICAL = {"type": "physical", "alpha": None, "beta": None}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=request_rows, engine=engines)
def test_physical_model_fast_path_matches_exact_path_on_random_workloads(rows, engine):
    """The physical model reads every request's context: the steady path gives it the
    implicit decoders as a count and a context sum, and the steps are the same."""
    with tempfile.TemporaryDirectory() as folder:
        trace = build_trace(rows, engine, Path(folder)).scenario.workload.path
        paths: dict[str, int] = {}
        fast, exact = both_ways(lambda: build(resolve(trace_run_scenario(
            Path(trace), engine=engine, latency=PHYSICAL))), paths)
    assert_same(fast, exact)


def test_physical_model_takes_the_steady_paths_with_the_same_results():
    """A busy physical-model run with shared prefixes and preemptions: most steps leave the
    exact path, and steps, requests and summary are the exact path's (the bulk sums checked
    against the requests at every step by StepPaths)."""
    s = resolve(scenario(latency=PHYSICAL, engine={"kv_blocks": 400},
                         workload={"num_requests": 150, "rate_per_s": 40, "prefix_tokens": 40,
                                   "output": {"mean": 120, "stdev": 60, "min": 1,
                                              "max": 400}}))
    paths: dict[str, int] = {}
    fast, exact = both_ways(lambda: build(s), paths)
    assert_same(fast, exact)
    assert exact.summary["preemption_count"] > 0
    assert paths["quiet"] + paths["decode"] + paths["steady"] > 4 * paths["exact"]
    assert paths["decode"] > 0 and paths["steady"] > 0


def test_physical_model_with_two_instances_matches_on_the_search_evaluation():
    """The policy search's evaluation (1,000 requests, 2 instances, the physical model,
    routing reading the instances' state): the same steps and requests either way."""
    s = resolve(scenario(latency=PHYSICAL, cluster={"instances": 2},
                         policies={"routing": {"type": "least-loaded"}},
                         workload={"num_requests": 400, "rate_per_s": 40, "prefix_tokens": 128}))
    fast, exact = both_ways(lambda: build(s))
    assert_same(fast, exact)


def test_implicit_decoders_sums_return_to_zero():
    """Every implicit decoder leaves through `materialize`, which takes it out of the sums."""
    s = resolve(scenario(latency=PHYSICAL, workload={"num_requests": 60, "rate_per_s": 20}))
    sim = build(s)
    simulate(sim)
    for inst in sim.fleet:
        assert inst.steady.count == 0 and inst.steady.offsets == 0



def pd_one_to_three(latency=None):
    """pd-vs-monolithic as P:D 1:3 under a load at which the prefill instance's queue waits
    for KV its transfers hold while nothing runs there."""
    from blis_simpy.api import load

    data = load("pd-vs-monolithic").to_dict()
    data["workload"].update({"num_requests": 300, "rate_per_s": 300,
                             "prompt": {"mean": 256, "stdev": 64, "min": 16, "max": 1024},
                             "output": {"mean": 256, "stdev": 64, "min": 2, "max": 1024}})
    if latency is not None:
        data["latency"] = latency
    pools = data["deployment"]["models"][0]["configs"][0]["pd"]
    pools["prefill"]["replicas"] = {"min": 1, "max": 1}
    pools["decode"]["replicas"] = {"min": 3, "max": 3}
    return resolve(load(data))


@pytest.mark.parametrize("latency", [None, {"type": "blackbox"}], ids=["physical", "blackbox"])
def test_pd_instances_run_no_empty_step_on_either_path(latency):
    """A P/D instance whose queue waits for KV its transfers hold, nothing running, runs no
    step until a transfer lets KV go (the prefill's and decode's `stalled`), on the steady
    path as on the exact one: an empty step would charge the step's fixed cost for nothing
    (it moved notebook 03's P:D 1:3 results by up to 8 %)."""
    s = pd_one_to_three(latency)
    fast, exact = both_ways(lambda: build(s))
    assert_same(fast, exact)
    assert (fast.steps["batch_size"] > 0).all()
