"""Gateway flow control (`cluster.flow_control`): admitted requests wait in a queue at the
gateway, in priority bands, and a dispatch process sends them on to routing while the fleet is
not saturated (llm-d's flow control; the reference's `--flow-control`).

The queue is a SimPy Store (`GatewayQueue`): the gateway *puts* each admitted request (a put
may be refused, or push out a lower-priority request, by the bands' capacity rules) and the
dispatch process *gets* from it; a get is granted the next request the dispatch rules allow,
and none while the fleet is saturated. As llm-d's dispatcher, it makes one attempt per request
queued and one per tick (every `dispatch_tick_s` while the queue holds requests), so a burst
is released at the pace the fleet's signals can follow. The bands (`Bands`) are plain data, so
their rules are tested on their own.

A run without the section builds none of this; the gateway then routes admitted requests at
once, as before.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol, cast

import simpy
from simpy.resources.store import Store, StoreGet, StorePut

from blis_simpy.cluster.fleet import Fleet
from blis_simpy.config.flow_control import (
    ConcurrencySaturation,
    FlowControlConfig,
    NeverSaturated,
    Priorities,
    UtilizationSaturation,
)
from blis_simpy.config.scenario import Scenario
from blis_simpy.config.workload import TenantsWorkload
from blis_simpy.core.clock import Environment
from blis_simpy.core.request import RejectCode, Request
from blis_simpy.core.snapshot import InstanceSnapshot, Lifecycle
from blis_simpy.core.units import US_PER_S
from blis_simpy.engine.instance import Instance
from blis_simpy.policies.admission import utilization

NO_DEADLINE = 2**62
# Not routable now but will be: starting, or crashed and being repaired (a dead or terminated
# instance never is, so a queue held for one would hold, and tick, for ever).
OPENING = (Lifecycle.PROVISIONING, Lifecycle.LOADING, Lifecycle.WARMING, Lifecycle.FAILED)
QUEUED = "queued"


class Entry:
    """A queued request, its place in arrival order and its TTFT deadline."""

    __slots__ = ("deadline", "req", "seq")

    def __init__(self, req: Request, seq: int, deadline: int) -> None:
        self.req = req
        self.seq = seq
        self.deadline = deadline


class Band:
    """One priority's queued requests: a FIFO flow per tenant."""

    __slots__ = ("ceiling", "cursor", "flows", "limit", "priority", "size")

    def __init__(self, priority: int, ceiling: float, limit: int) -> None:
        self.priority = priority
        self.ceiling = ceiling  # dispatch stops here (and below) at this saturation
        self.limit = limit  # requests it holds; 0 = unlimited
        self.flows: dict[str, deque[Entry]] = {}
        self.size = 0
        self.cursor = ""  # round-robin: the tenant served last

    def add(self, entry: Entry) -> None:
        tenant = entry.req.tenant_id or "default"
        flow = self.flows.get(tenant)
        if flow is None:
            flow = self.flows[tenant] = deque()
        flow.append(entry)
        self.size += 1

    def take(self, tenant: str, entry: Entry) -> None:
        flow = self.flows[tenant]
        if flow[0] is entry:
            flow.popleft()
        else:
            flow.remove(entry)
        if not flow:
            del self.flows[tenant]
        self.size -= 1


