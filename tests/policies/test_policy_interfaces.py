"""Issue 34 item 5: the seed's policy interfaces (seed 000 G.1)."""

from __future__ import annotations

import random
import sys
import types
from typing import ClassVar

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blis_simpy
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import PolicyError
from blis_simpy.core.request import NO_HINTS, Request, RequestView
from blis_simpy.core.snapshot import Role
from blis_simpy.engine.step import Stepper
from blis_simpy.policies.guard import guarded
from blis_simpy.policies.priority import PriorityDecision, PriorityPolicy
from blis_simpy.policies.routing import RoutingDecision, RoutingPolicy
from blis_simpy.policies.scheduler import BatchDecision, InstanceScheduler, SchedulerContext
from blis_simpy.search.cell import AXIS_NAMES
from blis_simpy.search.code import CodePolicy, check
from blis_simpy.search.sweep import run_many
from tests.cluster.pd_helpers import pd_scenario, run_pd
from tests.conftest import trace_run_scenario, write_trace
from tests.policies.test_behaviour import policies, queued_behind_a_long_request, run
from tests.search.test_remote import COMPARED, PRIORITY, in_process, pressed
from tests.sim.test_cluster_invariants import TERMINAL, UNFINISHED, clusters, simulated

HINTED = PRIORITY.replace(
    "        return base - busy",
    "        score = base - busy").rstrip() + """
        return PriorityDecision(score, {"deadline_us": req.arrival_us + 50_000,
                                        "tier": req.slo_class, "urgent": base > 0,
                                        "note": None})
"""


class Hinted(PriorityPolicy):
    def __init__(self, hints: object) -> None:
        super().__init__()
        self.hints = hints

    def compute(self, req, state, clock):
        return PriorityDecision(2.5, self.hints)  # type: ignore[arg-type]


VIEW = RequestView("r0", 0, 10, "t", "interactive", ())


def test_g1_priority_decision_carries_hints():
    """Seed 000 G.1 (PriorityDecision{Score, Hints}): a priority policy may return a
    PriorityDecision with hints instead of a float. The guard checks and copies the hints
    (plain data only), the step's rescoring keeps them on the request, and a sandboxed
    candidate returning one decides exactly as the float-returning source and as the same
    source in process."""
    guard = guarded(Hinted({"deadline_us": 5, "tier": "gold"}), PriorityPolicy, "p", "Hinted")
    out = guard.compute(VIEW, None, 0)
    assert isinstance(out, PriorityDecision) and out.score == 2.5
    assert dict(out.hints) == {"deadline_us": 5, "tier": "gold"}
    for bad in ({"nested": {"a": 1}}, {1: 2}, {"x": float("nan")}, [("a", 1)],
                {f"k{i}": i for i in range(40)}):
        with pytest.raises(PolicyError, match="PriorityDecision"):
            guarded(Hinted(bad), PriorityPolicy, "p", "Hinted").compute(VIEW, None, 0)
    # a float is still a priority, with no hints; the step's rescoring keeps a decision's
    req = Request(0, 0, np.ones(10, dtype=np.int64), np.ones(4, dtype=np.int64))
    assert req.view.priority_hints is NO_HINTS
    Stepper._rescore([req], 0, guard)
    assert req.priority == 2.5 and dict(req.view.priority_hints) == {"deadline_us": 5,
                                                                     "tier": "gold"}
    seen = req.view
    Stepper._rescore([req], 1, guard)  # the same hints again: the same view
    assert req.view is seen
    # sandboxed: same decisions as the float source and as in process
    code = CodePolicy("priority", HINTED)
    check(code)
    hinted = run_many(pressed(), {"hinted": code}, [1], workers=1)
    plain = run_many(pressed(), {"plain": CodePolicy("priority", PRIORITY)}, [1], workers=1)
    local = run_many(in_process("priority", HINTED), None, [1], workers=1)
    assert list(hinted.error) == [""] and list(local.error) == [""]
    for column in COMPARED:
        assert list(hinted[column]) == list(plain[column]) == list(local[column]), column


