"""One inference instance: a SimPy process (`instance.process`) running its step loop, an inbox
(a SimPy Store) and the step logic it drives (`step.py`).

A routed request waits out its queueing delay (an URGENT timeout, so one ending at the tick a
step starts runs before it: seed E.3), joins the wait queue's accounting and is put into the
inbox; the loop takes everything delivered at the start of every step, so every request that
arrived by then is seen before the batch is formed, and waits on the inbox when it has nothing
to do. Each step's duration is a timeout the loop waits out; the step's progress (tokens,
completions) is applied when it ends (`end_step`), so until then every observer sees the
batch as it runs (seed D.5.2). Work is never
left stranded: the loop keeps stepping while anything is running or waiting. The loop is one
generator (`run`), compiled with the rest of the module; its step timeouts are scheduled by a
`core.loop.Clock`, as `env.timeout` would schedule them.

The P/D roles (`pd.py`) are hooks on this same loop: what wakes an idle instance (`woken`),
when it has nothing to do (`idle`) and what it waits for when a step could not run
(`stalled`).

In compat mode the reference's per-instance event heap drives the steps instead
(`reference_order.py`, docs/architecture.md): the one step driver that is not a process,
because the reference's order of same-time events depends on every push and pop of that heap.
Its process then only waits for interruptions.

Interrupting the process (`instance.process.interrupt(cause)`, or `fail()`) crashes the
instance, as in SimPy's machine-shop example: every request in it is lost (reported to the
observer, which may send it again), its KV cache with them, and it takes no traffic until it
is repaired (`Failure.repair_s`), or ever.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Literal, Protocol, cast

import simpy
from mypy_extensions import mypyc_attr
from simpy.events import URGENT, Timeout
from simpy.exceptions import Interrupt
from simpy.resources.store import StoreGet

from blis_simpy.config.scenario import EngineConfig
from blis_simpy.core.clock import Environment
from blis_simpy.core.failure import Failure
from blis_simpy.core.loop import Clock, Inbox, NamedProcess
from blis_simpy.core.ordering import Background, StageEvent
from blis_simpy.core.records import Recorder
from blis_simpy.core.request import Request, State
from blis_simpy.core.snapshot import Lifecycle, Role
from blis_simpy.engine.kv.pool import BlockPool
from blis_simpy.engine.latency import LatencyModel
from blis_simpy.engine.reference_order import ReferenceEventOrder
from blis_simpy.engine.step import Stepper
from blis_simpy.policies.priority import PriorityPolicy
from blis_simpy.policies.scheduler import InstanceScheduler


class Home(Protocol):
    """Who keeps an instance's place in the fleet (its pool, cluster/pool.py): told when it
    fails and when it is back; drains and terminates it."""

    def failed(self, instance: Instance, failure: Failure) -> None: ...

    def repaired(self, instance: Instance) -> None: ...

    def drain(self, instance: Instance, policy: Literal["wait", "immediate", "redirect"],
              timeout_s: float | None) -> None: ...

    def terminate(self, instance: Instance) -> None: ...


@mypyc_attr(allow_interpreted_subclasses=True)  # P/D's prefill and decode roles
class Instance(Stepper):
    """A vLLM-like engine replica simulated as one SimPy process."""

    def __init__(
        self,
        env: Environment,
        instance_id: str,
        latency: LatencyModel,
        engine: EngineConfig,
        pool: BlockPool,
        scheduler: InstanceScheduler,
        priority: PriorityPolicy,
        recorder: Recorder,
        *,
        class_ranks: dict[str, int],
        role: Role = Role.MONOLITHIC,
        reference_order: bool = False,
    ) -> None:
        super().__init__(instance_id, latency, engine, pool, scheduler, priority, recorder,
                         class_ranks=class_ranks, role=role)
        self.env = env
        self.state = Lifecycle.ACTIVE
        self.routable = True  # the gateway may send it requests (the fleet keeps this)
        self.home: Home | None = None  # set by the pool it belongs to
        self.inbox = Inbox(env, self.delivered)  # requests whose queueing delay is over
        # In their queueing delay, in arrival order, each with the timeout that ends it.
        self.arriving: dict[Request, simpy.Event] = {}
        self.clock = Clock(env)
        self.failures = 0
        # Compat: the reference's event order (which also makes the instance idle from the
        # start of a step that empties its batch); natively the step loop, busy until a step
        # ends.
        self.order = ReferenceEventOrder(self, env) if reference_order else None
        self.process: simpy.Process = NamedProcess(
            env, self.run() if self.order is None else self.stand_by(),
            f"{instance_id}.run" if self.order is None else f"{instance_id}.stand_by")

    # -- arrivals ---------------------------------------------------------------------------

    def accept(self, req: Request) -> None:
        """A request routed here: reject it if it can never fit, else queue it after its delay."""
        if self.refuses(req, self.clock.now()):
            return
        req.state = State.ARRIVING
        if self.order is not None:
            self.order.arrive(req)
            return
        # URGENT: a request whose delay ends at the tick a step starts joins that step (seed
        # E.3: instance arrivals before steps at one timestamp).
        self.arriving[req] = StageEvent(self.env, self.latency.queue_delay(req.input_len),
                                        URGENT, req, self._arrive)

    def _arrive(self, event: simpy.Event) -> None:
        req = cast(Request, event.value)
        if self.arriving.get(req) is event:  # not abandoned or lost (and sent again) since
            del self.arriving[req]
            self.join(req, self.clock.now())

    def deliver(self, req: Request) -> None:
        self.inbox.put(req)

    def abandon(self, req: Request) -> None:
        if req.state is State.ARRIVING:
            self.arriving.pop(req, None)
        super().abandon(req)

    # -- the step loop ------------------------------------------------------------------------

    def run(self) -> Generator[simpy.Event, object, None]:
        """The instance's process: step while there is work (each step's duration a timeout),
        wait on the inbox while there is none. An interruption is a failure (`_down`)."""
        clock = self.clock
        timer: Timeout | None = None
        while True:
            get: StoreGet | None = None
            try:
                if self.idle():
                    get = self.inbox.get()
                    self.woken(cast(Request, (yield get)))
                    get = None
                now = clock.now()
                duration = self.step(now)
                if duration is None:
                    stall = self.stalled()
                    if stall is not None:
                        yield stall
                    continue
                timer = clock.after(now, duration, timer)
                yield timer
                self.last_event = end = clock.now()
                self.end_step(end)
            except Interrupt as interrupt:
                timer = None  # (if it was waiting for it, it is still pending)
                if not (yield from self._down(interrupt.cause, get)):
                    return

    def stand_by(self) -> Generator[simpy.Event, object, None]:
        """Compat mode's process: the reference's event heap runs the steps; the process only
        waits to be interrupted (a failure)."""
        while True:
            try:
                yield self.env.event()
            except Interrupt as interrupt:
                if not (yield from self._down(interrupt.cause, None)):
                    return

    def woken(self, req: Request) -> None:
        """The idle loop's inbox get brought `req`."""
        if self.scheduler.on_request_arrival is not None:  # seed G.1's hook
            self._told((req,), self.clock.now())
        self.wait_queue.append(req)

    def stalled(self) -> simpy.Event | None:
        """A step could not run although there is work: what to wait for before trying again
        (None: try again at once)."""
        return None

    # -- the public lifecycle -----------------------------------------------------------------

    def drain(self, policy: Literal["wait", "immediate", "redirect"] = "wait",
              timeout_s: float | None = None) -> None:
        """No new requests; those routed here finish or go back to the gateway by `policy`;
        terminated once none is left (its pool's `drain`)."""
        if self.home is None:
            raise ValueError(f"{self.id} belongs to no pool: nothing keeps its place in a fleet")
        self.home.drain(self, policy, timeout_s)

    def terminate(self) -> None:
        """Terminated now: what it holds goes back to the gateway (its pool's `terminate`)."""
        if self.home is None:
            raise ValueError(f"{self.id} belongs to no pool: nothing keeps its place in a fleet")
        self.home.terminate(self)

    def fail(self, failure: Failure | None = None) -> None:
        """Crash the instance now (its process is interrupted with `failure`). Does nothing
        to an instance already down for good."""
        if self.process.is_alive:
            self.process.interrupt(failure)

    def _down(self, cause: object, get: StoreGet | None
              ) -> Generator[simpy.Event, object, bool]:
        """The process was interrupted: crash, then wait for the repair (a failure while down
        repairs at the later of the two times). False if it never comes back. A terminated
        instance holds nothing and ignores it."""
        if self.state is Lifecycle.TERMINATED:
            return True
        failure = cause if isinstance(cause, Failure) else Failure()
        self._crash(failure, get)
        repair = failure.repair_us
        until = None if repair is None else self.clock.now() + repair
        while until is not None:
            try:
                yield Background(self.env, until - self.clock.now())
                break
            except Interrupt as again:
                more = again.cause.repair_us if isinstance(again.cause, Failure) else None
                until = None if more is None else max(until, self.clock.now() + more)
        if until is None:
            return False
        now = self.clock.now()
        self.recorder.faults.append((now, "repair", self.id, "", failure.reason))
        if self.events is not None:
            self.events.append((now, "repaired", "", self.id))
        if self.home is not None:
            self.home.repaired(self)
        elif self.state is Lifecycle.FAILED:
            self.state = Lifecycle.ACTIVE
        return True

    def _crash(self, failure: Failure, get: StoreGet | None) -> None:
        """Everything in the instance is lost: requests in their queueing delay, delivered,
        waiting and running, and its KV cache. Its home closes it to traffic first, so a
        request sent again goes elsewhere."""
        now = self.clock.now()
        self.failures += 1
        lost = list(self.arriving)
        self.arriving.clear()
        if self.order is not None:
            lost += self.order.clear()
        if get is not None:
            if get.triggered:  # its request left the inbox for the loop, which never saw it
                lost.append(cast(Request, get.value))
            else:
                get.cancel()
        lost += self.empty(now)
        self.recorder.faults.append((now, "crash", self.id, "", failure.reason))
        if self.events is not None:
            self.events.append((now, "crashed", "", self.id))
        if self.home is not None:
            self.home.failed(self, failure)
        else:
            self.state = Lifecycle.DEAD if failure.repair_us is None else Lifecycle.FAILED
        observer = self.observer
        for req in lost:
            if observer is not None:
                observer.lost(self.id, req)

