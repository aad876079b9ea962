"""Compat mode's same-time event order: the reference's per-instance event heap.

The reference keeps each instance's events (arrival, queued, step, and no-op scheduled /
preempted / request-left events) in a binary min-heap keyed on the timestamp alone, Go's
`container/heap`. Events at one tick therefore run in the order that heap's sift-up and
sift-down leave them, which depends on every push and pop before, no-op events included: it is
neither first-in-first-out nor last-in-first-out. It decides, for example, whether a request
whose queueing delay ends at the very tick a step starts joins that step.

A compat instance is driven by `ReferenceEventOrder` instead of its SimPy step loop: it replays
the reference's pushes and pops on a `TimestampHeap` and runs the instance's events in its
order, from one SimPy event per tick that has instance events. It is the one step driver that
is not a process: a process waits for one event at a time, and a request arriving before the
tick it waits for would have to interrupt it (docs/architecture.md). SimPy still orders everything
across instances and the gateway. The instance steps exactly as natively (the same batch
formation); it is idle from the start of a step that empties its batch, as the reference is,
but never leaves waiting requests stranded (Q2 stays fixed). docs/differences-from-blis.md,
"event ties".
"""

from __future__ import annotations

from typing import Any, cast

import simpy

from blis_simpy.core.clock import Environment
from blis_simpy.core.loop import Clock
from blis_simpy.core.request import Request
from blis_simpy.engine.step import Stepper

ARRIVAL, QUEUED, STEP, NO_OP = range(4)  # kinds of the reference's instance events


class TimestampHeap:
    """A binary min-heap on `time` with Go `container/heap`'s push (sift up from the new leaf)
    and pop (swap root and last, sift the new root down over the rest, remove the last).
    Only the timestamp is compared; a child replaces its parent only if strictly smaller,
    and sift-down prefers the right child only if it is strictly smaller than the left."""

    __slots__ = ("items",)

    def __init__(self) -> None:
        self.items: list[tuple[int, int, Any]] = []  # (time, kind, payload)

    def __len__(self) -> int:
        return len(self.items)

    def next_time(self) -> int:
        return self.items[0][0]

    def push(self, time: int, kind: int, payload: Any = None) -> None:
        h = self.items
        h.append((time, kind, payload))
        j = len(h) - 1
        while j > 0:
            i = (j - 1) // 2
            if not time < h[i][0]:
                break
            h[i], h[j] = h[j], h[i]
            j = i

    def pop(self) -> tuple[int, int, Any]:
        h = self.items
        n = len(h) - 1
        h[0], h[n] = h[n], h[0]
        i = 0
        while True:
            j = 2 * i + 1
            if j >= n:
                break
            right = j + 1
            if right < n and h[right][0] < h[j][0]:
                j = right
            if not h[j][0] < h[i][0]:
                break
            h[i], h[j] = h[j], h[i]
            i = j
        return h.pop()


class ReferenceEventOrder:
    """Runs one instance's events in the order of the reference's event heap."""

    def __init__(self, instance: Stepper, env: Environment) -> None:
        self.instance = instance
        self.env = env
        self.clock = Clock(env)
        self.heap = TimestampHeap()
        self.step_queued = False  # a Step event is in the heap
        self.pumps: set[int] = set()  # times at which a SimPy event will run the heap

    def arrive(self, req: Request) -> None:
        """A request routed to the instance: its Arrival event, now."""
        now = self.clock.now()
        self.heap.push(now, ARRIVAL, req)
        self._pump_at(now)

    def _pump_at(self, time: int, spent: simpy.Timeout | None = None) -> None:
        """A SimPy event at `time` that runs the heap (`spent`: the one that just did, reused).
        The clock's timeout, scheduled as `env.timeout` would be, without SimPy's interpreted
        Timeout.__init__ and schedule: one per tick with events, ~150K in a 10K run."""
        if time not in self.pumps:
            self.pumps.add(time)
            now = self.clock.now()
            self.clock.after(now, time - now, spent).callbacks.append(self._pump)

    def _pump(self, event: simpy.Event) -> None:
        """Run every heap event due now, in heap order (events pushed meanwhile included)."""
        now = self.clock.now()
        self.pumps.discard(now)
        heap, instance = self.heap, self.instance
        items = heap.items
        while items and items[0][0] == now:
            _, kind, req = heap.pop()
            instance.last_event = now
            if kind == STEP:
                self._step(now)
            elif kind == QUEUED:
                instance.join(req, now)
                if not self.step_queued:
                    self.step_queued = True
                    heap.push(now, STEP)
            elif kind == ARRIVAL:
                heap.push(now + instance.latency.queue_delay(req.input_len), QUEUED, req)
        if items:
            self._pump_at(items[0][0], cast(simpy.Timeout, event))

    def _step(self, now: int) -> None:
        """One step, then the events the reference pushes for it, in its order: preemptions
        or admissions (now), completions (at the step's end), the next step."""
        heap, instance = self.heap, self.instance
        self.step_queued = False
        before = (instance.preemptions, instance.admissions, instance.completions)
        duration = instance.step(now)
        instance.end_step(now)  # the reference applies a step's progress at its start
        if duration is None:
            # Nothing ran: a preemption emptied the batch or barred admissions this step.
            # Retry now while anything runs or waits, or the waiting would be stranded.
            if instance.running or instance.queue_depth:
                self.step_queued = True
                heap.push(now, STEP)
            return
        for _ in range(instance.preemptions - before[0] + instance.admissions - before[1]):
            heap.push(now, NO_OP)
        end = now + duration
        for _ in range(instance.completions - before[2]):
            heap.push(end, NO_OP)
        # The reference stops stepping when the batch empties (Q2); this keeps stepping while
        # anything waits, and is otherwise idle from this step's start.
        if instance.running or instance.queue_depth:
            self.step_queued = True
            heap.push(end, STEP)

    def clear(self) -> list[Request]:
        """The instance failed: its pending events go, and the requests they carried (in their
        queueing delay, or queued and not yet joined) are returned, in heap order."""
        lost = [req for _, kind, req in self.heap.items if kind in (ARRIVAL, QUEUED)]
        self.heap.items.clear()
        self.step_queued = False
        return lost