class JointRouting(RoutingPolicy):
    """Chooses the prefill and the decode instance in one call: the last of each role."""

    routes_pd = True
    calls: ClassVar[list[tuple[str, ...]]] = []
    decode_field = True

    def route(self, req, priority, snapshots, state, clock):
        JointRouting.calls.append(tuple(s.role.value for s in snapshots))
        prefill = [s.id for s in snapshots if s.role is not Role.DECODE] \
            or [s.id for s in snapshots]  # the decode pool's own call
        decode = [s.id for s in snapshots if s.role is Role.DECODE]
        scores = tuple(0.0 for _ in snapshots)
        return RoutingDecision(prefill[-1], "joint", scores, prefill=prefill[-1],
                               decode=decode[-1] if decode and self.decode_field else "")


class PrefillOnly(JointRouting):
    decode_field = False


@pytest.mark.parametrize("choice", ["routing", "handoff"])
def test_g1_routing_decision_carries_prefill_and_decode(choice):
    """Seed 000 G.1 (RoutingDecision{PrefillInstance, DecodeInstance}): a routing policy that
    sets `routes_pd` sees both pools' instances for a disaggregated request and chooses its
    prefill and decode instances in one call (no second routing call for the decode pool);
    one that leaves `decode` empty gets the decode pool's own call at the handoff, as
    before. Policies without `routes_pd` are routed as before (the P/D tests, byte-identical
    outputs)."""
    JointRouting.calls.clear()
    data = pd_scenario(prefill=2, decode=3, requests=30, rate=50, pd={"decode_choice": choice})
    data["policies"] = {"routing": {"type": f"{__name__}:JointRouting"}}
    result, _ = run_pd(data)
    assert set(result.requests.final_state) == {"completed"}
    assert len(result.transfers) > 0 and result.transfers.decode.nunique() == 1
    # one call per request, each seeing both pools (2 prefill + 3 decode instances)
    assert JointRouting.calls == [("prefill",) * 2 + ("decode",) * 3] * 30
    # decode left empty: the decode pool's own call chooses it at the handoff
    JointRouting.calls.clear()
    data["policies"] = {"routing": {"type": f"{__name__}:PrefillOnly"}}
    result, _ = run_pd(data)
    assert set(result.requests.final_state) == {"completed"}
    decode_calls = [c for c in JointRouting.calls if set(c) == {"decode"}]
    assert len(JointRouting.calls) == 30 + len(decode_calls) and len(decode_calls) > 0


JOINT = """
class Policy(RoutingPolicy):
    routes_pd = True

    def route(self, req, priority, snapshots, state, clock):
        decode = [s.id for s in snapshots if str(s.role) == "decode"]
        prefill = [s.id for s in snapshots if str(s.role) != "decode"] or decode
        loads = tuple(-float(s.queue_depth + s.batch_size) for s in snapshots)
        best = max(prefill, key=lambda i: loads[[s.id for s in snapshots].index(i)])
        return RoutingDecision(best, "joint", loads, decode=decode[len(req.id) % len(decode)]
                               if decode and len(prefill) < len(snapshots) else "")
"""


def test_g1_sandboxed_routing_decision_carries_prefill_and_decode():
    """Seed 000 G.1: the P/D fields and `routes_pd` cross the sandbox's wire; a sandboxed
    candidate decides exactly as the same source in process."""
    code = CodePolicy("routing", JOINT)
    check(code)
    scenario = Scenario.from_dict(pd_scenario(prefill=2, decode=3, requests=30, rate=50))
    sandboxed = run_many(scenario, {"joint": code}, [1], workers=1)
    module = types.ModuleType("joint_in_process")
    module.__dict__.update(AXIS_NAMES["routing"])
    sys.modules["joint_in_process"] = module
    exec(compile(JOINT, "joint_in_process", "exec"), module.__dict__)
    data = scenario.to_dict()
    data["policies"]["routing"] = {"type": "joint_in_process:Policy"}
    local = run_many(Scenario.from_dict(data), None, [1], workers=1)
    assert list(sandboxed.error) == [""] and list(local.error) == [""]
    for column in COMPARED[1:]:  # fitness is relative to the scenario's own policies
        assert list(sandboxed[column]) == list(local[column]), column