class Bands:
    """The gateway queue's contents and rules: capacities on the way in, the dispatch order,
    fairness between tenants and the per-band saturation ceilings on the way out."""

    def __init__(self, config: FlowControlConfig,
                 deadline: Callable[[Request], int] | None = None) -> None:
        self.config = config
        self.priorities = Priorities(config.priorities, config.default_priority)
        order = self.priorities.bands()
        n, floor = len(order), config.usage_limit
        self.bands = [Band(p, 1.0 if n == 1 else 1.0 - i * (1.0 - floor) / (n - 1),
                           config.band_limit(p)) for i, p in enumerate(order)]
        self.by_priority = {band.priority: band for band in self.bands}
        self.deadline = deadline
        self.size = 0
        self.seq = 0
        self.where: dict[Request, tuple[Band, Entry]] = {}

    # -- in -----------------------------------------------------------------------------------

    def add(self, req: Request, now: int) -> tuple[str, Request | None]:
        """Queue a request, or say why not: (QUEUED or a RejectCode, the request pushed out to
        make room or None)."""
        band = self.by_priority[self.priorities.of(req.slo_class)]
        if band.limit and band.size >= band.limit:
            return RejectCode.BAND_FULL, None
        victim = None
        limit = self.config.max_queue_depth
        if limit and self.size >= limit:
            victim = self.victim(band) if self.config.on_full == "shed-lowest" else None
            if victim is None:
                return RejectCode.QUEUE_FULL, None
            self.remove(victim)
        self.seq += 1
        deadline = now + self.deadline(req) if self.deadline is not None else NO_DEADLINE
        entry = Entry(req, self.seq, deadline)
        band.add(entry)
        self.where[req] = (band, entry)
        self.size += 1
        return QUEUED, victim

    def victim(self, newcomer: Band) -> Request | None:
        """The newest request of the lowest sheddable band below the newcomer's, if any."""
        for band in reversed(self.bands):
            if band.priority >= 0 or band.priority >= newcomer.priority:
                return None
            if band.size:
                newest = max((flow[-1] for flow in band.flows.values()), key=lambda e: e.seq)
                return newest.req
        return None

    def remove(self, req: Request) -> bool:
        """Take a request out wherever it is (shed, expired or given up); False if not here."""
        found = self.where.pop(req, None)
        if found is None:
            return False
        band, entry = found
        band.take(req.tenant_id or "default", entry)
        self.size -= 1
        return True

    # -- out ----------------------------------------------------------------------------------

    def pop(self, saturation: float) -> Request | None:
        """The next request dispatch allows at this saturation, taken out; None if none."""
        if not self.size:
            return None
        open_bands = []
        for band in self.bands:  # highest first; a band over its ceiling closes those below
            if saturation >= band.ceiling:
                break
            if band.size:
                open_bands.append(band)
        if not open_bands:
            return None
        order = self.config.dispatch_order
        if order == "fifo":
            entry, band = min(((flow[0], band) for band in open_bands
                               for flow in band.flows.values()), key=lambda eb: eb[0].seq)
        else:
            band = open_bands[0]
            flow = self.flow(band)
            entry = flow[0] if order == "priority" else \
                min(flow, key=lambda e: (e.deadline, e.seq))
        self.remove(entry.req)
        return entry.req

    def flow(self, band: Band) -> deque[Entry]:
        """The tenant flow the band serves next (its fairness rule)."""
        if self.config.fairness == "global-strict":
            return min(band.flows.values(), key=lambda flow: flow[0].seq)
        tenants = sorted(band.flows)
        after = [t for t in tenants if t > band.cursor]
        band.cursor = after[0] if after else tenants[0]
        return band.flows[band.cursor]

    def depth(self) -> dict[int, int]:
        """Requests queued per band priority."""
        return {band.priority: band.size for band in self.bands}


class GatewayQueue(Store):
    """The bands as a SimPy Store. A put queues its request (its value: QUEUED, or the reject
    code, and the request pushed out); a get is granted the next dispatchable request. Each
    put and each tick is one dispatch attempt (`attempts`), as llm-d's dispatcher: a get
    waiting for an attempt, or finding the fleet saturated, waits for the next one."""

    def __init__(self, env: Environment, bands: Bands,
                 saturation: Callable[[], float]) -> None:
        super().__init__(env)
        self.bands = bands
        self.saturation = saturation
        self.attempts = 0

    def _do_put(self, event: StorePut) -> bool:
        outcome = self.bands.add(event.item, int(self._env.now))
        if outcome[0] == QUEUED:
            self.attempts += 1
        event.succeed(outcome)
        return True

    def _do_get(self, event: StoreGet) -> bool:
        if self.attempts and self.bands.size:
            self.attempts -= 1
            req = self.bands.pop(self.saturation())
            if req is not None:
                event.succeed(req)
        return True

    def tick(self) -> None:
        """Another attempt, for a get still waiting (saturation may have fallen)."""
        self.attempts = max(self.attempts, 1)
        self._trigger_get(None)


class Dispatcher(Protocol):
    """What the queue needs of its gateway (cluster/gateway.py: Gateway)."""

    @property
    def fleet(self) -> Fleet: ...

    def snapshots_now(self, instances: Sequence[Instance]) -> Sequence[InstanceSnapshot]: ...

    def refuse(self, req: Request, code: str, reason: str) -> None: ...

    def dispatch(self, req: Request) -> None: ...


