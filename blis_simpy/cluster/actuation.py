"""Actuation (seed 001 §4, PR 12): how a deployment config's replica pool grows and shrinks.

A new replica is provisioning (node, container), then loading (weights), then warming (each
step slower by the warm-up profile's factor, applied to the step time itself), then active.
Provisioning and load times are drawn per replica from the "autoscaler" stream. A warming
replica takes traffic when `warming_takes_traffic` (the default, as a vLLM server does once
it answers its readiness probe); otherwise it becomes routable only when warm.

Scale-down picks its victims by one deterministic rule: first the replicas not yet taking
traffic, newest first (undoing the latest scale-up costs nothing); then those taking traffic
with the fewest requests in flight, ties to the newest (the oldest keep their warm caches).
(The later reference drained the smallest id, so its own new replicas went first: cluster.md
§9.11.) A victim not yet routable is terminated at once; a routable one drains: it gets no new
request, and by the drain policy finishes its requests (wait), hands them all back to the
gateway to restart elsewhere (immediate), or hands back those still waiting and finishes the
running ones (redirect). It terminates when nothing routed to it is left.

Every transition is written to the ScaleLog's lifecycle channel; replica-seconds and cost are
computed from it.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any, Protocol, cast

import simpy
from simpy.events import NORMAL

from blis_simpy.cluster.fleet import Fleet
from blis_simpy.cluster.gateway import Gateway
from blis_simpy.config.deployment import Actuation, ReplicaPool, Warmup
from blis_simpy.core.clock import Environment
from blis_simpy.core.ordering import SCALE_CHECK, StageEvent
from blis_simpy.core.request import Request, State
from blis_simpy.core.scale_log import ScaleLog
from blis_simpy.core.snapshot import Lifecycle
from blis_simpy.core.units import US_PER_S
from blis_simpy.engine.instance import Instance, InstanceObserver
from blis_simpy.engine.latency import LatencyModel

GONE = (Lifecycle.DRAINING, Lifecycle.TERMINATED)
STARTING = (Lifecycle.PROVISIONING, Lifecycle.LOADING, Lifecycle.WARMING)


class Timer(StageEvent):
    """An actuation delay (provisioning, load, warm-up, drain timeout). With no horizon, a run
    ends when only these and the autoscaler's polls are left: they cannot bring new work."""

    def __init__(self, env: Environment, delay: int) -> None:
        super().__init__(env, delay, NORMAL)


class WarmingLatency:
    """A replica's step-time model while it warms up: the base model's step times times the
    warm-up factor at the step's start."""

    def __init__(self, base: LatencyModel, warmup: Warmup, env: Environment) -> None:
        self.base = base
        self.warmup = warmup
        self.env = env
        self.start = env.now
        self.duration = round(warmup.duration_s * US_PER_S)
        self.output_delay = base.output_delay
        self.per_request = base.per_request

    def queue_delay(self, input_len: int) -> int:
        return self.base.queue_delay(input_len)

    def step_time(self, new_tokens: int, decodes: int, batch: Sequence[Request],
                  extra_us: int) -> int:
        factor = self.warmup.factor(self.env.now - self.start, self.duration)
        return round(self.base.step_time(new_tokens, decodes, batch, extra_us) * factor)


class Seats(Protocol):
    """Where a config's replicas hold GPUs (cluster/placement.py; only with node pools)."""

    def find(self) -> Any: ...  # a node with room, or None

    def hold(self, node: Any, instance: str) -> simpy.Event | None: ...

    def release(self, instance: str) -> None: ...