class NewestFirst(InstanceScheduler):
    """Admits the newest waiting request only (make_batch), counting arrivals."""

    arrivals: ClassVar[list[str]] = []
    chunk = 0

    def make_batch(self, ctx: SchedulerContext) -> BatchDecision:
        if not ctx.wait_queue:
            return BatchDecision(())
        last = len(ctx.wait_queue) - 1
        return BatchDecision((last,), {last: self.chunk} if self.chunk else {})

    def on_request_arrival(self, view: RequestView, ctx: SchedulerContext) -> None:
        NewestFirst.arrivals.append(view.id)


class OldestChunked(NewestFirst):
    chunk = 32

    def make_batch(self, ctx: SchedulerContext) -> BatchDecision:
        return BatchDecision((0,), {0: self.chunk}) if ctx.wait_queue else BatchDecision(())


class OutOfRange(NewestFirst):
    def make_batch(self, ctx: SchedulerContext) -> BatchDecision:
        return BatchDecision((len(ctx.wait_queue),))


def test_g1_scheduler_make_batch_chunk_sizes_and_on_request_arrival(tmp_path):
    """Seed 000 G.1 (InstanceScheduler{MakeBatch, OnRequestArrival}, BatchDecision{ToSchedule,
    ChunkSizes}): a scheduler that defines `make_batch` chooses which waiting requests are
    admitted (here the newest first) and caps their prefill chunks; `on_request_arrival` is
    told of every request joining the queue; a decision out of range is a PolicyError.
    Schedulers without the hooks keep the order-key path (byte-identical outputs)."""
    rows = queued_behind_a_long_request()
    engine = {"max_running_requests": 1}
    NewestFirst.arrivals.clear()
    result = run(tmp_path, rows, engine=engine,
                 policies=policies(scheduler=f"{__name__}:NewestFirst"))
    reqs = result.requests
    assert (reqs.final_state == "completed").all()
    assert list(reqs.scheduled_s[1:].sort_values().index) == [3, 2, 1]
    assert len(NewestFirst.arrivals) == len(set(NewestFirst.arrivals)) == 4  # each told once
    fcfs = run(tmp_path, rows, engine=engine, policies=policies(scheduler="fcfs")).requests
    chunked = run(tmp_path, rows, engine=engine,
                  policies=policies(scheduler=f"{__name__}:OldestChunked")).requests
    assert list(chunked.scheduled_s[1:].sort_values().index) == [1, 2, 3]
    assert chunked.ttft_ms[1] > fcfs.ttft_ms[1]  # 300 tokens in 32-token chunks
    with pytest.raises(PolicyError, match="make_batch"):
        run(tmp_path, rows, engine=engine, policies=policies(scheduler=f"{__name__}:OutOfRange"))


# -- priority hints reach routing (seed G.1: Route(req, priority PriorityDecision, ...)) --------

LANES = """
class Policy(PriorityPolicy):
    ages = False

    def compute(self, req, state, clock):
        lane = "fast" if req.slo_class == "interactive" else "bulk"
        return PriorityDecision(1.0 if lane == "fast" else 0.0, {"lane": lane})
"""
BY_LANE = """
class Policy(RoutingPolicy):
    def route(self, req, priority, snapshots, state, clock):
        lane = req.priority_hints.get("lane")
        want = 0 if lane == "fast" else len(snapshots) - 1
        scores = tuple(1.0 if i == want else 0.0 for i in range(len(snapshots)))
        return RoutingDecision(snapshots[want].id, f"lane {lane}", scores)
"""


