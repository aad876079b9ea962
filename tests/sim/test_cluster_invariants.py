"""Invariants at cluster scale (design §13, the reference's invariant tests), as hypothesis
properties over random clusters: 1-8 instances, every admission, priority, routing and
scheduler template with random parameters, tenants sending single requests, chat sessions,
agentic and reasoning chains and closed-loop users, small KV caches that force preemption,
gateway latencies and stale snapshots, horizons that cut runs short; native and compat
modes.

Each test names the invariant it checks. `make test` runs 100 examples of each;
`make test-long` (BLIS_TEST_PROFILE=long, tests/conftest.py) runs 1,000 or more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from blis_simpy.api import Simulation, prepare, simulate
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.records import Recorder
from blis_simpy.sim.result import Result
from tests.conftest import BASE, merge

TERMINAL = {"completed", "rejected", "timed_out"}
UNFINISHED = {"arriving", "queued", "running"}  # only when a horizon cut the run
STAMPS = ("arrival_s", "admitted_s", "routed_s", "queued_s", "scheduled_s", "first_token_s",
          "completion_s")
TENANTS = ("gold", "silver", "bulk")
CLASSES = ("realtime", "interactive", "", "batch")
STALE = {field: {"mode": "periodic", "interval_s": 0.01}  # routers see 10 ms old levels
         for field in ("queue_depth", "batch_size", "kv_utilization")}
SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                         HealthCheck.data_too_large])


# --- random clusters ------------------------------------------------------------------------

def length(low: int, high: int) -> st.SearchStrategy[dict[str, Any]]:
    """A token-count distribution over [low, high]."""
    return st.one_of(
        st.integers(low, high).map(lambda v: {"type": "constant", "value": v}),
        st.tuples(st.integers(low, high), st.integers(low, high)).map(
            lambda b: {"type": "uniform", "low": min(b), "high": max(b) + 1}),
        st.integers(low, high).map(lambda m: {"type": "gaussian", "mean": m, "stdev": m / 2,
                                              "min": low, "max": high}),
    )


KINDS = ("completion", "completion", "chat", "agentic", "reasoning", "closed-loop", "bursty")


@st.composite
def tenant(draw: st.DrawFn, tid: str, prefixes: bool, kinds: tuple[str, ...] = KINDS
           ) -> dict[str, Any]:
    kind = draw(st.sampled_from(kinds))
    spec: dict[str, Any] = {
        "id": tid, "slo_class": draw(st.sampled_from(CLASSES)),
        "rate_fraction": draw(st.sampled_from([0.5, 1.0, 2.0])),
        "prompt": draw(length(1, 300)), "output": draw(length(1, 200)),
        "arrival": {"type": draw(st.sampled_from(["poisson", "constant", "periodic"]))},
    }
    if prefixes and draw(st.booleans()):
        spec["prefix"] = {"reuse_probability": draw(st.sampled_from([0.5, 1.0]))}
    if kind == "chat":
        spec["request_type"] = "chat"
        spec["chat"] = {"turns": {"type": "constant", "value": draw(st.integers(1, 4))},
                        "think_time_s": {"type": "exponential", "mean": 0.05},
                        "context_growth": draw(st.sampled_from(["linear", "sublinear",
                                                                "bounded"])),
                        "max_context_tokens": 400}
    elif kind == "agentic":
        spec["request_type"] = "agentic"
        spec["agentic"] = {"max_tool_calls": {"type": "constant", "value": 2},
                           "tool_latency_s": {"type": "exponential", "mean": 0.02},
                           "tool_result_tokens": {"type": "constant", "value": 20}}
    elif kind == "reasoning":
        spec["request_type"] = "reasoning"
        spec["reasoning"] = {"chain_length": {"type": "constant", "value": 2},
                             "tokens_per_step": {"type": "constant", "value": 30}}
    elif kind == "closed-loop":
        spec["closed_loop"] = {"users": draw(st.integers(1, 4)),
                               "think_time_s": {"type": "exponential", "mean": 0.05}}
    elif kind == "bursty":
        spec["behavior"] = {"type": draw(st.sampled_from(["bursty", "adversarial"])),
                            "burst_size": {"type": "constant", "value": draw(st.integers(2, 8))},
                            "burst_every_s": 0.2}
    return spec


@st.composite
def tenants_workload(draw: st.DrawFn, first: tuple[str, ...] = KINDS) -> dict[str, Any]:
    """1-3 tenants, the first of one of the kinds `first`."""
    prefixes = draw(st.booleans())
    count = draw(st.integers(1, 3))
    workload: dict[str, Any] = {
        "type": "tenants", "rate_per_s": draw(st.sampled_from([20, 60, 150])),
        "duration_s": draw(st.sampled_from([0.2, 0.4])),
        "max_requests": draw(st.integers(5, 40)),
        "tenants": [draw(tenant(TENANTS[i], prefixes, first if i == 0 else KINDS))
                    for i in range(count)],
    }
    if prefixes:
        workload["prefix_groups"] = [
            {"id": f"p{g}", "length": {"type": "constant", "value": draw(st.integers(8, 100))}}
            for g in range(draw(st.integers(1, 2)))]
    return workload


distribution_workload = st.fixed_dictionaries({
    "type": st.just("distribution"),
    "num_requests": st.integers(1, 40),
    "rate_per_s": st.sampled_from([20, 80, 300]),
    "prefix_tokens": st.sampled_from([0, 0, 40]),
    "prompt": st.just({"mean": 60, "stdev": 40, "min": 1, "max": 250}),
    "output": st.just({"mean": 40, "stdev": 30, "min": 1, "max": 150}),
})



@st.composite
def admission(draw: st.DrawFn) -> dict[str, Any]:
    """Every admission template; admitting everything half of the time, so engines have work."""
    kind = draw(st.sampled_from(["always-admit"] * 4 + ["reject-all", "token-bucket",
                                                        "rate-limit", "tenant-quota",
                                                        "tier-shed", "gaie-legacy"]))
    if kind == "token-bucket":
        return {"type": kind, "params": {"capacity": draw(st.sampled_from([500, 5000])),
                                         "refill_per_s": draw(st.sampled_from([0, 5e3, 5e4])),
                                         "per_tenant": draw(st.booleans())}}
    if kind == "rate-limit":
        return {"type": kind, "params": {"max_requests": draw(st.integers(1, 5)),
                                         "window_s": 0.05,
                                         "on_limit": draw(st.sampled_from(["reject", "delay"]))}}
    if kind == "tenant-quota":
        return {"type": kind, "params": {"default_quota": draw(st.integers(0, 4))}}
    if kind == "tier-shed":
        return {"type": kind, "params": {"threshold": draw(st.integers(0, 6)),
                                         "priorities": {"batch": -1, "": 3, "realtime": 4}}}
    return {"type": kind}


priority = st.sampled_from([
    {"type": "constant"},
    {"type": "slo-based", "params": {"class_scores": {"realtime": 10, "batch": -5}}},
    {"type": "inverted-slo", "params": {"class_scores": {"realtime": 10}}},
    {"type": "tenant-priority", "params": {"tenants": {"gold": 3, "bulk": -1}}},
    {"type": "deadline-aware", "params": {"deadlines_s": {"realtime": 0.05}}},
])
routing = st.sampled_from([
    {"type": "round-robin"}, {"type": "least-loaded"}, {"type": "always-busiest"},
    {"type": "prefix-affinity"}, {"type": "weighted"},
    {"type": "weighted", "params": {"scorers": {"queue-depth": 1, "kv-utilization": 1}}},
    {"type": "weighted", "params": {"scorers": {"precise-prefix-cache": 2, "no-hit-lru": 1,
                                                "active-requests": 1, "load-aware": 1}}},
    {"type": "weighted", "params": {"scorers": {"running-requests": 1, "vllm-dp": 1}}},
])


@st.composite
def flow_control(draw: st.DrawFn) -> dict[str, Any]:
    """A gateway queue with random limits and rules (native mode only)."""
    return {
        "saturation": draw(st.sampled_from([
            {"type": "utilization", "queue_depth": 2}, {"type": "concurrency",
                                                         "max_in_flight": 3},
            {"type": "never"}])),
        "max_queue_depth": draw(st.integers(0, 8)), "band_capacity": draw(st.integers(0, 4)),
        "priorities": {"realtime": 4, "interactive": 3, "": 0, "batch": -1},
        "on_full": draw(st.sampled_from(["reject", "shed-lowest"])),
        "dispatch_order": draw(st.sampled_from(["priority", "fifo", "slo-deadline"])),
        "fairness": draw(st.sampled_from(["global-strict", "round-robin"])),
        "usage_limit": draw(st.sampled_from([1.0, 0.5])),
        "queue_ttl_s": draw(st.sampled_from([None, 0.05])),
    }
scheduler = st.builds(lambda t, p: {"type": t, "params": {"preemption": p}},
                      st.sampled_from(["fcfs", "priority-fcfs", "sjf", "reverse-priority"]),
                      st.sampled_from(["lifo", "lowest-priority"]))


@st.composite
def engine(draw: st.DrawFn) -> dict[str, Any]:
    """Small KV caches (128-1,500 tokens: a few requests each) force preemption."""
    block_size = draw(st.sampled_from([4, 16]))
    return {
        "kv_blocks": draw(st.integers(128, 1500)) // block_size,
        "block_size": block_size,
        "max_running_requests": draw(st.integers(1, 16)),
        "max_scheduled_tokens": draw(st.sampled_from([16, 64, 256, 2048])),
        "long_prefill_threshold": draw(st.sampled_from([0, 0, 32, 200])),
    }


@st.composite
def clusters(draw: st.DrawFn, first: tuple[str, ...] | None = None) -> Scenario:
    """A random small cluster scenario (a few dozen requests at most); with `first`, a
    tenants workload whose first tenant is of one of those kinds."""
    compat = draw(st.sampled_from(["none", "none", "blis"]))
    data = merge(BASE, {
        "seed": draw(st.integers(0, 2**31)),
        "compat": compat,
        "engine": draw(engine()),
        "cluster": {"instances": draw(st.integers(1, 8)),
                    "admission_latency_us": draw(st.sampled_from([0, 0, 500])),
                    "routing_latency_us": draw(st.sampled_from([0, 0, 300])),
                    "observability": draw(st.sampled_from([{}, STALE]))},
        "policies": {"admission": draw(admission()), "priority": draw(priority),
                     "routing": draw(routing), "scheduler": draw(scheduler)},
        "evaluation": {"preemption_storm": {"count": 3, "window_s": 0.1}},
    })
    data["workload"] = draw(tenants_workload(first) if first else
                            st.one_of(tenants_workload(), distribution_workload))
    if compat == "blis" and data["workload"]["type"] == "distribution":
        data["workload"]["arrival"] = "constant"
    if compat == "none":  # client timeouts: natively only (the reference has none)
        data["workload"]["timeout_s"] = draw(st.sampled_from([None, None, 0.02, 0.2]))
        if draw(st.booleans()):  # so is the gateway queue
            data["cluster"]["flow_control"] = draw(flow_control())
    horizon = draw(st.sampled_from([None, None, None, 0.03, 0.3]))
    if horizon is not None:
        data["horizon_s"] = horizon
    return Scenario.from_dict(data)


@dataclass
class Run:
    sim: Simulation
    result: Result

    @property
    def cut(self) -> bool:
        """A horizon may have stopped the run with requests in flight."""
        return self.sim.scenario.horizon_us is not None

    @property
    def compat(self) -> bool:
        return self.sim.scenario.compat == "blis"


def simulated(scenario: Scenario) -> Run:
    """The run with the event log and the debug checks on (KV conservation after every block
    operation, a monotone clock: InvariantError otherwise)."""
    sim = prepare(scenario, recorder=Recorder(events=True), checks=True)
    result = simulate(sim)
    event(f"mode={scenario.compat} cut={scenario.horizon_s is not None} "
          f"preempted={bool(result.requests.preemptions.sum())}")
    return Run(sim, result)


# --- the invariants -------------------------------------------------------------------------

@SETTINGS
@given(scenario=clusters())
def test_every_request_ends_in_exactly_one_terminal_state(scenario):
    """Every request that arrived is in the table once, in one state: completed (all its
    tokens out) or rejected (with a reason), or, only when a horizon cut the run, still in
    flight; the summary's outcome counts add up to the arrivals."""
    run = simulated(scenario)
    req, summary = run.result.requests, run.result.summary
    arrivals = [subject for _, kind, subject, _ in run.result.events or () if kind == "arrival"]
    assert sorted(req.id) == sorted(arrivals)
    assert req.id.is_unique
    states = set(req.final_state)
    assert states <= (TERMINAL | UNFINISHED if run.cut else TERMINAL), states
    done = req[req.final_state == "completed"]
    assert (done.generated_tokens == done.output_tokens).all()
    rejected = req[req.final_state == "rejected"]
    assert (rejected.reject_code != "").all() and (rejected.reject_reason != "").all()
    timed_out = req[req.final_state == "timed_out"]
    assert timed_out.completion_s.isna().all() and timed_out.timed_out_s.notna().all()
    assert summary["timed_out_requests"] == len(timed_out)
    assert (req[req.final_state != "rejected"].reject_code == "").all()
    in_flight = int(req.final_state.isin(UNFINISHED).sum())
    assert summary["arrived_requests"] == len(req)
    assert summary["completed_requests"] == len(done)
    assert summary["rejected_requests"] == len(rejected)
    assert summary["still_queued"] == int((req.final_state == "queued").sum())
    assert summary["still_running"] == int((req.final_state == "running").sum())
    assert len(done) + len(rejected) + len(timed_out) + in_flight == len(req)
    if not run.cut:
        for instance in run.sim.fleet:
            assert not instance.running and not instance.wait_queue and not instance.inbox.items
            assert instance.kv.used == 0


