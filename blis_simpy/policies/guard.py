"""Guards around user policies (`module:Class`): every call's result is checked, and anything a
user policy raises becomes a `PolicyError` saying which policy, which call, which request and
what came back, instead of a traceback from deep inside the engine.

Only user classes are wrapped (the registry decides); templates run unguarded, so the check
costs nothing on the usual hot path.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from blis_simpy.core.errors import PolicyError
from blis_simpy.core.request import RequestView
from blis_simpy.core.router_state import RouterState
from blis_simpy.core.snapshot import InstanceSnapshot
from blis_simpy.policies.admission import AdmissionDecision, AdmissionPolicy
from blis_simpy.policies.priority import PriorityPolicy
from blis_simpy.policies.routing import RoutingDecision, RoutingPolicy
from blis_simpy.policies.scheduler import InstanceScheduler

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
            raise PolicyError(self.path, f"{self.type_name}.{method}{for_request(request)} "
                              f"raised {type(exc).__name__}: {exc}") from exc

    def bad(self, method: str, request: str, value: object, expected: str) -> PolicyError:
        return PolicyError(self.path, f"{self.type_name}.{method}{for_request(request)} "
                           f"returned {shown(value)}; expected {expected}")


def for_request(name: str) -> str:
    return f" for request {name}" if name else ""


def shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def real(value: object) -> bool:
    """A finite int or float (bool is not a number here)."""
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))


class GuardedAdmission(AdmissionPolicy):
    def __init__(self, inner: AdmissionPolicy, caller: Caller) -> None:
        super().__init__(inner.params)
        self.inner, self.caller, self.name = inner, caller, inner.name

    def decide(self, req: RequestView, state: RouterState, clock: int) -> AdmissionDecision:
        out = self.caller.call("decide", req.id, self.inner.decide, req, state, clock)
        if not isinstance(out, AdmissionDecision) or out.action not in ACTIONS:
            raise self.caller.bad("decide", req.id, out, "an AdmissionDecision with action "
                                  "admit, reject or delay")
        if out.action == "delay" and not (isinstance(out.delay_us, int) and out.delay_us > 0):
            raise self.caller.bad("decide", req.id, out, "a delay with delay_us > 0 (an "
                                  "integer number of µs)")
        return out


class GuardedPriority(PriorityPolicy):
    def __init__(self, inner: PriorityPolicy, caller: Caller) -> None:
        super().__init__(inner.params)
        self.inner, self.caller = inner, caller
        self.name, self.ages = inner.name, inner.ages

    def compute(self, req: RequestView, state: RouterState | None, clock: int) -> float:
        out = self.caller.call("compute", req.id, self.inner.compute, req, state, clock)
        if not real(out):
            raise self.caller.bad("compute", req.id, out, "a finite number")
        return out


class GuardedRouting(RoutingPolicy):
    def __init__(self, inner: RoutingPolicy, caller: Caller) -> None:
        super().__init__(inner.params)
        self.inner, self.caller, self.name = inner, caller, inner.name

    def route(self, req: RequestView, priority: float, snapshots: Sequence[InstanceSnapshot],
              state: RouterState, clock: int) -> RoutingDecision:
        out = self.caller.call("route", req.id, self.inner.route, req, priority, snapshots,
                               state, clock)
        routable = list(state.instances)
        if not isinstance(out, RoutingDecision) or out.target not in routable:
            raise self.caller.bad("route", req.id, out, "a RoutingDecision whose target is "
                                  "a routable instance id: " + ", ".join(routable))
        scores = out.scores
        if not isinstance(scores, tuple | list) or len(scores) != len(snapshots) \
                or not all(real(s) for s in scores):
            raise self.caller.bad("route", req.id, out, f"scores: {len(snapshots)} finite "
                                  "numbers, one per snapshot")
        return out


class GuardedScheduler(InstanceScheduler):
    def __init__(self, inner: InstanceScheduler, caller: Caller) -> None:
        self.inner, self.caller = inner, caller
        self.params, self.name = inner.params, inner.name
        self.uses_priority = inner.uses_priority
        self.order_key = None if inner.order_key is None else self.checked_key

    def checked_key(self, view: RequestView, priority: float) -> Any:
        key = self.inner.order_key
        assert key is not None
        out = self.caller.call("order_key", view.id, key, view, priority)
        items = out if isinstance(out, tuple) else (out,)
        if not items or not all(real(v) or isinstance(v, str) for v in items):
            raise self.caller.bad("order_key", view.id, out, "a finite number, or a tuple "
                                  "of finite numbers and strings (smaller runs first)")
        return out

    def victim(self, candidates: Sequence[RequestView], priorities: Sequence[float]) -> int:
        who = candidates[-1].id if candidates else ""
        out = self.caller.call("victim", who, self.inner.victim, candidates, priorities)
        if isinstance(out, bool) or not isinstance(out, int) or not 0 <= out < len(candidates):
            raise self.caller.bad("victim", who, out, f"a position in 0..{len(candidates) - 1}")
        return out


GUARDS: dict[type, Callable[[Any, Caller], Any]] = {
    AdmissionPolicy: GuardedAdmission,
    PriorityPolicy: GuardedPriority,
    RoutingPolicy: GuardedRouting,
    InstanceScheduler: GuardedScheduler,
}


def guarded(policy: T, base: type, path: str, type_name: str) -> T:
    """`policy` (a user class instance of axis `base`) behind its axis's guard."""
    guard: Callable[[Any, Caller], T] = GUARDS[base]
    return guard(policy, Caller(path, type_name))
