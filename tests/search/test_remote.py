"""The stand-ins are faithful: a candidate's source run in the sandbox, one call per decision,
gives the run the same source gives as an in-process user policy (`module:Class`), on every
axis, reading everything a policy may read (the router state and its tenants' windows, the
shadow KV for other hashes than the request's, refreshed snapshots, aging priorities,
preemption victims)."""

from __future__ import annotations

import contextlib
import itertools
import marshal
import math
import struct
import sys
import types
from typing import Any, NoReturn

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import PolicyError
from blis_simpy.core.request import RequestView
from blis_simpy.core.router_state import RouterState
from blis_simpy.core.snapshot import InstanceSnapshot, Role
from blis_simpy.policies.guard import GUARDS, guarded
from blis_simpy.policies.routing import RoutingPolicy
from blis_simpy.search import wire
from blis_simpy.search.cell import AXIS_NAMES
from blis_simpy.search.code import CodePolicy, check
from blis_simpy.search.contain import ContainedFailure
from blis_simpy.search.remote import SESSION, STAND_INS
from blis_simpy.search.sweep import run_many
from tests.search.helpers import prefix_scenario

ADMISSION = """
class Policy(AdmissionPolicy):
    def __init__(self, params=None):
        super().__init__(params)
        self.calls = 0

    def decide(self, req, state, clock):
        self.calls += 1
        tenant = state.tenant(req.tenant_id)
        if tenant.active_requests > 8 and tenant.recent_rate(clock) > 15:
            return AdmissionDecision("reject", f"busy {tenant.active_requests}")
        if state.in_flight > 10 and state.request_rate() > 20 and self.calls % 3 == 0:
            return AdmissionDecision("delay", "later", 20_000 + len(state.tenant_ids()))
        return ADMIT
"""
PRIORITY = """
class Policy(PriorityPolicy):
    ages = True

    def compute(self, req, state, clock):
        base = 10.0 if req.slo_class == "interactive" else 0.0
        busy = 0.0 if state is None else state.tenant(req.tenant_id).active_requests / 100
        return base - busy + 1e-6 * (clock - req.arrival_us) + len(req.prefix_hashes) / 1e3
"""
ROUTING = """
class Policy(RoutingPolicy):
    reads_shadow_kv = True

    def __init__(self, params=None):
        super().__init__(params)
        self.seen = 0

    def route(self, req, priority, snapshots, state, clock):
        self.seen += 1
        if self.seen % 7 == 0:
            snapshots.refresh()
        shadow = state.shadow_kv
        whole = [shadow.expected_hit(s.id, req.prefix_hashes) for s in snapshots]
        head = [shadow.expected_hit(s.id, req.prefix_hashes[:2]) for s in snapshots]
        scores = tuple(w + 0.5 * h - s.effective_load / (1 + s.effective_load)
                       - s.kv_utilization + 0.001 * s.estimated_wait_ms
                       for w, h, s in zip(whole, head, snapshots))
        best = argmax(scores)
        assert state.instance_ids()[best] == snapshots[best].id
        return RoutingDecision(snapshots[best].id, f"blocks={whole[best]}", scores,
                               {"whole": tuple(float(w) for w in whole)})
"""
SCHEDULER = """
class Policy(InstanceScheduler):
    uses_priority = True

    @staticmethod
    def order_key(view, priority):
        return (-round(priority), -view.arrival_us, view.id)

    def victim(self, candidates, priorities):
        lowest = min(priorities)
        return max(i for i, p in enumerate(priorities) if p == lowest)
"""
OBSERVING = """
class Policy(AdmissionPolicy):
    def decide(self, req, state, clock):
        snaps = state.instance_snapshots()
        queued = sum(s.queue_depth for s in snaps)
        hits = sum(s.cache_hit_rate for s in snaps) + sum(
            v for s in snaps for v in s.extended.values())
        history = state.load_history()
        busy = state.burst_detected() or state.tenant(req.tenant_id).burst_detected(clock)
        if req.slo_class == "batch" and (queued > 6 or busy and state.throughput() < 30
                                         or hits > 1.5 and len(history) > 0
                                         and history[-1].in_flight > 12):
            return AdmissionDecision("reject", f"queued {queued} hits {hits:.3f}")
        return ADMIT
"""
AXES = {"admission": ADMISSION, "priority": PRIORITY, "routing": ROUTING,
        "scheduler": SCHEDULER}
IN_PROCESS = itertools.count()