@SETTINGS
@given(scenario=clusters())
def test_each_request_moves_forward_in_time(scenario):
    """arrival <= admitted <= routed <= queued <= scheduled <= first token <= completion, for
    every timestamp a request has; a later stage never without the earlier ones."""
    run = simulated(scenario)
    stamps = run.result.requests[list(STAMPS)].to_numpy(dtype=float)
    seen = ~np.isnan(stamps)
    assert seen[:, 0].all()  # every request arrived
    for i, row in enumerate(stamps):
        present = row[seen[i]]
        reached = int(seen[i].sum())
        assert seen[i, :reached].all(), (run.result.requests.iloc[i].to_dict())
        assert (np.diff(present) >= 0).all(), run.result.requests.iloc[i].to_dict()


@SETTINGS
@given(scenario=clusters())
def test_the_clock_is_monotone_and_kv_blocks_are_conserved(scenario):
    """With the debug checks on, KV conservation after every block operation and the clock
    are verified while running (InvariantError); the event log is in time order, every
    step row lies inside the run and no instance ever uses more KV blocks than it has."""
    run = simulated(scenario)
    times = [t for t, *_ in run.result.events or ()]
    assert times == sorted(times)
    steps = run.result.steps
    assert (steps.groupby("instance").start_s.diff().dropna() > 0).all()
    kv_total = run.sim.scenario.engine.kv_blocks
    assert (steps.kv_blocks_used <= kv_total).all() and (steps.kv_blocks_used >= 0).all()
    if run.cut:
        assert (steps.start_s <= scenario.horizon_s).all()


