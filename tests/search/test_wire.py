"""The wire between the evaluator and a candidate's process: what the sandbox rebuilds equals
what the evaluator had (views, snapshots, the router state through its deltas)."""

from __future__ import annotations

import io
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from blis_simpy.core.request import RequestView
from blis_simpy.core.router_state import RouterState
from blis_simpy.core.snapshot import InstanceSnapshot, Role
from blis_simpy.search import wire


def crossed(message: object) -> object:
    """The message as the candidate's process reads it: framed, then read back."""
    return wire.read_frame(io.BytesIO(wire.frame(message)))


OPERATIONS = st.lists(st.tuples(
    st.sampled_from(["arrival", "admit", "reject", "finish", "complete", "instances",
                     "send"]),
    st.sampled_from(["a", "b", "c"]), st.integers(0, 400_000)), max_size=120)


def observed(state: RouterState | wire.StateMirror) -> dict[str, object]:
    """Everything a policy can read of a router state."""
    return {"clock": state.clock, "in_flight": state.in_flight,
            "instances": state.instance_ids(), "tenants": state.tenant_ids(),
            "rate": state.request_rate(), "arrivals": list(state.arrivals),
            "throughput": state.throughput(), "burst": state.burst_detected(),
            "history": state.load_history(), "completed": state.completed,
            **{t: (s.request_count, s.active_requests, s.rejected, list(s.recent or ()),
                   s.recent_rate(state.clock), s.burst_detected(state.clock))
               for t, s in state.tenants.items()}}


@settings(max_examples=200, deadline=None)
@given(OPERATIONS)
def test_the_mirror_equals_the_gateways_router_state_after_every_delta(operations):
    """Whatever the gateway did between two calls (arrivals, admissions, rejections,
    finishes, completions, fleet changes, with windows sliding), the delta brings the mirror
    to the same observable state (bursts, throughput and load history included), through a
    framed round trip."""
    state, sender, mirror = RouterState(), wire.StateSender(), wire.StateMirror()
    clock = 0
    for kind, tenant, step in operations:
        clock += step
        state.clock = clock
        if kind == "arrival":
            state.on_arrival(tenant, clock)
        elif kind == "admit":
            state.on_admit(tenant)
        elif kind == "reject" and tenant in state.tenants:
            state.on_reject(tenant)
        elif kind == "finish" and state.tenant(tenant).active_requests > 0:
            state.on_finish(tenant)
        elif kind == "complete" and state.tenant(tenant).active_requests > 0:
            state.on_finish(tenant)
            state.on_complete(clock)
        elif kind == "instances":
            state.instances = tuple(f"instance_{i}" for i in range(step % 4))
        else:
            delta = crossed(sender.delta(state))
            assert observed(mirror.apply(delta)) == observed(state)
    assert observed(mirror.apply(crossed(sender.delta(state)))) == \
        observed(state)


@settings(max_examples=200, deadline=None)
@given(OPERATIONS, st.integers(1, 40))
def test_a_mirror_first_read_late_equals_the_gateways_router_state(operations, first_read):
    """A candidate that reads the router state only from its `first_read`-th call on: until
    then the calls carry nothing of it; the first read asks for it whole, and from then on
    the deltas keep the mirror equal to the gateway's state."""
    state, sender = RouterState(), wire.StateSender()
    asked = []

    def ask(*question: object) -> object:
        asked.append(question)
        return crossed(sender.whole(state))

    mirror = wire.StateMirror(ask)
    calls = 0
    for kind, tenant, step in operations:
        state.clock += step
        if kind == "arrival":
            state.on_arrival(tenant, state.clock)
        elif kind == "admit":
            state.on_admit(tenant)
        elif kind == "complete" and state.tenant(tenant).active_requests > 0:
            state.on_finish(tenant)
            state.on_complete(state.clock)
        elif kind == "instances":
            state.instances = tuple(f"instance_{i}" for i in range(step % 4))
        elif kind == "send":
            calls += 1
            delta = sender.out(state)
            assert (delta == wire.NOT_READ) == (calls <= first_read and not asked)
            mirror.apply(crossed(delta))
            if calls >= first_read:
                assert observed(mirror) == observed(state)
    assert asked in ([], [("state",)])


@settings(deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5000), st.lists(st.integers(0, 2**64 - 1),
                                                        max_size=6)), max_size=40))