def pressed() -> Scenario:
    """Two tenants of two SLO classes on two instances with a small KV cache, the batch
    tenant's long answers outgrowing it: admission, aging priorities, prefix routing and
    preemption all have something to decide (about 12,000 priority calls a run)."""
    data = prefix_scenario(engine={"kv_blocks": 100},
                           policies={"priority": {"type": "slo-based"},
                                     "scheduler": {"type": "priority-fcfs"}}).to_dict()
    workload = data["workload"]
    workload["rate_per_s"], workload["duration_s"] = 40, 1
    workload["tenants"] = [
        {"id": "t", "rate_fraction": 0.6, "slo_class": "interactive",
         "prefix": {"reuse_probability": 0.9},
         "prompt": {"type": "constant", "value": 64},
         "output": {"type": "constant", "value": 32}},
        {"id": "u", "rate_fraction": 0.4, "slo_class": "batch",
         "prompt": {"type": "constant", "value": 300},
         "output": {"type": "constant", "value": 200}}]
    return Scenario.from_dict(data)


def in_process(axis: str, source: str) -> Scenario:
    """`pressed()` with the source as an ordinary user policy of this process (trusted,
    unsandboxed): in the scenario, where a `module:Class` belongs (a candidate may not name
    one)."""
    name = f"in_process_candidate_{next(IN_PROCESS)}"
    module = types.ModuleType(name)
    module.__dict__.update(AXIS_NAMES[axis])
    sys.modules[name] = module
    exec(compile(source, name, "exec"), module.__dict__)
    data = pressed().to_dict()
    data["policies"][axis] = {"type": f"{name}:Policy"}
    return Scenario.from_dict(data)


COMPARED = ("fitness", "completed_requests", "rejected_requests", "preemption_count",
            "ttft_mean_ms", "ttft_p99_ms", "e2e_mean_ms", "cache_hit_rate", "warnings")


@pytest.mark.parametrize("axis", sorted(AXES))
def test_sandboxed_candidate_runs_as_the_same_policy_in_process(axis):
    code = CodePolicy(axis, AXES[axis])
    check(code)
    sandboxed = run_many(pressed(), {"sandboxed": code}, [1, 2], workers=1)
    local = run_many(in_process(axis, code.source), None, [1, 2], workers=1)
    assert list(sandboxed.error) == ["", ""] and list(local.error) == ["", ""]
    for column in COMPARED:
        assert list(sandboxed[column]) == list(local[column]), column


def test_sandboxed_admission_sees_snapshots_and_router_state():
    """Seed G.2 / 001 §3: an admission candidate in the sandbox reads the instances'
    snapshots (asked of the evaluator when it calls `state.instance_snapshots()`), the
    router state's burst detection, throughput and load history (mirrored), and decides
    exactly as the same source does in process; and those reads decide something."""
    code = CodePolicy("admission", OBSERVING)
    check(code)
    sandboxed = run_many(pressed(), {"sandboxed": code}, [1, 2], workers=1)
    local = run_many(in_process("admission", code.source), None, [1, 2], workers=1)
    assert list(sandboxed.error) == ["", ""] and list(local.error) == ["", ""]
    for column in COMPARED:
        assert list(sandboxed[column]) == list(local[column]), column
    assert (sandboxed.rejected_requests > 0).all()


def test_every_axis_decides_something():
    """The comparison above is not vacuous: the scenario makes each axis's choices matter."""
    table = run_many(pressed(), {axis: CodePolicy(axis, source) for axis, source in
                                 AXES.items()} | {"none": None}, [1], workers=1)
    rows = {row.policy: row for row in table.itertuples()}
    assert rows["admission"].rejected_requests > 0
    assert rows["none"].preemption_count > 0
    for axis in AXES:
        assert rows[axis].ttft_mean_ms != rows["none"].ttft_mean_ms, axis


def test_a_candidate_error_names_the_policy_call_and_request():
    raising = CodePolicy("priority", "class Policy(PriorityPolicy):\n"
                         "    def compute(self, req, state, clock):\n"
                         "        return {'a': 1}[req.tenant_id]\n")
    failing_init = CodePolicy("admission", "class Policy(AdmissionPolicy):\n"
                              "    def __init__(self, params=None):\n"
                              "        raise ValueError('no params')\n"
                              "    def decide(self, req, state, clock):\n"
                              "        return ADMIT\n")
    missing = CodePolicy("routing", "class Policy(RoutingPolicy):\n    pass\n")
    module_level = CodePolicy("routing", "LIMIT = 1 // 0\nclass Policy(RoutingPolicy):\n"
                              "    pass\n")
    rows = run_many(prefix_scenario(), {"raising": raising, "init": failing_init,
                                        "missing": missing, "module": module_level}, [1],
                    workers=1)
    errors = dict(zip(rows.policy, rows.error, strict=True))
    assert "Policy.compute for request request_0 raised KeyError: 't'" in errors["raising"]
    assert "raised ValueError: no params" in errors["init"]
    assert "does not define route(req, priority, snapshots, state, clock)" in errors["missing"]
    assert "ZeroDivisionError: integer division or modulo by zero" in errors["module"]
    assert list(rows.fitness) == [0.0] * 4