@SETTINGS
@given(scenario=clusters())
def test_no_token_is_counted_twice(scenario):
    """Output tokens in the summary are the requests' generated tokens (compat: the
    reference's count, one fewer per request); the steps' decode tokens are the generated
    tokens less one per completed prefill; the steps' prefill tokens cover each prompt's
    uncached part (whole cached blocks, never the whole prompt), exactly once without
    preemption; natively a request's inter-token gaps add up to its last token less its
    first; the instances' summaries add up to the cluster's."""
    run = simulated(scenario)
    req, steps, summary = run.result.requests, run.result.steps, run.result.summary
    generated = req.generated_tokens.to_numpy()
    expected = np.maximum(generated - 1, 0).sum() if run.compat else generated.sum()
    assert summary["total_output_tokens"] == expected
    assert summary["preemption_count"] == int(req.preemptions.sum())
    started = req[req.generated_tokens > 0]
    decodes = int(steps.decode_requests.sum())
    prefills_done = int(generated.sum()) - decodes
    preemptions = int(req.preemptions.sum())
    # Natively a token is emitted when its step ends (seed D.5.2): a request that times out
    # while a step computing its next token is under way never receives it, one decode each.
    left = 0 if run.compat else int((req.final_state == "timed_out").sum())
    assert len(started) - left <= prefills_done <= len(started) + preemptions
    scheduled = req[req.scheduled_s.notna()]
    assert (scheduled.cached_tokens % scenario.engine.block_size == 0).all()  # whole blocks
    assert (scheduled.cached_tokens < scheduled.input_tokens).all()  # one token computed
    uncached = (req.input_tokens - req.cached_tokens)
    prefill = int(steps.prefill_tokens.sum())
    if preemptions == 0:
        if not run.cut:
            assert len(started) - left <= prefills_done <= len(started)
        assert uncached[req.generated_tokens > 0].sum() <= prefill
        assert prefill <= uncached[req.scheduled_s.notna()].sum()
    else:
        assert prefill >= uncached[(req.generated_tokens > 0) & (req.preemptions == 0)].sum()
    if not run.compat:  # natively the gaps between a request's tokens add up to its span
        many = req[(req.final_state == "completed") & (req.output_tokens > 1)]
        spans = many.e2e_ms - many.ttft_ms
        assert np.allclose(many.itl_mean_ms * (many.output_tokens - 1), spans, atol=1e-6)
    if "instances" in summary:
        per = summary["instances"]
        assert sum(s["completed_requests"] for s in per) == summary["completed_requests"]
        assert sum(s["total_output_tokens"] for s in per) == summary["total_output_tokens"]


