"""Candidate code evaluated across the boundary: the simulation runs here, in the evaluator, and
each decision of the candidate's axis is a call to its sandboxed process (docs/security.md).

`Contained(code, limits)` starts the candidate's process and loads its source there. While it
is open, the scenario's `module:Class` for the candidate (`CodePolicy.type_name`) names a
stand-in class (`Remote*`), and each stand-in object built in this thread talks to this process
(a context variable holds the session, so evaluations in several threads never cross). A
stand-in is an ordinary policy to the simulator: each method sends what the policy would be
given (the request's view, the snapshots, what changed in the router state) and turns the reply
into the decision, after checking each field's type; the policy guard then checks what the
decision means, as for any user policy.
"""

from __future__ import annotations

import sys
import threading
import types
from collections.abc import Mapping, Sequence
from contextvars import ContextVar, Token
from typing import Any, NoReturn

from blis_simpy.core.request import RequestView
from blis_simpy.core.router_state import RouterState
from blis_simpy.core.snapshot import InstanceSnapshot
from blis_simpy.policies.admission import AdmissionDecision, AdmissionPolicy
from blis_simpy.policies.priority import PriorityDecision, PriorityPolicy
from blis_simpy.policies.routing import RoutingDecision, RoutingPolicy
from blis_simpy.policies.scheduler import BatchDecision, InstanceScheduler, SchedulerContext
from blis_simpy.search import wire
from blis_simpy.search.code import CodePolicy
from blis_simpy.search.contain import ContainedFailure, Limits, Session, spawn

SESSION: ContextVar[Session] = ContextVar("blis_candidate_session")


class Raised(Exception):
    """An exception the candidate's code raised, as its name and message (all that crosses
    the boundary). `of` makes a subclass named after the candidate's type, so the policy
    guard and the registry report "raised ValueError: ..." as for an in-process policy."""

    @staticmethod
    def of(kind: object, message: object) -> Raised:
        name = kind if isinstance(kind, str) and kind.isidentifier() and len(kind) <= 100 \
            else "Exception"
        return type(name, (Raised,), {"__module__": "candidate"})(text(message, "message"))


class Unsendable:
    """What a candidate returned instead of a decision, as its repr: the guard's message
    shows it as it would show the object itself."""

    def __init__(self, shown: str) -> None:
        self.shown = shown

    def __repr__(self) -> str:
        return self.shown


class Remote:
    """What every stand-in has: its session and its object's handle in the candidate's
    process. `Params = None`: the registry hands the scenario's parameters over as they are,
    and the candidate's process loads them into the candidate's own `Params`."""

    Params = None

    def connect(self, params: object) -> dict[str, Any]:
        session = SESSION.get(None)
        if session is None:
            raise ContainedFailure("a code candidate's policy is built only inside its "
                                   "evaluation (blis_simpy.search.remote.Contained)")
        self.session = session
        reply = session.call(["new", dict(params) if isinstance(params, Mapping)
                                   else {}])
        fields = payload(reply, 2)
        if not (isinstance(fields[0], int) and isinstance(fields[1], dict)):
            broken(reply)
        self.handle: int = fields[0]
        attributes = fields[1]
        name = attributes.get("name")
        self.name = text(name, "name") if isinstance(name, str) else "custom"
        return attributes


class RemoteAdmission(Remote, AdmissionPolicy):
    def __init__(self, params: object = None) -> None:
        super().__init__(params)
        self.connect(params)

    def decide(self, req: RequestView, state: RouterState, clock: int) -> AdmissionDecision:
        session = self.session
        reply = session.call(["decide", self.handle, session.views.out(req),
                              session.state.out(state), clock],
                             lambda ask: answer_admission(ask, state, session))
        if reply[0] == "bad":
            return Unsendable(str(reply[1]))  # type: ignore[return-value]
        action, reason, delay = payload(reply, 3)
        return AdmissionDecision(action, text(reason, "reason"), delay)


class RemotePriority(Remote, PriorityPolicy):
    def __init__(self, params: object = None) -> None:
        super().__init__(params)
        self.ages = bool(self.connect(params).get("ages", True))

    def compute(self, req: RequestView, state: RouterState | None,
                clock: int) -> float | PriorityDecision:
        session = self.session
        delta = None if state is None else session.state.out(state)
        reply = session.call(["compute", self.handle, session.views.out(req), delta, clock],
                             None if state is None
                             else lambda ask: answer_admission(ask, state, session))
        if reply[0] == "ok" and len(reply) == 3:  # a PriorityDecision: the guard checks it
            return PriorityDecision(*reply[1:])
        return value(reply)  # type: ignore[no-any-return]


