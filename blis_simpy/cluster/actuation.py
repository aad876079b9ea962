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
§9.11.) A victim not yet routable is terminated at once; a routable one drains
(`pool.Pool.drain`): it gets no new request, and by the drain policy finishes its requests
(wait), hands them all back to the gateway to restart elsewhere (immediate), or hands back
those still waiting and finishes the running ones (redirect). It terminates when nothing
routed to it is left.

Every transition is written to the ScaleLog's lifecycle channel; replica-seconds and cost are
computed from it.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any, Protocol

import simpy

from blis_simpy.cluster.fleet import Fleet
from blis_simpy.cluster.gateway import Gateway
from blis_simpy.cluster.pool import GONE, Pool, Timer
from blis_simpy.config.deployment import Actuation, ReplicaPool, Warmup
from blis_simpy.core.clock import Environment
from blis_simpy.core.scale_log import ScaleLog
from blis_simpy.core.snapshot import Lifecycle
from blis_simpy.core.units import US_PER_S
from blis_simpy.engine.instance import Instance
from blis_simpy.engine.latency import LatencyModel, Scaled

STARTING = (Lifecycle.PROVISIONING, Lifecycle.LOADING, Lifecycle.WARMING)


def warming(base: LatencyModel, warmup: Warmup, env: Environment) -> Scaled:
    """A replica's step-time model while it warms up: the base model's step times times the
    warm-up factor at the step's start."""
    start, duration = env.now, round(warmup.duration_s * US_PER_S)
    return Scaled(base, lambda: warmup.factor(env.now - start, duration))


class Seats(Protocol):
    """Where a config's replicas hold GPUs (cluster/placement.py; only with node pools)."""

    def find(self) -> Any: ...  # a node with room, or None

    def hold(self, node: Any, instance: str) -> simpy.Event | None: ...

    def release(self, instance: str) -> None: ...


class DeploymentPool(Pool):
    """A deployment config's pool, grown and shrunk by the autoscaler through the actuation
    delays, warm-up and drain policy. `delays` draws (provisioning µs, load µs) for the next
    new replica; `seats`, with node pools, is where its replicas hold their GPUs."""

    def __init__(self, env: Environment, config: str, model: str, pool: ReplicaPool,
                 fleets: Sequence[Fleet], gateway: Gateway, spawn: Callable[[], Instance],
                 actuation: Actuation, delays: Callable[[], tuple[int, int]],
                 log: ScaleLog) -> None:
        super().__init__(env, config, model, fleets, gateway, spawn, log)
        self.bounds = pool
        self.actuation = actuation
        self.delays = delays
        self.seats: Seats | None = None

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
        drain = self.actuation.drain
        for _ in range(count):
            victim = self.victim()
            if victim.routable:
                self.drain(victim, drain.policy, drain.timeout_s)
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
            inst.latency = warming(base, warmup, self.env)
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
        """As a pool's, and the replica's GPUs go back to its node once it is terminated."""
        if inst.state is Lifecycle.TERMINATED:
            return
        super().terminate(inst)
        if inst.state is Lifecycle.TERMINATED and self.seats is not None:
            self.seats.release(inst.id)