@SETTINGS
@given(scenario=clusters())
def test_the_same_seed_gives_identical_results(scenario):
    """Two runs of one scenario: the same summary, metrics and tables, to the last bit."""
    first, second = simulated(scenario).result, simulated(scenario).result
    assert first.summary == second.summary
    for name in ("requests", "steps", "anomalies", "instances"):
        pd.testing.assert_frame_equal(getattr(first, name), getattr(second, name))
    assert without_wall(first.metrics) == without_wall(second.metrics)
    assert first.events == second.events


def without_wall(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metrics.items() if "wall" not in k}


@SETTINGS
@given(scenario=clusters())
def test_nothing_starts_after_the_horizon(scenario):
    """At a horizon no request arrives, is admitted, routed, queued or scheduled later, and
    no step starts later. A step that started before it is reported whole (as the reference
    does): its tokens, and completions, at its end (+ the output delay), which may lie past
    the horizon, never past that."""
    run = simulated(scenario)
    req, steps = run.result.requests, run.result.steps
    horizon = scenario.horizon_s if run.cut else np.inf
    for stamp in STAMPS[:5]:
        assert (req[stamp].dropna() <= horizon).all(), stamp
    assert (steps.start_s <= horizon).all()
    delay = run.sim.fleet.routable[0].latency.output_delay / 1e6
    step_end = (steps.start_s + steps.duration_ms / 1e3).groupby(steps.instance).max()
    routed = req[req.instance != ""]
    latest = routed.instance.map(step_end).fillna(0) + delay + 1e-9
    for stamp in ("first_token_s", "completion_s"):
        seen = routed[stamp].notna()
        assert (routed[stamp][seen] <= latest[seen]).all(), stamp


