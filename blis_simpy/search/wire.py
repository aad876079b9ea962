"""What crosses the boundary between the evaluator and a candidate's process: JSON lines of
plain lists, numbers and strings, never pickle (docs/security.md, "The wire").

Requests, snapshots, the router state and a scheduler's context go one way as positional
lists (each side builds the same frozen types from them); decisions come back the other way
and are checked field by field by the evaluator (`blis_simpy.search.remote`) before the
policy guard checks what they mean.
Two things are sent as changes rather than whole: a request's view is sent once and then named
by its id (both sides keep the same bounded cache), and the router state as what changed since
the last call (`StateSender` in the evaluator, `StateMirror` in the sandbox), so a call costs
what the decision needs, not what the run has accumulated. The numbers the evaluator sends in
bulk (a prompt's block hashes, a snapshot's counters and rates) go as the hex of their
little-endian 64-bit values inside the JSON: exact, and several times cheaper to write and
read than decimal (about a third of a routing call's cost otherwise).
"""

from __future__ import annotations

import json
import struct
from collections import deque
from collections.abc import Sequence
from itertools import islice
from types import MappingProxyType
from typing import Any

from blis_simpy.core.request import HintedView, LoraView, RequestView
from blis_simpy.core.router_state import LoadSample, RouterState
from blis_simpy.core.snapshot import InstanceSnapshot, Role
from blis_simpy.policies.scheduler import SchedulerContext

MAX_LINE = 1 << 20  # bytes in one message from a candidate
MAX_TEXT = 1000  # characters in a string a candidate returns (a reason, an id)
VIEW_CACHE = 4096  # request views each side remembers by id
ROLES = {role.value: role for role in Role}
ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True, check_circular=False)


def line(message: Any) -> bytes:
    """One message: JSON on one line (ASCII, so a newline never appears inside it)."""
    return ENCODER.encode(message).encode("ascii") + b"\n"


DECODE = json.JSONDecoder().decode


def parse(data: bytes) -> Any:
    """A message back; ValueError if it is not one JSON value in ASCII (too deep included)."""
    try:
        return DECODE(data.decode("ascii"))
    except RecursionError:
        raise ValueError("nested too deeply") from None


# A snapshot's numbers after its id and role, in field order: integers and floats.
SNAPSHOT = struct.Struct("<qqqdqqqddddd")


def snapshot_out(s: InstanceSnapshot) -> list[Any]:
    """`[id, role, numbers]`, and the `extended` values as a fourth item when there are any."""
    out: list[Any] = [s.id, s.role.value, SNAPSHOT.pack(
        s.timestamp, s.queue_depth, s.batch_size, s.kv_utilization, s.free_kv_blocks,
        s.pending_requests, s.in_flight_requests, s.cache_hit_rate, s.recent_ttft_ms,
        s.recent_tpot_ms, s.estimated_wait_ms, s.kv_cpu_utilization).hex()]
    if s.extended:
        out.append(dict(s.extended))
    return out


def snapshot_in(f: Sequence[Any]) -> InstanceSnapshot:
    snap = InstanceSnapshot(f[0], ROLES[f[1]], *SNAPSHOT.unpack(bytes.fromhex(f[2])))
    if len(f) > 3:
        snap = snap._replace(extended=MappingProxyType(dict(f[3])))
    return snap


def hashes_out(hashes: tuple[int, ...]) -> str | tuple[int, ...]:
    """Block hashes (unsigned 64-bit) as hex; anything else as it is."""
    try:
        return struct.pack(f"<{len(hashes)}Q", *hashes).hex()
    except struct.error:
        return hashes


def hashes_in(item: str | list[int]) -> tuple[int, ...]:
    if isinstance(item, str):
        return struct.unpack(f"<{len(item) // 16}Q", bytes.fromhex(item))
    return tuple(item)


class ViewSender:
    """The evaluator's half of the view cache: a view already sent (the same object) goes as
    its id; the cache forgets its oldest entry past `VIEW_CACHE`, as the mirror's does."""

    def __init__(self) -> None:
        self.sent: dict[str, RequestView] = {}

    def out(self, view: RequestView) -> str | list[Any]:
        if self.sent.get(view.id) is view:
            return view.id
        remember(self.sent, view.id, view)
        item: list[Any] = [view.id, view.arrival_us, view.input_tokens, view.tenant_id,
                           view.slo_class, hashes_out(view.prefix_hashes)]
        hints = view.priority_hints
        if view.adapter or hints:  # (only when there is one: the usual wire)
            item.append(view.adapter)
        if hints:  # a priority decision's hints (seed G.1): plain data, checked by the guard
            item.append(dict(hints))
        return item


