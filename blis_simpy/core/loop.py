"""SimPy's event loop and its timeout, compiled: the same heap, the same order, less per event.

A long run processes millions of events (one per engine step). `Environment.step` and
`Timeout.__init__` are interpreted Python, which costs more per event than the work the event
stands for. `run_events` is `step` repeated, and a `Waker` schedules what `Timeout(env,
delay)` would, with the same (time, priority, id) key taken from the same counter, so events
run in exactly the order SimPy itself would run them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from heapq import heappop, heappush
from typing import cast

from simpy.core import StopSimulation
from simpy.events import NORMAL, URGENT, Event, EventCallback, EventPriority, Timeout

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


class Waker:
    """Schedules one caller's timeouts, each with the same callback: what `Timeout(env, delay)`
    with the callback on it would schedule, as SimPy schedules it. It holds the environment's
    event heap and id counter: read from the environment (an interpreted object) at each of
    the millions of steps of a long run, they cost more than the scheduling itself."""

    def __init__(self, env: Environment, callback: EventCallback) -> None:
        self.env = env
        self.queue: list[tuple[int, EventPriority, int, Event]] = env._queue  # type: ignore[assignment]
        self.ids: Iterator[int] = env._eid
        self.callback = callback

    def after(self, now: int, delay: int, spent: Timeout | None) -> Timeout:
        """A timeout `delay` (never negative) after `now`, the current time. `spent`, a
        timeout of this waker's whose callbacks have run (the one being handled), is reused
        rather than a new one made: nothing else holds it."""
        event = spent
        if event is None:
            event = cast(Timeout, Event.__new__(Timeout))
            event.env = self.env
            event._value = None
            event._ok = True
        event._delay = delay
        event.callbacks = [self.callback]
        heappush(self.queue, (now + delay, NORMAL, next(self.ids), event))
        return event


def start_now(env: Environment, callback: EventCallback) -> None:
    """Run `callback` at the current time as SimPy starts a process: from an urgent event,
    already succeeded (a callback chain in place of a process keeps the event order)."""
    start = Event(env)
    start._ok = True
    start._value = None
    start.callbacks.append(callback)
    env.schedule(start, URGENT)