@SETTINGS
@given(scenario=clusters())
def test_head_of_line_episodes_never_overlap(scenario):
    """kv_hol_blocking episodes on one instance follow one another (one queue head at a
    time); a request is in at most one hol_blocking episode at a time; each episode starts
    while its request waits and ends within the run."""
    run = simulated(scenario)
    table, req = run.result.anomalies, run.result.requests.set_index("id")
    assert table is not None
    assert (table.end_s >= table.time_s).all()
    ended = max(instance.last_event for instance in run.sim.fleet) / 1e6
    for kind in ("kv_hol_blocking", "hol_blocking"):
        episodes = table[table.type == kind]
        if episodes.empty:
            continue
        event(f"{kind} episodes")
        assert (episodes.end_s <= ended + 1e-9).all()
        blocked = episodes.requests.str.split(";").str[0]
        assert (episodes.instance.to_numpy() == req.instance[blocked].to_numpy()).all()
        assert (req.queued_s[blocked].to_numpy() <= episodes.time_s.to_numpy() + 1e-9).all()
        key = episodes.instance if kind == "kv_hol_blocking" else episodes.instance + blocked
        for _, group in episodes.groupby(key):
            group = group.sort_values("time_s")
            assert (group.time_s.to_numpy()[1:] >= group.end_s.to_numpy()[:-1] - 1e-9).all()


