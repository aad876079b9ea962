"""Every use of SimPy's internals, in one place: its event loop and timeouts, compiled.

A long run processes millions of events (one per engine step). `Environment.step` and
`Timeout.__init__` are interpreted Python, which costs more per event than the work the event
stands for. `run_events` is `step` repeated, and a `Clock` schedules what `Timeout(env,
delay)` would, with the same (time, priority, id) key taken from the same counter, so events
run in exactly the order SimPy itself would run them.

The rest of the package reads no private attribute of SimPy's objects: what it needs of them
(the current time without the property, whether an event would run next, what is left to
happen, an event at a priority of its own, a Store whose put never waits, a compiled
generator's process name) is a named function or class here. `tests/core/test_loop.py` runs
them side by side with SimPy's own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from heapq import heappop, heappush
from typing import Any, cast

import simpy
from simpy.core import StopSimulation
from simpy.events import NORMAL, Event, EventPriority, Timeout

from blis_simpy.core.clock import Environment
from blis_simpy.core.errors import InvariantError


def run_events(env: Environment, until: float, limit: int, checks: bool) -> int:
    """Process events in order while the next one is due by `until` (never one at infinity),
    at most `limit` of them; returns how many ran (fewer than `limit`: the horizon is reached
    or nothing is left).
    `checks` raises InvariantError if the clock would go back. Each event is handled as
    `Environment.step` handles it: its callbacks run in order, a StopSimulation puts the
    rest back, and a failed event that nobody defused ends the run with a copy of its error."""
    queue = env._queue
    count = 0
    while count < limit and queue:
        at = queue[0][0]
        if at >= until and (at > until or at == math.inf):
            break
        if checks and at < env._now:
            raise InvariantError(f"the clock went back from {env._now} to {at}")
        event = heappop(queue)[3]
        env._now = at  # type: ignore[assignment]  # an int, unless a user scheduled a float
        count += 1
        callbacks = event.callbacks
        event.callbacks = None  # type: ignore[assignment]  # as SimPy marks it processed
        for i, callback in enumerate(callbacks):
            try:
                callback(event)
            except StopSimulation:
                event.callbacks = callbacks[i + 1:]
                env.schedule(event, EventPriority(-1))
                raise
        if not event._ok and not hasattr(event, "_defused"):
            error = cast(BaseException, event._value)
            copy = type(error)(*error.args)
            copy.__cause__ = error
            raise copy
    return count


class Clock:
    """The time, and the timeouts of one process that waits for one at a time (an
    instance's step loop): what `env.timeout(delay)` would schedule, as SimPy schedules it.
    It holds the environment's event heap and id counter: read from the environment (an
    interpreted object) at each of the millions of steps of a long run, they cost more than
    the scheduling itself."""

    def __init__(self, env: Environment) -> None:
        self.env = env
        self.queue: list[tuple[int, EventPriority, int, Event]] = env._queue  # type: ignore[assignment]
        # What `after` calls, held here: compiled, a module global (or `next`) is a dictionary
        # lookup at every call, and `after` runs once per engine step.
        self.next_id: Callable[[], int] = env._eid.__next__
        self.push: Callable[[list[tuple[int, EventPriority, int, Event]],
                             tuple[int, EventPriority, int, Event]], None] = heappush
        self.normal: EventPriority = NORMAL

    def now(self) -> int:
        """The current time (the clock's attribute: `env.now` is an interpreted property)."""
        return self.env._now

    def after(self, now: int, delay: int, spent: Timeout | None) -> Timeout:
        """A timeout `delay` (never negative) after `now`, the current time. `spent`, a
        timeout of this clock's that has run (the one the caller was just woken by: nothing
        else holds it), is reused rather than a new one made; never pass one still pending
        (its waiter was interrupted)."""
        event = spent
        if event is None:
            event = cast(Timeout, Event.__new__(Timeout))
            event.env = self.env
            event._value = None
            event._ok = True
        event._delay = delay
        event.callbacks = []
        self.push(self.queue, (now + delay, self.normal, self.next_id(), event))
        return event


def fire_after(event: Event, delay: int, priority: EventPriority, value: Any = None) -> None:
    """Schedule a new `event` to succeed with `value` after `delay`, at `priority`: a
    timeout at any priority (SimPy's own Timeout is always NORMAL)."""
    event._ok = True
    event._value = value
    event.env.schedule(event, priority, delay)


def runs_next(env: Environment, priority: EventPriority) -> bool:
    """Whether an event scheduled now, with no delay and this priority, would be the very next
    to run: nothing else is due now at a priority that runs before it or with it (an equal
    one scheduled earlier). The event queue is SimPy's heap of (time, priority, id, event)."""
    queue = env._queue
    return not queue or queue[0][:2] > (env._now, priority)


def scheduled(env: Environment) -> list[Event]:
    """Every event scheduled to run, in no particular order."""
    return [entry[3] for entry in env._queue]


class Inbox(simpy.Store):
    """An unbounded SimPy Store holding `items` (a list its owner reads directly). A put can
    never wait, so it hands the item over at once instead of through a put event of its own;
    a process waiting on `get()` is woken exactly as by any Store."""

    def __init__(self, env: Environment, items: list[Any]) -> None:
        super().__init__(env)
        self.items = items

    def put(self, item: Any) -> None:  # type: ignore[override]
        self.items.append(item)
        if self.get_queue:
            self._trigger_get(None)


class NamedProcess(simpy.Process):
    """A process named explicitly: SimPy names a process after its generator's `__name__`,
    which a compiled (mypyc) generator does not have."""

    def __init__(self, env: Environment, generator: Generator[Event, Any, Any],
                 name: str) -> None:
        self.label = name
        super().__init__(env, generator)

    @property
    def name(self) -> str:
        return self.label
