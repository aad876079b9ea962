"""Guards around user policies (`module:Class`): every call's result is checked, and anything a
user policy raises becomes a `PolicyError` saying which policy, which call, which request and
what came back, instead of a traceback from deep inside the engine.

Only user classes are wrapped (the registry decides); templates run unguarded, so the check
costs nothing on the usual hot path.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from math import isfinite
from types import MappingProxyType
from typing import Any, TypeVar

from blis_simpy.core.errors import PolicyError
from blis_simpy.core.request import NO_HINTS, RequestView
from blis_simpy.core.router_state import RouterState
from blis_simpy.core.snapshot import InstanceSnapshot
from blis_simpy.policies.admission import AdmissionDecision, AdmissionPolicy
from blis_simpy.policies.priority import PriorityDecision, PriorityPolicy
from blis_simpy.policies.routing import RoutingDecision, RoutingPolicy
from blis_simpy.policies.scheduler import BatchDecision, InstanceScheduler, SchedulerContext

T = TypeVar("T")
ACTIONS = ("admit", "reject", "delay")


class Caller:
    """Calls one user policy's methods, naming it in every error."""

    def __init__(self, path: str, type_name: str) -> None:
        self.path, self.type_name = path, type_name

    def call(self, method: str, request: str, fn: Callable[..., T], *args: Any) -> T:
        try:
            return fn(*args)
        except PolicyError:
            raise
        except Exception as exc:  # the user's code: any error is reported, with its type
            raise self.raised(method, request, exc) from exc

    def raised(self, method: str, request: str, exc: Exception) -> PolicyError:
        return PolicyError(self.path, f"{self.type_name}.{method}{for_request(request)} "
                           f"raised {type(exc).__name__}: {exc}")

    def bad(self, method: str, request: str, value: object, expected: str) -> PolicyError:
        return PolicyError(self.path, f"{self.type_name}.{method}{for_request(request)} "
                           f"returned {shown(value)}; expected {expected}")


def for_request(name: str) -> str:
    return f" for request {name}" if name else ""


def shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def real(value: object) -> bool:
    """A finite real number that fits a float: Python's or numpy's (a policy computing with
    numpy returns numpy scalars); bool is not a number here. A float is asked first: the
    abstract-class check costs a microsecond, several per routing decision."""
    if type(value) is float:
        return math.isfinite(value)
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond the float range: no score or priority is that big
        return False


MAX_HINTS = 32  # entries in a PriorityDecision's hints
MAX_HINT_TEXT = 200  # characters in a hint's key or string value
# What a decision may carry, bounded as the hints are: a routing decision's breakdown is kept
# per decision with `trace_level: decisions` and an order key per waiting request, so an
# unbounded one is the evaluator's memory spent at a candidate's word (newcomer 20 #4: 30,000
# scorer names per decision held 8.5 MiB each).
MAX_BREAKDOWN = 32  # scorers in a routing decision's breakdown
MAX_KEY_ITEMS = 32  # items in a scheduler's order_key tuple


def plain_hints(hints: object) -> Mapping[str, object] | None:
    """A read-only copy of a PriorityDecision's hints if they are plain data (string keys;
    strings, finite numbers, booleans or None), else None. The copy is taken first, so a
    policy that keeps the dict it returned cannot change what was checked."""
    if not isinstance(hints, Mapping) or len(hints) > MAX_HINTS:
        return None
    copy = dict(hints)
    for key, value in copy.items():
        if type(key) is not str or len(key) > MAX_HINT_TEXT:
            return None
        if value is None or type(value) is bool:
            continue
        if type(value) is str:
            if len(value) > MAX_HINT_TEXT:
                return None
        elif real(value):  # numpy scalars become Python numbers
            copy[key] = int(value) if whole(value) else float(value)  # type: ignore[call-overload]
        else:
            return None
    return MappingProxyType(copy) if copy else NO_HINTS