class DeploymentPool:
    """One deployment config's replicas while the run goes on, in the order they joined.
    `spawn` makes a new instance of this config (named and recorded by the caller)."""

    def __init__(self, env: Environment, config: str, model: str, pool: ReplicaPool,
                 fleets: Sequence[Fleet], gateway: Gateway, spawn: Callable[[], Instance],
                 actuation: Actuation, delays: Callable[[], tuple[int, int]],
                 log: ScaleLog) -> None:
        self.env = env
        self.config = config
        self.model = model
        self.bounds = pool
        self.fleets = fleets
        self.gateway = gateway
        self.spawn = spawn
        self.actuation = actuation
        self.delays = delays  # (provisioning µs, load µs) of the next new replica
        self.log = log
        self.members: list[Instance] = []
        self.wrap: Callable[[InstanceObserver], InstanceObserver] | None = None
        self.seats: Seats | None = None  # node pools: GPUs per replica on the config's pool

    def watch(self, wrap: Callable[[InstanceObserver], InstanceObserver]) -> None:
        """Put `wrap(observer)` between every replica, present and future, and its observer."""
        self.wrap = wrap
        for inst in self.members:
            inst.observer = wrap(cast(InstanceObserver, inst.observer))

    @property
    def replicas(self) -> int:
        """Replicas counted against the pool's bounds: every one not draining or gone."""
        return sum(1 for inst in self.members if inst.state not in GONE)

    def start(self, count: int) -> int:
        """The replicas active at t=0 (no provisioning, load or warm-up); how many were
        placed (node pools: fewer when the ready nodes lack the GPUs)."""
        for placed in range(count):
            node = self.seats.find() if self.seats is not None else None
            if self.seats is not None and node is None:
                return placed
            inst = self.spawn()
            if self.seats is not None:
                self.seats.hold(node, inst.id)
            self._add(inst, Lifecycle.ACTIVE)
        return count

    def grow(self, count: int) -> str:
        """Start `count` replicas; what kept some from starting ("" when none was)."""
        for placed in range(count):
            node = self.seats.find() if self.seats is not None else None
            if self.seats is not None and node is None:
                return f"; {placed} of {count} placed: no free GPUs in the node pool"
            inst = self.spawn()
            inst.routable = False
            node_ready = self.seats.hold(node, inst.id) if self.seats is not None else None
            self._add(inst, Lifecycle.PROVISIONING)
            self.env.process(self._bring_up(inst, *self.delays(), node_ready))
        return ""

    def shrink(self, count: int) -> None:
        for _ in range(count):
            victim = self.victim()
            if victim.routable:
                self._drain(victim)
            else:
                self.terminate(victim)

    def victim(self) -> Instance:
        """The next replica to remove (module docstring): not yet routable, newest first;
        then fewest in flight, ties to the newest."""
        alive = [inst for inst in self.members if inst.state not in GONE]
        starting = [inst for inst in alive if not inst.routable]
        if starting:
            return starting[-1]
        in_flight = self.gateway.in_flight
        return min(reversed(alive), key=lambda inst: in_flight.get(inst.id, 0))

    # -- lifecycle ---------------------------------------------------------------------------

    def _add(self, inst: Instance, state: Lifecycle) -> None:
        if self.wrap is not None:
            inst.observer = self.wrap(cast(InstanceObserver, inst.observer))
        self.members.append(inst)
        for fleet in self.fleets:
            fleet.add(inst)
        self._enter(inst, state)

    def _enter(self, inst: Instance, state: Lifecycle) -> None:
        inst.state = state
        self.log.lifecycle.append((self.env.now, inst.id, self.config, str(state)))

    def _open(self, inst: Instance) -> None:
        for fleet in self.fleets:
            fleet.open(inst)

    def _bring_up(self, inst: Instance, provisioning: int, load: int,
                  node_ready: simpy.Event | None = None
                  ) -> Generator[simpy.Event, object, None]:
        if node_ready is not None:  # its node is still provisioning
            yield node_ready
        yield Timer(self.env, provisioning)
        if inst.state is not Lifecycle.PROVISIONING:  # cancelled by a scale-down
            return
        self._enter(inst, Lifecycle.LOADING)
        yield Timer(self.env, load)
        if inst.state is not Lifecycle.LOADING:
            return
        warmup = self.actuation.warmup
        if warmup.duration_s > 0:
            base = inst.latency
            inst.latency = WarmingLatency(base, warmup, self.env)
            self._enter(inst, Lifecycle.WARMING)
            if self.actuation.warming_takes_traffic:
                self._open(inst)
            yield Timer(self.env, round(warmup.duration_s * US_PER_S))
            inst.latency = base
            if inst.state is not Lifecycle.WARMING:  # drained or cancelled while warming
                return
        if not inst.routable:
            self._open(inst)
        self._enter(inst, Lifecycle.ACTIVE)

    def terminate(self, inst: Instance) -> None:
        if inst.state is Lifecycle.TERMINATED:
            return
        if inst.routable:
            for fleet in self.fleets:
                fleet.close(inst)
        self._enter(inst, Lifecycle.TERMINATED)
        if self.seats is not None:
            self.seats.release(inst.id)

    def _drain(self, inst: Instance) -> None:
        for fleet in self.fleets:
            fleet.close(inst)
        self._enter(inst, Lifecycle.DRAINING)
        drain = self.actuation.drain
        watch = DrainWatch(self, inst, cast(InstanceObserver, inst.observer))
        inst.observer = watch
        if drain.policy == "immediate":
            watch.hand_back_all(running=True)
        elif drain.policy == "redirect":
            watch.hand_back_all(running=False)
        elif drain.timeout_s is not None:
            Timer(self.env, round(drain.timeout_s * US_PER_S)).callbacks.append(
                lambda _: watch.time_up())
        watch.check()


