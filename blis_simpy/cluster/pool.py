"""A pool of replicas (one deployment config's, or the `cluster.instances` shorthand's fixed
ones) and their lifecycle: joining the fleet, draining, terminating, failing and coming back.

Every instance belongs to one pool, its `home`: the pool keeps the instance's place in the
fleets it serves in (`Fleet.open`/`close`) and writes every transition to the ScaleLog's
lifecycle channel. These are the public lifecycle operations, safe in any order and at any
time: `drain` (no new requests; the ones routed to it finish, or go back to the gateway, by
the drain policy; terminated when none is left), `terminate` (at once: what it holds goes
back to the gateway) and, on the instance itself, `fail` (its process interrupted).

A failed instance is closed to traffic before its requests are reported lost, so nothing is
routed to it while it is down; a repaired one opens again. One that failed for good (or while
not serving) is `dead`: it no longer counts against the pool's bounds, and an autoscaler grows
the pool back to its `min` (cluster/autoscaler.py). Growing and shrinking with actuation
delays is `actuation.DeploymentPool`, a pool of this kind.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, cast

import simpy

from blis_simpy.cluster.fleet import Fleet
from blis_simpy.cluster.gateway import Gateway
from blis_simpy.core.clock import Environment
from blis_simpy.core.failure import Failure
from blis_simpy.core.ordering import SCALE_CHECK, Background, StageEvent
from blis_simpy.core.request import Request, State
from blis_simpy.core.scale_log import ScaleLog
from blis_simpy.core.snapshot import Lifecycle
from blis_simpy.core.units import US_PER_S
from blis_simpy.engine.instance import Instance
from blis_simpy.engine.step import InstanceObserver

# Not counted against the pool's bounds: leaving, gone, or failed for good.
GONE = (Lifecycle.DRAINING, Lifecycle.TERMINATED, Lifecycle.DEAD)
SERVING = (Lifecycle.WARMING, Lifecycle.ACTIVE)
DrainPolicy = Literal["wait", "immediate", "redirect"]


class Pool:
    """Replicas of one config, in the order they joined. `spawn` makes a new instance of this
    config (named and recorded by the caller)."""

    def __init__(self, env: Environment, config: str, model: str, fleets: Sequence[Fleet],
                 gateway: Gateway, spawn: Callable[[], Instance], log: ScaleLog) -> None:
        self.env = env
        self.config = config
        self.model = model
        self.fleets = fleets
        self.gateway = gateway
        self.spawn = spawn
        self.log = log
        self.members: list[Instance] = []
        self.wrap: Callable[[InstanceObserver], InstanceObserver] | None = None
        self.joined: list[Callable[[Instance], None]] = []  # told of every new member

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
        """The replicas active at t=0 (no provisioning, load or warm-up); how many started."""
        for _ in range(count):
            self._add(self.spawn(), Lifecycle.ACTIVE)
        return count

    def _add(self, inst: Instance, state: Lifecycle) -> None:
        if self.wrap is not None:
            inst.observer = self.wrap(cast(InstanceObserver, inst.observer))
        inst.home = self
        self.members.append(inst)
        for fleet in self.fleets:
            fleet.add(inst)
        self._enter(inst, state)
        for told in self.joined:
            told(inst)

    def _enter(self, inst: Instance, state: Lifecycle) -> None:
        inst.state = state
        self.log.lifecycle.append((self.env.now, inst.id, self.config, str(state)))

    def _open(self, inst: Instance) -> None:
        for fleet in self.fleets:
            fleet.open(inst)

    def _close(self, inst: Instance) -> None:
        if inst.routable:
            for fleet in self.fleets:
                fleet.close(inst)

    # -- the public lifecycle -----------------------------------------------------------------

    def drain(self, inst: Instance, policy: DrainPolicy = "wait",
              timeout_s: float | None = None) -> None:
        """Stop sending `inst` requests; by `policy` the ones routed to it finish (wait; what
        is left after `timeout_s` goes back), all go back to the gateway to restart elsewhere
        (immediate), or the waiting ones go back and the running ones finish (redirect). It
        is terminated when nothing routed to it is left."""
        if inst.state is not Lifecycle.ACTIVE and inst.state is not Lifecycle.WARMING:
            return  # starting replicas are terminated, not drained; the rest are gone
        self._close(inst)
        self._enter(inst, Lifecycle.DRAINING)
        watch = DrainWatch(self, inst, cast(InstanceObserver, inst.observer), policy)
        inst.observer = watch
        if policy == "immediate":
            watch.hand_back_all(running=True)
        elif policy == "redirect":
            watch.hand_back_all(running=False)
        elif timeout_s is not None:
            Timer(self.env, round(timeout_s * US_PER_S)).callbacks.append(
                lambda _: watch.time_up())
        watch.check()

    def terminate(self, inst: Instance) -> None:
        """Terminate `inst` now: it takes no more requests, and every request routed to it
        goes back to the gateway (as a draining replica's do)."""
        if inst.state is Lifecycle.TERMINATED:
            return
        if self.gateway.in_flight.get(inst.id, 0) and inst.state is not Lifecycle.DEAD:
            if inst.state is not Lifecycle.DRAINING:
                self.drain(inst, "immediate")
            cast(DrainWatch, inst.observer).hand_back_everything()
            return  # terminated by its drain once nothing is left
        self._close(inst)
        self._enter(inst, Lifecycle.TERMINATED)

    # -- failures (the instance reports them: engine/instance.Home) ---------------------------

    def failed(self, inst: Instance, failure: Failure) -> None:
        """`inst` crashed: closed to traffic before its requests are reported lost. It is back
        after its repair unless it failed for good, or while not serving (a draining or
        starting replica is not repaired: the pool's bounds no longer count it)."""
        self._close(inst)
        dead = failure.repair_us is None or inst.state not in SERVING
        self._enter(inst, Lifecycle.DEAD if dead else Lifecycle.FAILED)

    def repaired(self, inst: Instance) -> None:
        if inst.state is Lifecycle.FAILED:
            self._enter(inst, Lifecycle.ACTIVE)
            self._open(inst)


class Timer(Background):
    """An actuation delay (provisioning, load, warm-up, drain timeout)."""

    def __init__(self, env: Environment, delay: int) -> None:
        super().__init__(env, delay)


class DrainWatch:
    """A draining instance's observer: passes every notice on to the one it replaced, hands
    requests back to the gateway as the drain policy says, and terminates the instance once
    nothing routed to it is left."""

    def __init__(self, pool: Pool, inst: Instance, inner: InstanceObserver,
                 policy: DrainPolicy) -> None:
        self.pool = pool
        self.inst = inst
        self.inner = inner
        self.gateway = pool.gateway
        self.handing: Request | None = None
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

    def lost(self, instance: str, req: Request) -> None:
        self.inner.lost(instance, req)

    def hand_back(self, req: Request) -> None:
        self.handing = req
        self.inst.abandon(req)  # reports back through `finished`
        self.handing = None

    def hand_back_all(self, running: bool) -> None:
        inst = self.inst
        for req in [*inst.inbox.items, *inst.wait_queue, *(inst.running if running else ())]:
            self.hand_back(req)

    def hand_back_everything(self) -> None:
        """Terminating now: requests in their queueing delay go back too."""
        self.redirecting = self.take_running = True
        for req in list(self.inst.arriving):
            self.hand_back(req)
        self.hand_back_all(running=True)
        self.check()

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