def test_views_are_rebuilt_equal_and_the_two_caches_agree(requests):
    """A view goes whole the first time and by id after; both caches forget the same views,
    so an id always names a view the sandbox still has."""
    sender, mirror = wire.ViewSender(), wire.ViewMirror()
    views = [RequestView(f"request_{n}", n, 10, "t", "batch", tuple(h))
             for n, h in requests]
    for view in views + views[::-1]:
        item = crossed(sender.out(view))
        assert mirror.into(item) == view
        assert list(sender.sent) == list(mirror.views)


def test_the_view_cache_forgets_the_oldest_on_both_sides():
    sender, mirror = wire.ViewSender(), wire.ViewMirror()
    views = [RequestView(f"r{n}", n, 1, "t", "", ()) for n in range(wire.VIEW_CACHE + 10)]
    for view in views:
        mirror.into(crossed(sender.out(view)))
    again = sender.out(views[0])  # forgotten: sent whole again
    assert again != "r0" and mirror.into(crossed(again)) == views[0]
    assert sender.out(views[-1]) == views[-1].id and mirror.into("r" + str(len(views) - 1))
    assert list(sender.sent) == list(mirror.views)


@settings(deadline=None)
@given(st.integers(0, 2**62), st.integers(0, 10**6), st.floats(allow_nan=False),
       st.floats(), st.sampled_from(list(Role)))
def test_snapshots_cross_exactly(timestamp, count, rate, anything, role):
    """Numbers cross in marshal's binary form: every float comes back bit for bit
    (infinities and NaN included), every integer exactly."""
    snapshot = InstanceSnapshot("instance_0", role, timestamp, count, count, rate, count,
                                count, count, anything, rate, anything, rate, anything)
    back = wire.snapshot_in(crossed(wire.snapshot_out(snapshot)))
    assert repr(back) == repr(snapshot) and type(back) is InstanceSnapshot


def test_snapshot_extended_values_cross():
    """Seed G.2's `Extended` goes as a mapping after the numbers, only when it has values."""
    plain = InstanceSnapshot("i", Role.MONOLITHIC, 1, 2, 3, 0.5, 4, 5, 6, 0.25, 1.0, 2.0, 3.0)
    assert len(wire.snapshot_out(plain)) == 14
    rich = plain._replace(extended={"offload_backlog_ms": 1.5, "kv_storage_utilization": 0.1})
    back = wire.snapshot_in(crossed(wire.snapshot_out(rich)))
    assert dict(back.extended) == dict(rich.extended) and back[:-1] == rich[:-1]


def test_hashes_beyond_64_bits_still_cross():
    """Block hashes go as their 64-bit bytes; any other integers as they are."""
    for hashes in ((2**64 - 1, 0), (2**70, -1), ()):
        view = RequestView("r", 0, 1, "t", "", hashes)
        assert wire.ViewMirror().into(crossed(wire.ViewSender().out(view))) == view


def test_a_workloads_hashes_are_packed_once_across_the_evaluations_that_send_them():
    """Each run makes its requests' views afresh (a new hashes tuple, the same integers):
    the evaluator packs a request's hashes once, whichever run's tuple it is given, and
    the bytes are those of the hashes (the cache keyed by the tuple's identity missed every
    time and kept every run's tuples until it was full)."""
    from blis_simpy.search import codec
    first = tuple(range(2**63, 2**63 + 40))
    again = tuple(list(first))  # (another run's tuple: equal, not the same object)
    assert again is not first
    packed = codec.packed(first)
    assert codec.packed(again) is packed == codec.hashes_out(again)
    size = len(codec.HASH_PACKS)
    for _ in range(3):
        codec.packed(tuple(list(first)))
    assert len(codec.HASH_PACKS) == size
    assert codec.packed((2**70, -1)) == (2**70, -1)  # (not 64-bit hashes: as they are)


def test_the_replies_encoding_and_reading_agree_with_json():
    """The evaluator's reader takes exactly one JSON value (the candidate's process writes
    one per line) and refuses anything else as a ValueError."""
    reply = ["ok", "instance_0", "é", [0.1, float("inf")], None, {"k": [1, 2]}, "", ""]
    assert json.loads(wire.line(reply)) == json.loads(json.dumps(reply))
    assert wire.parse(wire.line(reply)[:-1]) == json.loads(json.dumps(reply))
    for broken in (b"", b"[1] [2]", b"[1,", b"\xff", b"[" * 100_000, b'"\\ud800'):
        try:
            wire.parse(broken)
        except ValueError:
            continue
        raise AssertionError(f"accepted {broken[:20]!r}")