class RemoteRouting(Remote, RoutingPolicy):
    def __init__(self, params: object = None) -> None:
        super().__init__(params)
        attributes = self.connect(params)
        self.reads_shadow_kv = bool(attributes.get("reads_shadow_kv"))
        self.routes_pd = bool(attributes.get("routes_pd"))
        self.asked: tuple[Sequence[InstanceSnapshot], RouterState] | None = None
        self.answering = self.answer  # (bound once: a closure per call costs more)

    def answer(self, ask: list[Any]) -> Any:
        """The candidate's question during the current call (`self.asked`)."""
        assert self.asked is not None
        return answer_routing(ask, *self.asked, self.session)

    def route(self, req: RequestView, priority: float, snapshots: Sequence[InstanceSnapshot],
              state: RouterState, clock: int) -> RoutingDecision:
        session = self.session
        hits = None
        shadow = state.shadow_kv
        if self.reads_shadow_kv and shadow is not None:
            hits = [shadow.expected_hit(s.id, req.prefix_hashes) for s in snapshots]
        self.asked = (snapshots, state)
        reply = session.exchange(wire.route_frame(self.handle, req, priority, snapshots,
                                                  session.state.out(state), clock, hits),
                                 self.answering)
        if isinstance(reply, bytes):  # the usual decision's fixed record
            try:
                decision = wire.route_decision(reply)
            except ValueError as exc:
                session.fail(f"sent a routing decision that is not one ({exc})")
            if len(decision.reason) > wire.MAX_TEXT * 2:
                text(None, "reason")
            return decision  # type: ignore[no-any-return]
        if reply[0] == "bad":
            return Unsendable(str(reply[1]))  # type: ignore[return-value]
        target, reason, scores, breakdown, filtered, prefill, decode = payload(reply, 7)
        if isinstance(breakdown, dict):
            breakdown = {k: tuple(v) if isinstance(v, list) else v
                         for k, v in breakdown.items()}
        scores, filtered = tupled(scores), tupled(filtered)  # what they hold: the guard checks
        return RoutingDecision(target, text(reason, "reason"), scores, breakdown, filtered,
                               prefill, decode)


def answer_admission(ask: list[Any], state: RouterState, session: Session) -> Any:
    """An admission (or priority) candidate's question: the snapshots of the instances the
    request could go to (`RouterState.instance_snapshots`, seed G.2), taken when it asks; the
    whole router state, on its first read."""
    if ask[1:] == ["state"]:
        return session.state.whole(state)
    if ask[1:] == ["instance_snapshots"]:
        return [wire.snapshot_out(s) for s in state.instance_snapshots()]
    raise ContainedFailure(f"the candidate asked {wire.line(ask)[:120]!r}, which is not a "
                           "question an admission or priority policy may ask")


def answer_routing(ask: list[Any], snapshots: Sequence[InstanceSnapshot],
                   state: RouterState, session: Session) -> Any:
    """A routing candidate's question: fresh snapshots, the shadow KV's expected hit of some
    block hashes on an instance, or the whole router state (its first read)."""
    if ask[1:] == ["state"]:
        return session.state.whole(state)
    if ask[1:] == ["refresh"] and hasattr(snapshots, "refresh"):
        snapshots.refresh()
        return [wire.snapshot_out(s) for s in snapshots]
    if len(ask) == 4 and ask[1] == "expected_hit" and isinstance(ask[2], str) \
            and isinstance(ask[3], list) and all(type(h) is int for h in ask[3]):
        shadow = state.shadow_kv
        return 0 if shadow is None else shadow.expected_hit(ask[2], ask[3])
    raise ContainedFailure(f"the candidate asked {wire.line(ask)[:120]!r}, which is not a "
                           "question a routing policy may ask")