def whole(value: object) -> bool:
    """An integer, Python's or numpy's (bool is not one here)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


class GuardedAdmission(AdmissionPolicy):
    def __init__(self, inner: AdmissionPolicy, caller: Caller) -> None:
        super().__init__(inner.params)
        self.inner, self.caller, self.name = inner, caller, inner.name

    def decide(self, req: RequestView, state: RouterState, clock: int) -> AdmissionDecision:
        out = self.caller.call("decide", req.id, self.inner.decide, req, state, clock)
        if not isinstance(out, AdmissionDecision) or out.action not in ACTIONS:
            raise self.caller.bad("decide", req.id, out, "an AdmissionDecision with action "
                                  "admit, reject or delay")
        if out.action == "delay":
            if not (whole(out.delay_us) and out.delay_us > 0):
                raise self.caller.bad("decide", req.id, out, "a delay with delay_us > 0 (an "
                                      "integer number of µs)")
            return replace(out, delay_us=int(out.delay_us))
        return out


class GuardedPriority(PriorityPolicy):
    def __init__(self, inner: PriorityPolicy, caller: Caller) -> None:
        super().__init__(inner.params)
        self.inner, self.caller = inner, caller
        self.name, self.ages = inner.name, inner.ages

    def compute(self, req: RequestView, state: RouterState | None,
                clock: int) -> float | PriorityDecision:
        out = self.caller.call("compute", req.id, self.inner.compute, req, state, clock)
        if isinstance(out, PriorityDecision):
            hints = plain_hints(out.hints)
            if not real(out.score) or hints is None:
                raise self.caller.bad("compute", req.id, out, "a PriorityDecision with a "
                                      f"finite score and hints: at most {MAX_HINTS} string "
                                      "keys to strings, finite numbers, booleans or None "
                                      f"(keys and strings at most {MAX_HINT_TEXT} "
                                      "characters)")
            return PriorityDecision(float(out.score), hints)
        if not real(out):
            raise self.caller.bad("compute", req.id, out, "a finite number or a "
                                  "PriorityDecision")
        return float(out)


class GuardedRouting(RoutingPolicy):
    def __init__(self, inner: RoutingPolicy, caller: Caller) -> None:
        super().__init__(inner.params)
        self.inner, self.caller, self.name = inner, caller, inner.name
        self.reads_shadow_kv, self.routes_pd = inner.reads_shadow_kv, inner.routes_pd

    def route(self, req: RequestView, priority: float, snapshots: Sequence[InstanceSnapshot],
              state: RouterState, clock: int) -> RoutingDecision:
        try:  # (`Caller.call` inlined: once per request, its *args cost more than the checks)
            out = self.inner.route(req, priority, snapshots, state, clock)
        except PolicyError:
            raise
        except Exception as exc:  # the user's code: any error is reported, with its type
            raise self.caller.raised("route", req.id, exc) from exc
        routable = state.instances  # (only read: `in`, join and unpacking)
        if not isinstance(out, RoutingDecision) or out.target not in routable:
            raise self.caller.bad("route", req.id, out, "a RoutingDecision whose target is "
                                  "a routable instance id: " + ", ".join(routable))
        if not finite_numbers(out.scores, len(snapshots)):
            raise self.caller.bad("route", req.id, out, f"scores: {len(snapshots)} finite "
                                  "numbers, one per snapshot")
        breakdown = out.breakdown
        if breakdown is not None and not (
                isinstance(breakdown, Mapping) and len(breakdown) <= MAX_BREAKDOWN and all(
                    isinstance(k, str) and len(k) <= MAX_HINT_TEXT
                    and finite_numbers(v, len(snapshots)) for k, v in breakdown.items())):
            raise self.caller.bad("route", req.id, out, f"breakdown: None, or at most "
                                  f"{MAX_BREAKDOWN} scorer names (of at most {MAX_HINT_TEXT} "
                                  f"characters) -> {len(snapshots)} finite numbers, one per "
                                  "snapshot")
        filtered = out.filtered
        if not (type(filtered) is tuple and not filtered) and not (  # (none: the usual)
                isinstance(filtered, tuple) and all(i in routable for i in filtered)):
            raise self.caller.bad("route", req.id, out, "filtered: a tuple of routable "
                                  "instance ids")
        if (out.prefill or out.decode) and not (
                type(out.prefill) is str and type(out.decode) is str
                and out.prefill in ("", *routable) and out.decode in ("", *routable)):
            raise self.caller.bad("route", req.id, out, "prefill and decode: \"\" or a "
                                  "routable instance id")
        return out


def finite_numbers(values: object, count: int) -> bool:
    """`count` finite numbers in a tuple or list (a float asked first, in the loop: a
    generator and a call per value cost more than the check)."""
    if not isinstance(values, (tuple, list)) or len(values) != count:
        return False
    for v in values:  # noqa: SIM110 (a loop: all() of a generator costs more)
        if not (type(v) is float and isfinite(v)) and not real(v):
            return False
    return True


class GuardedScheduler(InstanceScheduler):
    """Besides each key's type, checks that every queue-sort key compares with every other
    (a number where earlier keys had a number, a string where they had a string): otherwise
    the sort fails inside the instance's step, far from the policy."""

    def __init__(self, inner: InstanceScheduler, caller: Caller) -> None:
        self.inner, self.caller = inner, caller
        self.params, self.name = inner.params, inner.name
        self.uses_priority = inner.uses_priority
        self.order_key = None if inner.order_key is None else self.checked_key
        self.make_batch = None if inner.make_batch is None else self.checked_batch
        self.on_request_arrival = None if inner.on_request_arrival is None else self.told
        self.key_shape: Shape | None = None  # every key seen so far, merged

    def checked_key(self, view: RequestView, priority: float) -> Any:
        key = self.inner.order_key
        assert key is not None
        out = self.caller.call("order_key", view.id, key, view, priority)
        items = out if isinstance(out, tuple) else (out,)
        if not 0 < len(items) <= MAX_KEY_ITEMS or not all(
                real(v) or (isinstance(v, str) and len(v) <= MAX_HINT_TEXT) for v in items):
            raise self.caller.bad("order_key", view.id, out, "a finite number, or a tuple "
                                  f"of at most {MAX_KEY_ITEMS} finite numbers and strings (of "
                                  f"at most {MAX_HINT_TEXT} characters; smaller runs first)")
        shape = shape_of(out)
        merged = shape if self.key_shape is None else merge_shapes(self.key_shape, shape)
        if merged is None:
            raise self.caller.bad("order_key", view.id, out, "keys that compare with the "
                                  f"earlier ones, shaped like {self.key_shape} (a number "
                                  "and a string do not compare)")
        self.key_shape = merged
        return out

    def checked_batch(self, ctx: SchedulerContext) -> BatchDecision:
        make = self.inner.make_batch
        assert make is not None
        who = ctx.wait_queue[0].id if ctx.wait_queue else ""
        out = self.caller.call("make_batch", who, make, ctx)
        size, running = len(ctx.wait_queue), len(ctx.running)
        if not (isinstance(out, BatchDecision) and positions(out.to_schedule, size)
                and isinstance(out.chunk_sizes, Mapping)
                and all(whole(i) and 0 <= i < size and whole(n) and n >= 1
                        for i, n in out.chunk_sizes.items())
                and positions(out.victims, running)):
            raise self.caller.bad("make_batch", who, out, "a BatchDecision: distinct "
                                  f"positions in 0..{size - 1} to schedule, chunk sizes "
                                  "(position -> tokens >= 1) and distinct victims' positions "
                                  f"in 0..{running - 1} (the running requests)")
        if size and not out.to_schedule and len(out.victims) == running:
            raise self.caller.bad("make_batch", who, out, "a BatchDecision that leaves "
                                  "something to run: it schedules no waiting request and "
                                  "nothing would be running, so the instance would stall")
        return BatchDecision(tuple(int(i) for i in out.to_schedule),
                             {int(i): int(n) for i, n in out.chunk_sizes.items()},
                             tuple(int(i) for i in out.victims))

    def told(self, view: RequestView, ctx: SchedulerContext) -> None:
        hook = self.inner.on_request_arrival
        assert hook is not None
        self.caller.call("on_request_arrival", view.id, hook, view, ctx)

    def victim(self, candidates: Sequence[RequestView], priorities: Sequence[float]) -> int:
        who = candidates[-1].id if candidates else ""
        out = self.caller.call("victim", who, self.inner.victim, candidates, priorities)
        if not (whole(out) and 0 <= out < len(candidates)):
            raise self.caller.bad("victim", who, out, f"a position in 0..{len(candidates) - 1}")
        return int(out)