class DrainWatch:
    """A draining instance's observer: passes every notice on to the one it replaced, hands
    requests back to the gateway as the drain policy says, and terminates the instance once
    nothing routed to it is left."""

    def __init__(self, pool: DeploymentPool, inst: Instance, inner: InstanceObserver) -> None:
        self.pool = pool
        self.inst = inst
        self.inner = inner
        self.gateway = pool.gateway
        self.handing: Request | None = None
        policy = pool.actuation.drain.policy
        # immediate and redirect: requests still in their queueing delay go back on arrival
        self.redirecting = policy != "wait"
        self.take_running = policy == "immediate"

    def queued(self, instance: str, req: Request) -> None:
        self.inner.queued(instance, req)
        if self.redirecting:  # handed back once it is in the queue (after the instance events)
            StageEvent(self.pool.env, 0, SCALE_CHECK, req, self._hand_back_late)

    def finished(self, instance: str, req: Request) -> None:
        if req is self.handing:
            self.pool.log.lost.append((self.pool.env.now, instance, req.name, req.progress))
            self.gateway.hand_back(instance, req)
        else:
            self.inner.finished(instance, req)
        self.check()

    def handed_off(self, instance: str, req: Request) -> None:
        self.inner.handed_off(instance, req)
        self.check()

    def hand_back(self, req: Request) -> None:
        self.handing = req
        self.inst.abandon(req)  # reports back through `finished`
        self.handing = None

    def hand_back_all(self, running: bool) -> None:
        inst = self.inst
        for req in [*inst.inbox.items, *inst.wait_queue, *(inst.running if running else ())]:
            self.hand_back(req)

    def _hand_back_late(self, event: simpy.Event) -> None:
        req = cast(Request, event.value)
        if req.instance == self.inst.id and (
                req.state is State.QUEUED or (self.take_running and req.state is State.RUNNING)):
            self.hand_back(req)

    def time_up(self) -> None:
        """wait's timeout: whatever is left goes back."""
        if self.inst.state is Lifecycle.DRAINING:
            self.redirecting = self.take_running = True
            self.hand_back_all(running=True)
            self.check()

    def check(self) -> None:
        if self.inst.state is Lifecycle.DRAINING and not self.gateway.in_flight.get(
                self.inst.id, 0):
            self.pool.terminate(self.inst)