class RemoteScheduler(Remote, InstanceScheduler):  # type: ignore[misc]
    def __init__(self, params: object = None) -> None:
        self.params = params  # type: ignore[assignment]
        attributes = self.connect(params)
        self.uses_priority = bool(attributes.get("uses_priority"))
        self.order_key = self.key if attributes.get("order_key") else None  # type: ignore
        self.make_batch = self.batch if attributes.get("make_batch") else None  # type: ignore
        self.on_request_arrival = (  # type: ignore[assignment]
            self.arrival if attributes.get("on_request_arrival") else None)

    def key(self, view: RequestView, priority: float) -> Any:
        session = self.session
        reply = session.call(["order_key", self.handle, session.views.out(view), priority])
        out = value(reply)
        return tuple(out) if isinstance(out, list) else out

    def victim(self, candidates: Sequence[RequestView], priorities: Sequence[float]) -> int:
        session = self.session
        reply = session.call(["victim", self.handle, [session.views.out(v) for v in candidates],
                              list(priorities)])
        return value(reply)  # type: ignore[no-any-return]

    def batch(self, ctx: SchedulerContext) -> BatchDecision:
        session = self.session
        reply = session.call(["make_batch", self.handle, wire.context_out(ctx, session.views)])
        if reply[0] == "bad":
            return Unsendable(str(reply[1]))  # type: ignore[return-value]
        to_schedule, chunks, victims = payload(reply, 3)
        if isinstance(chunks, list) and all(isinstance(p, list) and len(p) == 2
                                            and type(p[0]) is int for p in chunks):
            chunks = dict(chunks)  # (anything else: the guard says what was wrong)
        return BatchDecision(tupled(to_schedule), chunks, tupled(victims))

    def arrival(self, view: RequestView, ctx: SchedulerContext) -> None:
        session = self.session
        payload(session.call(["on_request_arrival", self.handle, session.views.out(view),
                              wire.context_out(ctx, session.views)]), 0)


STAND_INS: dict[str, type[Remote]] = {"admission": RemoteAdmission,
                                      "priority": RemotePriority,
                                      "routing": RemoteRouting,
                                      "scheduler": RemoteScheduler}


def payload(reply: list[Any], count: int) -> list[Any]:
    """The fields of an "ok" reply; the candidate's exception if it raised."""
    if reply[0] == "ok" and len(reply) == count + 1:
        return reply[1:]
    if reply[0] == "raised" and len(reply) == 3:
        raise Raised.of(reply[1], reply[2])
    broken(reply)


def value(reply: list[Any]) -> Any:
    """The one value of an "ok" reply (the guard checks it), or what was returned instead."""
    if reply[0] == "bad" and len(reply) == 2:
        return Unsendable(str(reply[1]))
    return payload(reply, 1)[0]


def broken(reply: list[Any]) -> NoReturn:
    if reply[0] == "error" and len(reply) == 2:
        raise ContainedFailure(f"the candidate failed: {text(reply[1], 'error')}")
    raise ContainedFailure(f"the candidate sent {wire.line(reply)[:120]!r}, which is not the "
                           "reply that was asked for")


def text(item: object, field: str) -> str:
    if not isinstance(item, str) or len(item) > wire.MAX_TEXT * 2:
        raise ContainedFailure(f"the candidate sent a {field} that is not a string of at most "
                               f"{wire.MAX_TEXT * 2} characters")
    return item


def tupled(item: Any) -> Any:
    return tuple(item) if isinstance(item, list) else item


class Contained:
    """One evaluation's candidate process, from the source loaded to what it printed (`close`).
    Failures raise ContainedFailure (SandboxUnavailable if the sandbox cannot start)."""

    def __init__(self, code: CodePolicy, limits: Limits) -> None:
        self.code = code
        self.session = spawn(limits)
        self.token: Token[Session] | None = SESSION.set(self.session)
        MODULES.add(code)
        # The source is labelled by its content, never by the caller's name for it: the label
        # lies in the candidate's memory, where its length moved what a candidate could measure
        # (attacker 20b: a memory probe scored by the name's length).
        reply = self.session.call(["load", code.source, code.axis, code.entry,
                                   code.module_name])
        if reply != ["ok"]:
            self.close()
            broken(reply)

    def close(self) -> str:
        """End the process; what it printed."""
        if self.token is not None:
            SESSION.reset(self.token)
            self.token = None
            MODULES.discard(self.code)
        return self.session.close()


class Modules:
    """The stand-in modules, one per candidate being evaluated (`CodePolicy.module_name`),
    registered while any evaluation of it is open."""

    def __init__(self) -> None:
        self.open: dict[str, int] = {}
        self.lock = threading.Lock()

    def add(self, code: CodePolicy) -> None:
        with self.lock:
            name = code.module_name
            if name not in self.open:
                module = types.ModuleType(name)
                setattr(module, code.entry, type(code.entry, (STAND_INS[code.axis],), {}))
                sys.modules[name] = module
            self.open[name] = self.open.get(name, 0) + 1

    def discard(self, code: CodePolicy) -> None:
        with self.lock:
            name = code.module_name
            self.open[name] -= 1
            if not self.open[name]:
                del self.open[name], sys.modules[name]


MODULES = Modules()