@SETTINGS
@given(scenario=clusters())
def test_every_step_respects_the_engine_limits(scenario):
    """No step runs more requests than max_running_requests or more tokens than the step's
    budget, and every instance's queue and KV levels stay within their bounds."""
    run = simulated(scenario)
    steps, engine = run.result.steps, run.sim.scenario.engine
    assert (steps.batch_size <= engine.max_running_requests).all()
    assert (steps.prefill_tokens + steps.decode_requests <= engine.max_scheduled_tokens).all()
    assert (steps.batch_size >= 1).all()
    assert (steps.queue_depth >= 0).all()


@SETTINGS
@given(scenario=clusters(first=("chat", "agentic")))
def test_sessions_send_each_turn_after_the_previous_response(scenario):
    """A chat or agentic session's turns are numbered 0, 1, ...; each is sent only after the
    previous one completed (its last token delivered), and none follows a turn that did not
    complete. A linearly growing chat carries the whole previous exchange."""
    run = simulated(scenario)
    req = run.result.requests
    sessions = req[req.session != ""]
    for _, turns in sessions.groupby("session"):
        turns = turns.sort_values("turn")
        assert list(turns.turn) == list(range(len(turns)))
        before, after = turns.iloc[:-1], turns.iloc[1:]
        assert (before.final_state == "completed").all()
        assert (after.arrival_s.to_numpy() >= before.completion_s.to_numpy() - 1e-9).all()
    tenants = {t.id: t for t in getattr(run.sim.scenario.workload, "tenants", [])}
    linear = [tid for tid, t in tenants.items()
              if t.request_type == "chat" and t.chat.context_growth == "linear"]
    for _, turns in sessions[sessions.tenant.isin(linear)].groupby("session"):
        turns = turns.sort_values("turn")
        carried = turns.input_tokens.to_numpy()[:-1] + turns.output_tokens.to_numpy()[:-1]
        assert (turns.input_tokens.to_numpy()[1:] > carried).all()
    event(f"sessions with several turns: {bool((sessions.turn > 0).any())}")


@SETTINGS
@given(scenario=clusters(first=("closed-loop",)))
def test_closed_loop_users_wait_for_their_response(scenario):
    """A closed-loop tenant never has more requests in flight (arrived, not yet completed,
    rejected, timed out or cut off) than it has users."""
    run = simulated(scenario)
    req = run.result.requests
    rejected_at = {name: t / 1e6 for t, _, name in run.sim.recorder.rejections}
    ends = np.where(req.final_state == "completed", req.completion_s,
                    np.where(req.final_state == "timed_out", req.timed_out_s,
                             req.id.map(rejected_at).fillna(np.inf)))
    for spec in getattr(scenario.workload, "tenants", []):
        if spec.closed_loop is None:
            continue
        mine = (req.tenant == spec.id).to_numpy()
        arrivals, finished = req.arrival_s.to_numpy()[mine], ends[mine]
        most = max((int(((arrivals <= t) & (finished > t)).sum()) for t in arrivals), default=0)
        assert most <= spec.closed_loop.users
        event(f"closed loop at its user limit: {most == spec.closed_loop.users}")