def module_of(axis: str, source: str, name: str) -> str:
    """The source as an ordinary in-process user policy module; its `module:Class`."""
    module = types.ModuleType(name)
    module.__dict__.update(AXIS_NAMES[axis])
    sys.modules[name] = module
    exec(compile(source, name, "exec"), module.__dict__)
    return f"{name}:Policy"


def lanes_scenario(priority: str | None, routing: str | None) -> Scenario:
    """`pressed()` (two tenants, interactive and batch, on two instances), with the given
    in-process priority and routing policies (None: the scenario's own)."""
    data = pressed().to_dict()
    if priority is not None:
        data["policies"]["priority"] = {"type": priority}
    if routing is not None:
        data["policies"]["routing"] = {"type": routing}
    return Scenario.from_dict(data)


def test_g1_routing_reads_the_hints_a_priority_policy_set():
    """Seed 000 G.1: Route receives the whole PriorityDecision, so the hints a priority policy
    gives are on the request's view when routing (and the scheduler) read it
    (`req.priority_hints`): here a priority policy sets a lane per SLO class and a routing
    policy sends each lane to its own instance. The same holds with either policy sandboxed
    (the hints cross the wire both ways: back from a priority candidate, out with the view
    to a routing candidate), deciding exactly as both in process."""
    lanes = module_of("priority", LANES, "hints_lanes")
    by_lane = module_of("routing", BY_LANE, "hints_by_lane")
    result = blis_simpy.run(lanes_scenario(lanes, by_lane))
    reqs = result.requests
    assert len(reqs) > 20 and (reqs.final_state == "completed").all()
    expected = np.where(reqs.slo_class == "interactive", "instance_0", "instance_1")
    assert list(reqs.instance) == list(expected)
    assert set(reqs.instance) == {"instance_0", "instance_1"}
    local = run_many(lanes_scenario(lanes, by_lane), None, [1], workers=1)
    priority_sandboxed = run_many(lanes_scenario(None, by_lane),
                                  {"lanes": CodePolicy("priority", LANES)}, [1], workers=1)
    routing_sandboxed = run_many(lanes_scenario(lanes, None),
                                 {"by_lane": CodePolicy("routing", BY_LANE)}, [1], workers=1)
    assert list(local.error) == list(priority_sandboxed.error) == [""]
    assert list(routing_sandboxed.error) == [""]
    for column in COMPARED[1:]:  # fitness is relative to the scenario's own policies
        assert list(priority_sandboxed[column]) == list(local[column]), column
        assert list(routing_sandboxed[column]) == list(local[column]), column


def test_g1_scheduler_context_hints_are_the_views_hints():
    """`SchedulerContext.hints` are the queue's views' `priority_hints`, position by
    position; a request whose priority policy gives none has the empty mapping."""
    seen: list[tuple[tuple[object, ...], tuple[object, ...]]] = []

    class Watching(InstanceScheduler):
        def make_batch(self, ctx):
            seen.append((ctx.hints, tuple(v.priority_hints for v in ctx.wait_queue)))
            return BatchDecision(tuple(range(len(ctx.wait_queue))))

    sys.modules[__name__].Watching = Watching  # type: ignore[attr-defined]
    data = lanes_scenario(module_of("priority", LANES, "hints_lanes_2"), None).to_dict()
    data["policies"]["scheduler"] = {"type": f"{__name__}:Watching"}
    blis_simpy.run(Scenario.from_dict(data))
    assert seen and all(hints == views for hints, views in seen)
    assert {h["lane"] for hints, _ in seen for h in hints} == {"fast", "bulk"}


# -- preemption victims in the batch decision (seed G.1's BatchDecision.PreemptionVictim) ----

class MakesRoom(InstanceScheduler):
    """Admits in queue order, except that a short prompt (< 100 tokens) waiting preempts every
    long running request and is admitted alone."""

    def make_batch(self, ctx: SchedulerContext) -> BatchDecision:
        short = [i for i, v in enumerate(ctx.wait_queue) if v.input_tokens < 100]
        long = tuple(i for i, v in enumerate(ctx.running) if v.input_tokens >= 100)
        if short and long:
            return BatchDecision((short[0],), victims=long)
        return BatchDecision(tuple(range(len(ctx.wait_queue))))


