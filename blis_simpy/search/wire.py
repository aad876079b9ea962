"""What crosses the boundary between the evaluator and a candidate's process: plain tuples,
lists, numbers and strings, never pickle (docs/security.md, "The wire").

The two directions differ, as the two sides' trust does. The evaluator's calls go to the
candidate as frames: a 4-byte length, then the message in `marshal`'s format (CPython's own
encoding of plain values: numbers exact, floats bit for bit, nothing but plain types built),
which both sides write and read in C, several times faster than JSON. The candidate's replies
come back as frames too, each one JSON value, or, for the usual routing decision, a fixed
binary record (`codec.route_reply`: the target, the reason, the scores as 64-bit floats),
read by the evaluator with a size bound and checked field by field (`codec.route_decision`,
`blis_simpy.search.remote`) before the policy guard checks what they mean: the evaluator
never decodes anything richer than JSON from a candidate (`marshal` is not meant for
untrusted input; the candidate's process may read the evaluator's messages with it). The
per-decision encoding on both sides is compiled (`blis_simpy.search.codec`).

Requests, snapshots, the router state and a scheduler's context go as positional tuples (each
side builds the same frozen types from them). Two things are sent as changes rather than whole:
a request's view is sent once and then named by its id (both sides keep the same bounded
cache; a routing call sends its view whole and neither side keeps it, as each request is
routed once), and the router state as what changed since the last call (`StateSender` in the
evaluator, `StateMirror` in the sandbox), so a call costs what the decision needs, not what the
run has accumulated. The router state is sent only to a candidate that reads it: until its
first read, calls carry `NOT_READ`; that read asks the evaluator for the whole state, and from
then on every call carries what changed. A message is a list headed by its kind (a string): a
new kind of call is a new name, and either side refuses a kind it does not know.
"""

from __future__ import annotations

import json
import marshal
from collections import OrderedDict, deque
from collections.abc import Callable
from itertools import islice
from typing import IO, Any

from blis_simpy.core.request import RequestView
from blis_simpy.core.router_state import LoadSample, RouterState
from blis_simpy.policies.scheduler import SchedulerContext
from blis_simpy.search.codec import (  # noqa: F401 (the per-decision encoding, compiled)
    MAX_FRAME,
    frame,
    framed,
    hashes_out,
    route_decision,
    route_frame,
    route_reply,
    snapshot_in,
    snapshot_out,
    snapshots_in,
    view_in,
    whole,
)

MAX_LINE = 1 << 20  # bytes in one message from a candidate
MAX_TEXT = 1000  # characters in a string a candidate returns (a reason, an id)
MAX_LOG = 20_000  # characters of a candidate's printed output kept (then a count of the rest)
VIEW_CACHE = 4096  # request views each side remembers by id
ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True, check_circular=False)
# The C encoder built once (`JSONEncoder.encode` builds it again for every message); None
# where json has no C accelerator.
MAKE_ENCODER = getattr(json.encoder, "c_make_encoder", None)
C_ENCODER = MAKE_ENCODER and MAKE_ENCODER(
    None, ENCODER.default, json.encoder.encode_basestring_ascii, None, ":", ",", False,
    False, True)


def encoded(message: Any) -> bytes:
    """A message as JSON (ASCII, so a newline never appears inside it)."""
    if C_ENCODER is None or type(message) is not list:
        return ENCODER.encode(message).encode("ascii")
    return "".join(C_ENCODER(message, 0)).encode("ascii")


def line(message: Any) -> bytes:
    """One message on the control socket: JSON on one line."""
    return encoded(message) + b"\n"


SCAN = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # one value at a position (without decode's regexes)


def read_frame(reader: IO[bytes]) -> Any:
    """The next frame's message (read in the candidate's process only), None at the end."""
    head = reader.read(4)
    if len(head) < 4:
        return None
    size = int.from_bytes(head, "little")
    data = reader.read(size)
    return marshal.loads(data) if len(data) == size else None


def body(message: Any) -> bytes:
    """A reply's JSON, framed (the candidate's side)."""
    return framed(encoded(message))