def positions(items: object, size: int) -> bool:
    """Distinct positions in 0..size-1, as a tuple or list."""
    return isinstance(items, tuple | list) \
        and all(whole(i) and 0 <= i < size for i in items) and len(set(items)) == len(items)


Shape = str | tuple[Any, ...]  # "number", "str", or a tuple of shapes


def shape_of(key: object) -> Shape:
    """What a sort key compares as: "number", "str", or a tuple of those."""
    if isinstance(key, tuple):
        return tuple(shape_of(v) for v in key)
    return "str" if isinstance(key, str) else "number"


def merge_shapes(known: Shape, shape: Shape) -> Shape | None:
    """The shape of keys compatible with both, None if two such keys may fail to compare.
    Tuples compare item by item, so only the common positions must agree; the longer tuple's
    tail is kept so a later key is checked against it too."""
    if isinstance(known, tuple) and isinstance(shape, tuple):
        merged = []
        for a, b in zip(known, shape, strict=False):
            both = merge_shapes(a, b)
            if both is None:
                return None
            merged.append(both)
        longer = known if len(known) >= len(shape) else shape
        return (*merged, *longer[len(merged):])
    return known if known == shape else None


GUARDS: dict[type, Callable[[Any, Caller], Any]] = {
    AdmissionPolicy: GuardedAdmission,
    PriorityPolicy: GuardedPriority,
    RoutingPolicy: GuardedRouting,
    InstanceScheduler: GuardedScheduler,
}


# The method a user class of each axis must write itself (the base only raises).
REQUIRED: dict[type, str] = {
    AdmissionPolicy: "decide(req, state, clock)",
    PriorityPolicy: "compute(req, state, clock)",
    RoutingPolicy: "route(req, priority, snapshots, state, clock)",
}


def guarded(policy: T, base: type, path: str, type_name: str) -> T:
    """`policy` (a user class instance of axis `base`) behind its axis's guard; a class that
    does not write its axis's method is refused now, before the run, not at its first call."""
    required = REQUIRED.get(base)
    if required is not None:
        method = required.partition("(")[0]
        if getattr(type(policy), method, None) is getattr(base, method):
            raise PolicyError(path, f"{type_name} does not define {required}, which a "
                              f"{base.__name__} must")
    guard: Callable[[Any, Caller], T] = GUARDS[base]
    return guard(policy, Caller(path, type_name))
