"""The online request pipeline (BC-1..BC-3): arrival -> admission (after the admission
latency) -> priority -> routing (after the routing latency) -> the chosen instance.

Each stage is an event at its own time and priority (ordering.py); requests reach instances
only through `_route` (NC-1). The gateway owns the router state and the per-instance pending
and in-flight counters that snapshots report.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import simpy

from blis_simpy.cluster.ordering import ADMISSION, ROUTING, StageEvent
from blis_simpy.cluster.router_state import RouterState
from blis_simpy.cluster.snapshot import SnapshotProvider, Snapshots
from blis_simpy.config.scenario import ClusterConfig
from blis_simpy.engine.instance import Instance
from blis_simpy.engine.request import Request, State
from blis_simpy.metrics.anomalies import AnomalyLog
from blis_simpy.policies.admission import AdmissionPolicy
from blis_simpy.policies.priority import PriorityPolicy
from blis_simpy.policies.routing import RoutingPolicy
from blis_simpy.policies.view import RequestView


def settle(req: Request) -> None:
    """Wake whoever waits on this request's outcome (a session's next turn, a user)."""
    if req.done is not None and not req.done.triggered:
        req.done.succeed()


class Gateway:
    """Admission, priority and routing for a set of instances."""

    def __init__(self, env: simpy.Environment, instances: Sequence[Instance],
                 config: ClusterConfig, admission: AdmissionPolicy, priority: PriorityPolicy,
                 routing: RoutingPolicy) -> None:
        self.env = env
        self.instances = instances
        self.config = config
        self.admission = admission
        self.priority = priority
        self.routing = routing
        self.state = RouterState()
        self.pending = [0] * len(instances)
        self.in_flight = [0] * len(instances)
        self.snapshots = SnapshotProvider(instances, config.observability, self.pending,
                                          self.in_flight)
        self.rejected = 0
        self.keep_tokens = False  # set to export the requests' token ids
        self.anomalies: AnomalyLog | None = None
        self.decisions: list[tuple[Any, ...]] | None = [] if config.record_decisions else None
        for instance in instances:
            instance.observer = self

    # -- stages -------------------------------------------------------------------------------

    def arrive(self, req: Request) -> None:
        """ClusterArrival: the request exists; admission follows after its latency."""
        now = self.env.now
        block_size = self.instances[0].kv.block_size
        req.hash_blocks(block_size, self.keep_tokens)
        req.view = RequestView(req.name, req.arrival, req.input_len, req.tenant_id,
                               req.slo_class, tuple(req.hashes[: req.input_len // block_size]))
        self.state.on_arrival(req.tenant_id, now)
        StageEvent(self.env, self.config.admission_latency_us, ADMISSION, req, self._admit)

    def _admit(self, event: simpy.Event) -> None:
        req: Request = event.value
        now = self.env.now
        self.state.clock = now
        decision = self.admission.decide(req.view, self.state, now)
        self._record(req, "admission", decision.action, -1, decision.reason, None)
        if decision.action == "admit":
            self.state.on_admit(req.tenant_id)
            req.admitted_at = now
            req.priority = self.priority.compute(req.view, self.state, now)
            StageEvent(self.env, self.config.routing_latency_us, ROUTING, req, self._route)
        elif decision.action == "delay":
            if decision.delay_us <= 0:
                raise ValueError(f"admission policy {self.admission.name!r} delayed "
                                 f"{req.name} by {decision.delay_us} µs; a delay must be > 0")
            StageEvent(self.env, decision.delay_us, ADMISSION, req, self._admit)
        else:
            req.state = State.REJECTED
            req.reject_reason = decision.reason or "rejected by admission"
            self.state.on_reject(req.tenant_id)
            self.rejected += 1
            if self.anomalies is not None:
                self.anomalies.rejections.append((now, "", req.name))
            settle(req)

    def _route(self, event: simpy.Event) -> None:
        req: Request = event.value
        now = self.env.now
        self.state.clock = now
        snapshots = Snapshots(self.snapshots, now)
        decision = self.routing.route(req.view, req.priority, snapshots, self.state, now)
        target = decision.target
        if not 0 <= target < len(self.instances):
            raise ValueError(f"routing policy {self.routing.name!r} chose instance {target}; "
                             f"valid: 0..{len(self.instances) - 1}")
        self._record(req, "routing", "route", target, decision.reason, decision.scores)
        self.pending[target] += 1
        self.in_flight[target] += 1
        req.routed_at = now
        self.instances[target].accept(req)

    # -- instance observer --------------------------------------------------------------------

    def queued(self, instance: int, req: Request) -> None:
        self.pending[instance] = max(0, self.pending[instance] - 1)

    def finished(self, instance: int, req: Request) -> None:
        if req.queued_at < 0:  # rejected on arrival at the instance: never queued
            self.pending[instance] = max(0, self.pending[instance] - 1)
        self.in_flight[instance] -= 1
        self.state.on_finish(req.tenant_id)
        settle(req)

    # -- decision records ---------------------------------------------------------------------

    def _record(self, req: Request, kind: str, outcome: str, target: int, reason: str,
                scores: tuple[float, ...] | None) -> None:
        if self.decisions is None:
            return
        top = ()
        if scores is not None:
            ranked = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
            top = tuple((self.instances[i].name, scores[i]) for i in ranked[: self.config.top_k])
        self.decisions.append((self.env.now, req.name, kind, outcome,
                               self.instances[target].name if target >= 0 else "", reason, top))