class Scripted:
    """A session whose candidate answers every decision with `reply` (after `checked`: a
    list headed by a string), whatever it is."""

    def __init__(self, reply: list[Any]) -> None:
        self.reply = reply
        self.views, self.state = wire.ViewSender(), wire.StateSender()

    def call(self, message: list[Any], answer: Any = None) -> list[Any]:
        if message[0] == "new":
            return ["ok", 0, {"order_key": True, "reads_shadow_kv": True}]
        return self.reply

    def exchange(self, data: bytes, answer: Any = None) -> Any:
        return self.call(marshal.loads(data[4:]), answer)

    def fail(self, what: str) -> NoReturn:
        raise ContainedFailure(f"the candidate {what}")


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats()
                    | st.text(max_size=4),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=10)
REPLIES = st.one_of(
    st.tuples(st.sampled_from(["ok", "raised", "bad", "error", "ask", "log", ""]),
              st.lists(JSON, max_size=6)).map(lambda t: [t[0], *t[1]]),
    st.lists(JSON, min_size=5, max_size=5).map(lambda fields: ["ok", *fields]),
    st.tuples(st.sampled_from(["instance_0", "instance_1", "nowhere"]), st.text(max_size=3),
              st.lists(st.one_of(st.floats(), st.integers()), max_size=3),
              st.one_of(st.none(), st.dictionaries(st.text(max_size=2), st.lists(
                  st.floats(), max_size=3), max_size=2)),
              st.lists(st.sampled_from(["instance_0", "x"]), max_size=2)).map(
        lambda fields: ["ok", *fields]))


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(sorted(STAND_INS)), REPLIES)
def test_whatever_a_candidate_replies_is_a_decision_or_a_policy_error(axis, reply):
    """The evaluator's side never fails otherwise on a reply: each field is checked for its
    type, then the policy guard checks what it means."""
    token = SESSION.set(Scripted(reply))  # type: ignore[arg-type]
    try:
        base = next(b for b in GUARDS if issubclass(STAND_INS[axis], b))
        policy = guarded(STAND_INS[axis](None), base, f"policies.{axis}", "c:Policy")
        view = RequestView("r1", 0, 10, "t", "batch", (1, 2))
        state = RouterState()
        state.instances = ("instance_0", "instance_1")
        snapshots = [InstanceSnapshot(i, Role.MONOLITHIC, 0, 0, 0, 0.0, 10, 0, 0, 0.0, 0.0,
                                      0.0, 0.0) for i in state.instances]
        calls = {"admission": lambda: policy.decide(view, state, 5),
                 "priority": lambda: policy.compute(view, state, 5),
                 "routing": lambda: policy.route(view, 0.0, snapshots, state, 5),
                 "scheduler": lambda: (policy.order_key(view, 1.0),
                                       policy.victim([view, view], [1.0, 2.0]))}
        try:
            out = calls[axis]()
        except PolicyError:
            return
        if axis in ("admission", "routing"):  # the fields the guard does not look at
            assert isinstance(out.reason, str) and len(out.reason) <= 2 * wire.MAX_TEXT
        if axis == "routing":
            assert out.target in state.instances and isinstance(out.scores, tuple)
        if axis == "priority":
            assert type(out) is float
        if axis == "scheduler":
            assert type(out[1]) is int and isinstance(out[0], tuple | int | float | str)
    finally:
        SESSION.reset(token)


def record(target: bytes, reason: bytes, scores: bytes, count: int) -> bytes:
    """A routing decision's fixed record as a candidate could write it, lengths included."""
    return struct.pack("<cHHH", b"R", len(target), len(reason), count) + target + reason + scores


RECORDS = st.one_of(
    st.binary(max_size=40).map(lambda b: b"R" + b),
    st.tuples(st.sampled_from([b"instance_0", b"instance_1", b"nowhere", b"\xff", b""]),
              st.binary(max_size=8) | st.just(b"x" * 2001),
              st.lists(st.floats(), max_size=3), st.integers(0, 4)).map(
        lambda t: record(t[0], t[1], struct.pack(f"<{len(t[2])}d", *t[2]), t[3])),
    st.tuples(st.sampled_from([b"instance_0", b"instance_1"]), st.binary(max_size=4),
              st.lists(st.floats(), min_size=2, max_size=2)).map(
        lambda t: record(t[0], t[1], struct.pack("<2d", *t[2]), 2)))