def parse(data: bytes) -> Any:
    """A message back; ValueError if it is not one JSON value in ASCII (too deep included)."""
    try:
        text = data.decode("ascii")
        value, end = SCAN(text, 0)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except StopIteration:
        raise ValueError("no JSON value at the start") from None
    if end != len(text) and not text[end:].isspace():
        raise ValueError(f"extra data after the value at {end}")
    return value


NOT_READ = ()  # a call's router state when the candidate has never read it


class ViewSender:
    """The evaluator's half of the view cache: a view already sent (the same object) goes as
    its id; the cache forgets its oldest entry past `VIEW_CACHE`, as the mirror's does."""

    def __init__(self) -> None:
        self.sent: OrderedDict[str, RequestView] = OrderedDict()

    def out(self, view: RequestView) -> str | tuple[Any, ...]:
        if self.sent.get(view.id) is view:
            return view.id
        remember(self.sent, view.id, view)
        return whole(view)


class ViewMirror:
    """The sandbox's half: builds each view once, keeps it under its id."""

    def __init__(self) -> None:
        self.views: OrderedDict[str, RequestView] = OrderedDict()

    def into(self, item: Any) -> RequestView:
        if isinstance(item, str):
            return self.views[item]
        view = view_in(item)
        remember(self.views, view.id, view)
        return view


def remember(cache: OrderedDict[str, RequestView], key: str, view: RequestView) -> None:
    """Keep `view` under `key`, forgetting the oldest past `VIEW_CACHE` (an OrderedDict: a
    plain dict's first key is found by skipping every deleted slot before it)."""
    if cache.pop(key, None) is None and len(cache) >= VIEW_CACHE:
        cache.popitem(last=False)
    cache[key] = view


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
        self.read = False  # whether the candidate has read the state (asked for it whole)
        self.start()

    def start(self) -> None:
        """Forget what was sent: the next delta is the whole state."""
        self.tenants: dict[str, tuple[int, int, int]] = {}
        self.instances: tuple[str, ...] | None = None
        self.requests = 0
        self.completed = 0
        self.sampled = -1  # the clock of the last load sample sent

    def out(self, state: RouterState) -> list[Any] | tuple[()]:
        """What a call carries: the delta once the candidate reads the state, else
        `NOT_READ`."""
        return self.delta(state) if self.read else NOT_READ

    def whole(self, state: RouterState) -> list[Any]:
        """The answer to the candidate's first read: the whole state, as a delta from
        nothing; from now on every call carries the delta."""
        self.read = True
        self.start()
        return self.delta(state)

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
        samples: list[tuple[Any, ...]] = []
        for sample in reversed(state.history):  # the new samples are the last ones
            if sample.clock <= self.sampled:
                break
            samples.append(tuple(sample))
        if samples:
            self.sampled = samples[0][0]
            samples.reverse()
        return [state.clock, state.in_flight, instances, changed, *window(state.arrivals, new),
                state.first_arrival, state.completed, *window(state.completions, done),
                samples]


def window(times: deque[int] | None, new: int) -> tuple[int, list[int]]:
    """(length, the last `new` entries) of an arrival window."""
    if not times:
        return 0, []
    if new == 1:
        return len(times), [times[-1]]
    return len(times), list(islice(reversed(times), min(new, len(times))))[::-1]


class StateMirror:
    """The sandbox's copy of the router state, kept equal to the gateway's by the deltas. It
    reads as a `RouterState` (every attribute and method but `shadow_kv` is its inner
    one's), with a `shadow_kv` of its own: the compiled class would not take the sandbox's,
    which asks the evaluator."""

    def __init__(self, ask: Callable[..., Any] | None = None) -> None:
        self.state = RouterState()
        self.shadow_kv: Any = None
        self.ask = ask  # asks the evaluator; None: every delta comes with the calls
        self.read = ask is None

    def __getattr__(self, name: str) -> Any:
        if not self.read:  # the candidate's first read: the whole state, asked for
            assert self.ask is not None
            self.read = True
            self.apply(self.ask("state"))
        return getattr(self.state, name)

    def apply(self, delta: list[Any] | tuple[()]) -> StateMirror:
        if not delta:  # NOT_READ: nothing sent yet
            return self
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