class PreemptsEverything(InstanceScheduler):
    def make_batch(self, ctx: SchedulerContext) -> BatchDecision:
        return BatchDecision((), victims=tuple(range(len(ctx.running))))


class RepeatsAVictim(InstanceScheduler):
    def make_batch(self, ctx: SchedulerContext) -> BatchDecision:
        return BatchDecision((0,), victims=(0, 0) if ctx.running else ())


def test_g1_batch_decision_names_preemption_victims(tmp_path):
    """Seed 000 G.1 (BatchDecision.PreemptionVictim): `make_batch` may name running requests to
    preempt. request_0 (1,000-token prompt) holds the only slot when request_2 (50 tokens)
    arrives: it is preempted in that step (its KV freed, the KV checks on), request_2 runs in
    its place in the same step, the step counts only request_2's tokens (the victim's share
    of the budget given back), and request_0 comes back from the queue's head, recomputes
    and completes: queued, preempted, queued again, completed, each token counted once."""
    rows = queued_behind_a_long_request()
    scheduler = policies(scheduler=f"{__name__}:MakesRoom")
    recorder = blis_simpy.Recorder(events=True)
    result = blis_simpy.run(trace_run_scenario(write_trace(tmp_path / "t.csv", rows),
                                               engine={"max_running_requests": 1},
                                               policies=scheduler),
                            recorder=recorder, checks=True)
    reqs = result.requests
    assert (reqs.final_state == "completed").all()
    assert (reqs.generated_tokens == reqs.output_tokens).all()
    assert list(reqs.preemptions) == [1, 0, 0, 0]
    table = result.preemptions
    assert table is not None and list(table.request) == ["request_0"]
    at = table.time_s[0]
    assert reqs.queued_s[2] <= at and reqs.scheduled_s[2] == pytest.approx(at)
    assert reqs.first_token_s[2] < reqs.completion_s[0]
    assert reqs.completion_s[2] < reqs.scheduled_s[1]  # the victim's queue head came first
    step = result.steps[np.isclose(result.steps.start_s, at, rtol=0, atol=1e-9)].iloc[0]
    assert step.batch_size == 1 and step.decode_requests == 0
    assert step.prefill_tokens == 50  # request_2's prompt only: request_0 gave its share back
    lifecycle = [kind for _, kind, subject, _ in result.events or ()
                 if subject == "request_0" and kind in ("queued", "preempted", "completed")]
    assert lifecycle == ["queued", "preempted", "completed"]
    assert result.summary["preemption_count"] == 1


def test_g1_bad_victims_are_policy_errors(tmp_path):
    """A victim position out of range or named twice, or a decision that preempts every
    running request and admits none (the instance would stall), is a PolicyError naming
    make_batch."""
    rows = queued_behind_a_long_request()
    for cls, what in ((PreemptsEverything, "would stall"), (RepeatsAVictim, "distinct")):
        with pytest.raises(PolicyError, match=f"make_batch.*{what}"):
            run(tmp_path, rows, engine={"max_running_requests": 1},
                policies=policies(scheduler=f"{__name__}:{cls.__name__}"))


# -- the scheduler's hooks cross the sandbox's wire ---------------------------------------------

HOOKS = """
class Policy(InstanceScheduler):
    def __init__(self, params=None):
        super().__init__(params)
        self.crowd = {}

    def on_request_arrival(self, req, ctx):
        self.crowd[req.id] = len(ctx.wait_queue) + len(ctx.running)

    def make_batch(self, ctx):
        queue = ctx.wait_queue
        order = sorted(range(len(queue)), key=lambda i: (-round(ctx.priorities[i]),
                                                         self.crowd.get(queue[i].id, 0), i))
        chunks = {i: 48 for i in order if queue[i].input_tokens > 200}
        victims = ()
        if ctx.free_kv_blocks < 20 and any(queue[i].slo_class == "interactive" for i in order):
            batch = [i for i, v in enumerate(ctx.running) if v.slo_class == "batch"]
            victims = tuple(batch[-1:])
        return BatchDecision(tuple(order), chunks, victims)
"""