class FlowControl:
    """The gateway queue, its dispatch process and its tick, for one gateway."""

    def __init__(self, env: Environment, config: FlowControlConfig, gateway: Dispatcher,
                 deadline: Callable[[Request], int] | None = None) -> None:
        self.env = env
        self.config = config
        self.gateway = gateway
        self.detector = saturation_of(config)
        self.bands = Bands(config, deadline if config.dispatch_order == "slo-deadline"
                           else None)
        self.queue = GatewayQueue(env, self.bands, self.saturation)
        self.tick_us = max(1, round(config.dispatch_tick_s * US_PER_S))
        self.ttl_us = None if config.queue_ttl_s is None else round(config.queue_ttl_s *
                                                                    US_PER_S)
        self.ticking = False
        self.max_depth = 0
        env.process(self.dispatch())

    def saturation(self) -> float:
        """The fleet's saturation now, over its routable instances' snapshots."""
        gateway = self.gateway
        routable = gateway.fleet.routable
        if not routable:  # nowhere to send anything: hold while an instance may still open
            coming = any(inst.state in OPENING for inst in gateway.fleet)
            return 1.0 if coming else 0.0  # else the gateway's failure rule takes each request
        return self.detector(gateway.snapshots_now(routable))

    def enqueue(self, req: Request) -> None:
        """An admitted request joins the queue, or is refused by its capacity rules."""
        put = self.queue.put(req)
        outcome, victim = cast(tuple[str, Request | None], put.value)
        if victim is not None:
            self.gateway.refuse(victim, RejectCode.QUEUE_SHED, "shed from the gateway queue "
                                f"for {req.name} (a higher band)")
        if outcome != QUEUED:
            why = "its band" if outcome == RejectCode.BAND_FULL else "the gateway queue"
            self.gateway.refuse(req, outcome, f"{why} is full")
            return
        self.max_depth = max(self.max_depth, self.bands.size)
        if not self.ticking:
            self.ticking = True
            self.env.process(self.tick())
        if self.ttl_us is not None:
            self.env.timeout(self.ttl_us, req).callbacks.append(self.expire)

    def dispatch(self) -> Any:
        """The dispatch process: each request the queue lets go is routed."""
        while True:
            req = yield self.queue.get()
            self.gateway.dispatch(req)

    def tick(self) -> Any:
        """While requests wait, another dispatch attempt every tick."""
        while self.bands.size:
            yield self.env.timeout(self.tick_us)
            self.queue.tick()
        self.ticking = False

    def expire(self, event: simpy.Event) -> None:
        req = cast(Request, event.value)
        if self.bands.remove(req):
            self.gateway.refuse(req, RejectCode.QUEUE_TTL, "waited in the gateway queue "
                                f"longer than {self.config.queue_ttl_s} s")

    def abandon(self, req: Request) -> bool:
        """Its client gave up: out of the queue (False if it was not queued)."""
        return self.bands.remove(req)


Detector = Callable[[Sequence[InstanceSnapshot]], float]


def saturation_of(config: FlowControlConfig) -> Detector:
    rule = config.saturation
    if isinstance(rule, UtilizationSaturation):
        return lambda snaps: utilization(snaps, rule.queue_depth, rule.kv_utilization)
    if isinstance(rule, ConcurrencySaturation):
        limit = rule.max_in_flight
        return lambda snaps: sum(s.in_flight_requests for s in snaps) / (len(snaps) * limit)
    assert isinstance(rule, NeverSaturated)
    return lambda snaps: 0.0


def ttft_targets(scenario: Scenario) -> Callable[[Request], int]:
    """Each request's TTFT target (µs), for slo-deadline dispatch: its tenant's own, else its
    SLO class's (`evaluation.slo_targets`); without one its deadline is never."""
    workload = scenario.workload
    by_tenant = {t.id: t.slo.ttft_ms for t in workload.tenants if t.slo.ttft_ms} \
        if isinstance(workload, TenantsWorkload) else {}
    by_class = {"" if cls == "default" else cls: t.ttft_ms
                for cls, t in scenario.evaluation.slo_targets.items() if t.ttft_ms}

    def target(req: Request) -> int:
        ms = by_tenant.get(req.tenant_id) or by_class.get(req.slo_class)
        return NO_DEADLINE if ms is None else round(ms * 1000)
    return target