@settings(max_examples=400, deadline=None)
@given(RECORDS)
def test_whatever_routing_record_a_candidate_writes_is_a_decision_or_a_policy_error(body):
    """The usual routing decision comes back as a fixed binary record: one whose lengths do
    not add up, whose strings are not UTF-8, whose reason is too long, whose target is not
    routable or whose scores are not finite is refused; what is accepted is exactly what it
    says."""
    token = SESSION.set(Scripted(body))  # type: ignore[arg-type]
    try:
        policy = guarded(STAND_INS["routing"](None), RoutingPolicy, "policies.routing", "c:Policy")
        view = RequestView("r1", 0, 10, "t", "batch", (1, 2))
        state = RouterState()
        state.instances = ("instance_0", "instance_1")
        snapshots = [InstanceSnapshot(i, Role.MONOLITHIC, 0, 0, 0, 0.0, 10, 0, 0, 0.0, 0.0,
                                      0.0, 0.0) for i in state.instances]
        try:
            out = policy.route(view, 0.0, snapshots, state, 5)
        except PolicyError:
            return
        target_size, reason_size, count = struct.unpack_from("<HHH", body, 1)
        assert out.target in state.instances and count == 2
        assert out.target.encode() == body[7:7 + target_size]
        assert out.reason.encode() == body[7 + target_size:7 + target_size + reason_size]
        assert len(out.reason) <= 2 * wire.MAX_TEXT
        assert out.scores == struct.unpack_from("<2d", body, 7 + target_size + reason_size)
        assert all(math.isfinite(s) for s in out.scores) and out[3:] == (None, (), "", "")
    finally:
        SESSION.reset(token)


class Hooked(Scripted):
    """A scripted session whose scheduler defines seed G.1's make_batch and
    on_request_arrival."""

    def call(self, message: list[Any], answer: Any = None) -> list[Any]:
        if message[0] == "new":
            return ["ok", 0, {"make_batch": True, "on_request_arrival": True}]
        return self.reply


POSITIONS = st.lists(st.integers(-1, 3), max_size=4)
BATCH_REPLIES = st.one_of(
    REPLIES,
    st.tuples(st.one_of(POSITIONS, JSON),
              st.one_of(st.lists(st.tuples(st.integers(-1, 3), st.integers(-1, 60)).map(list),
                                 max_size=3), JSON),
              st.one_of(POSITIONS, JSON)).map(lambda fields: ["ok", *fields]),
    st.just(["ok"]))


@settings(max_examples=400, deadline=None)
@given(BATCH_REPLIES)
def test_whatever_a_candidate_replies_to_the_scheduler_hooks_is_a_decision_or_an_error(reply):
    """make_batch's reply is a BatchDecision the guard accepts (positions in range, chunk
    sizes >= 1, distinct victims among the running) or a PolicyError; on_request_arrival's
    is nothing or a PolicyError."""
    from blis_simpy.policies.scheduler import BatchDecision, InstanceScheduler, SchedulerContext

    token = SESSION.set(Hooked(reply))  # type: ignore[arg-type]
    try:
        policy = guarded(STAND_INS["scheduler"](None), InstanceScheduler, "policies.scheduler",
                         "c:Policy")
        views = tuple(RequestView(f"r{i}", i, 10, "t", "batch", (i,)) for i in range(4))
        ctx = SchedulerContext(views[:3], (1.0, 2.0, 0.5), ({}, {}, {}), views[3:], 7, 100,
                               2, 64)
        try:
            out = policy.make_batch(ctx)
        except PolicyError:
            out = None
        if out is not None:
            assert isinstance(out, BatchDecision)
            assert all(type(i) is int and 0 <= i < 3 for i in out.to_schedule)
            assert all(type(n) is int and n >= 1 for n in out.chunk_sizes.values())
            assert out.victims in ((), (0,))
        with contextlib.suppress(PolicyError):
            assert policy.on_request_arrival(views[0], ctx) is None
    finally:
        SESSION.reset(token)


LATE_READER = """
class Policy(RoutingPolicy):
    def __init__(self, params=None):
        super().__init__(params)
        self.seen = 0

    def route(self, req, priority, snapshots, state, clock):
        self.seen += 1
        loads = [s.effective_load for s in snapshots]
        if self.seen > 25:  # the router state read from the 26th call on only
            rate = state.request_rate() + len(state.load_history()) + state.in_flight
            loads = [load + (rate % 3) * i for i, load in enumerate(loads)]
        best = loads.index(min(loads))
        return RoutingDecision(snapshots[best].id, "late", tuple(-x for x in loads))
"""


def test_a_candidate_that_reads_the_router_state_late_runs_as_in_process():
    """The state crosses only once a candidate reads it (whole, then as deltas): a
    candidate that starts reading it after 25 calls decides as the same policy in process."""
    code = CodePolicy("routing", LATE_READER)
    sandboxed = run_many(pressed(), {"sandboxed": code}, [1], workers=1)
    local = run_many(in_process("routing", code.source), None, [1], workers=1)
    assert list(sandboxed.error) == [""] and list(local.error) == [""]
    for column in COMPARED:
        assert list(sandboxed[column]) == list(local[column]), column