def test_g1_sandboxed_scheduler_hooks_cross_the_wire():
    """Seed G.1's make_batch (with chunk sizes and preemption victims) and on_request_arrival
    cross the sandbox's wire: a sandboxed candidate that defines them decides exactly as the
    same source in process (every compared column, through run_many), and its decisions
    matter (preemptions it names, another TTFT than the scenario's own scheduler)."""
    code = CodePolicy("scheduler", HOOKS)
    check(code)
    sandboxed = run_many(pressed(), {"hooks": code, "none": None}, [1, 2], workers=1)
    local = run_many(in_process("scheduler", HOOKS), None, [1, 2], workers=1)
    hooks = sandboxed[sandboxed.policy == "hooks"]
    own = sandboxed[sandboxed.policy == "none"]
    assert list(hooks.error) == ["", ""] and list(local.error) == ["", ""]
    for column in COMPARED:
        assert list(hooks[column]) == list(local[column]), column
    assert list(hooks.ttft_mean_ms) != list(own.ttft_mean_ms)
    assert (hooks.preemption_count > 0).all()


class RandomBatches(InstanceScheduler):
    """Random make_batch decisions (its own seeded generator: runs repeat): any order of the
    queue, chunk caps, and running requests preempted a third of the time."""

    def __init__(self, params):
        super().__init__(params)
        self.rng = random.Random(7)

    def make_batch(self, ctx: SchedulerContext) -> BatchDecision:
        rng = self.rng
        order = list(range(len(ctx.wait_queue)))
        rng.shuffle(order)
        chosen = tuple(order[:rng.randint(1, len(order))])
        chunks = {i: rng.randint(1, 64) for i in chosen if rng.random() < 0.3}
        victims = ()
        if ctx.running and rng.random() < 0.33:
            victims = tuple(rng.sample(range(len(ctx.running)), rng.randint(1, len(ctx.running))))
        return BatchDecision(chosen, chunks, victims)


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenario=clusters(), speculate=st.booleans())
def test_g1_victims_keep_kv_conserved_and_every_request_to_one_end(scenario, speculate):
    """tests/sim's random clusters (tenants, sessions, timeouts, horizons, small KV caches),
    their scheduler replaced by random make_batch decisions with victims (and speculation half
    of the time, whose drafted tokens a victim gives back): with the debug checks on (KV
    conservation after every block operation, a monotone clock), every request ends in one
    state, a completed one with all its tokens and no request with more; each preemption is
    recorded once; no step exceeds the engine's limits; at the end no KV is held."""
    data = scenario.to_dict()
    data["policies"]["scheduler"] = {"type": f"{__name__}:RandomBatches"}
    if speculate and scenario.compat == "none":
        data["engine"]["speculative"] = {"draft_tokens": 3, "acceptance_rate": 0.5}
    run = simulated(Scenario.from_dict(data))
    req, steps, summary = run.result.requests, run.result.steps, run.result.summary
    states = set(req.final_state)
    assert states <= (TERMINAL | UNFINISHED if run.cut else TERMINAL), states
    assert (req.generated_tokens <= req.output_tokens).all()
    done = req[req.final_state == "completed"]
    assert (done.generated_tokens == done.output_tokens).all()
    preempted = run.result.preemptions
    assert summary["preemption_count"] == int(req.preemptions.sum()) == (
        0 if preempted is None else len(preempted))
    engine = run.sim.scenario.engine
    assert (steps.batch_size <= engine.max_running_requests).all()
    assert (steps.kv_blocks_used <= engine.kv_blocks).all()
    if not speculate:
        assert (steps.prefill_tokens + steps.decode_requests <= engine.max_scheduled_tokens).all()
    if not run.cut:
        for instance in run.sim.fleet:
            assert not instance.running and not instance.wait_queue and instance.kv.used == 0