class ViewMirror:
    """The sandbox's half: builds each view once, keeps it under its id."""

    def __init__(self) -> None:
        self.views: dict[str, RequestView] = {}

    def into(self, item: str | list[Any]) -> RequestView:
        if isinstance(item, str):
            return self.views[item]
        view = (HintedView(item[0], item[1], item[2], item[3], item[4], hashes_in(item[5]),
                           item[6], MappingProxyType(item[7])) if len(item) > 7
                else LoraView(item[0], item[1], item[2], item[3], item[4], hashes_in(item[5]),
                              item[6]) if len(item) > 6
                else RequestView(item[0], item[1], item[2], item[3], item[4],
                                 hashes_in(item[5])))
        remember(self.views, view.id, view)
        return view


def remember(cache: dict[str, RequestView], key: str, view: RequestView) -> None:
    cache.pop(key, None)
    cache[key] = view
    if len(cache) > VIEW_CACHE:
        del cache[next(iter(cache))]


def context_out(ctx: SchedulerContext, views: ViewSender) -> list[Any]:
    """A scheduler's context (seed G.1's SchedulerContext) for `make_batch` and
    `on_request_arrival`: `[queue views, priorities, running views, free KV blocks, clock,
    slots left, budget left]`; the hints go with their views."""
    return [[views.out(v) for v in ctx.wait_queue], list(ctx.priorities),
            [views.out(v) for v in ctx.running], ctx.free_kv_blocks, ctx.clock,
            ctx.max_batch_size, ctx.max_token_budget]


def context_in(item: list[Any], views: ViewMirror) -> SchedulerContext:
    queue = tuple(views.into(v) for v in item[0])
    return SchedulerContext(queue, tuple(item[1]), tuple(v.priority_hints for v in queue),
                            tuple(views.into(v) for v in item[2]), *item[3:])


class StateSender:
    """What changed in the gateway's router state since the last call of this candidate:
    `[clock, in_flight, instances or None, [[tenant, requests, active, rejected, first
    arrival, window length, new arrival times], ...], arrivals window length, new arrival
    times, first arrival, completions so far, completions window length, new completion
    times, new load samples]`.

    A tenant's arrival window only gains entries when it counts a request, so its new times
    are its last (requests - requests sent) entries; the window length lets the mirror drop
    what the gateway dropped."""

    def __init__(self) -> None:
        self.tenants: dict[str, tuple[int, int, int]] = {}
        self.instances: tuple[str, ...] | None = None
        self.requests = 0
        self.completed = 0
        self.sampled = -1  # the clock of the last load sample sent

    def delta(self, state: RouterState) -> list[Any]:
        changed = []
        total = 0
        for tenant_id, tenant in state.tenants.items():
            counts = (tenant.request_count, tenant.active_requests, tenant.rejected)
            total += counts[0]
            before = self.tenants.get(tenant_id)
            if before != counts:
                new = counts[0] - (before[0] if before else 0)
                changed.append([tenant_id, *counts, tenant.first_arrival,
                                *window(tenant.recent, new)])
                self.tenants[tenant_id] = counts
        instances = None
        if state.instances != self.instances:
            instances = self.instances = state.instances
        new, self.requests = total - self.requests, total
        done, self.completed = state.completed - self.completed, state.completed
        fresh = [s for s in state.history if s.clock > self.sampled]
        if fresh:
            self.sampled = fresh[-1].clock
        samples = [list(s) for s in fresh]
        return [state.clock, state.in_flight, instances, changed, *window(state.arrivals, new),
                state.first_arrival, state.completed, *window(state.completions, done),
                samples]


def window(times: deque[int] | None, new: int) -> tuple[int, list[int]]:
    """(length, the last `new` entries) of an arrival window."""
    if not times:
        return 0, []
    return len(times), list(islice(reversed(times), min(new, len(times))))[::-1]


class StateMirror:
    """The sandbox's copy of the router state, kept equal to the gateway's by the deltas. It
    reads as a `RouterState` (every attribute and method but `shadow_kv` is its inner
    one's), with a `shadow_kv` of its own: the compiled class would not take the sandbox's,
    which asks the evaluator."""

    def __init__(self) -> None:
        self.state = RouterState()
        self.shadow_kv: Any = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.state, name)

    def apply(self, delta: list[Any]) -> StateMirror:
        state = self.state
        (clock, in_flight, instances, changed, length, arrivals, first, completed,
         completions_length, completions, samples) = delta
        state.clock, state.in_flight = clock, in_flight
        if instances is not None:
            state.instances = tuple(instances)
        for tenant_id, requests, active, rejected, tenant_first, tenant_length, times \
                in changed:
            tenant = state.tenant(tenant_id)
            tenant.request_count, tenant.active_requests = requests, active
            tenant.rejected, tenant.first_arrival = rejected, tenant_first
            assert tenant.recent is not None
            refill(tenant.recent, times, tenant_length)
        refill(state.arrivals, arrivals, length)
        state.requests = sum(t.request_count for t in state.tenants.values())
        state.first_arrival, state.completed = first, completed
        refill(state.completions, completions, completions_length)
        state.history.extend(LoadSample(*s) for s in samples)
        return self


def refill(times: deque[int], new: list[int], length: int) -> None:
    times.extend(new)
    while len(times) > length:
        times.popleft()
