"""The compiled event loop is SimPy's: the same events run in the same order at the same times
as `Environment.step` runs them, a reused step timeout is scheduled as a new `Timeout` would be,
and failures end the run as SimPy's do."""

from __future__ import annotations

import math
import sys

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from blis_simpy.core.clock import Environment
from blis_simpy.core.errors import InvariantError
from blis_simpy.core.loop import Clock, Inbox, fire_after, run_events, runs_next, scheduled


def world(env: Environment, delays: list[list[int]], log: list[tuple[int, str]],
          reuse: bool) -> None:
    """Processes waiting out their delays, one more waiting out a chain of timeouts (a
    Clock's, its spent timeout reused, when `reuse`; else SimPy's own `Timeout`) and a shared
    event they all touch, all logging what ran when."""
    shared = env.event()
    shared.callbacks.append(lambda e: log.append((env.now, "shared")))

    def proc(name: str, waits: list[int]):
        for wait in waits:
            yield env.timeout(wait)
            log.append((env.now, name))
            if not shared.triggered and env.now >= 5:
                shared.succeed()

    for i, waits in enumerate(delays):
        env.process(proc(f"p{i}", waits))
    clock = Clock(env)

    def ticks():
        timer = None
        log.append((env.now, "tick"))
        for wait in delays[0] if delays else []:
            if reuse:
                timer = clock.after(clock.now(), wait, timer)
                yield timer
            else:
                yield env.timeout(wait)
            log.append((env.now, "tick"))

    env.process(ticks())


DELAYS = st.lists(st.lists(st.integers(0, 6), max_size=6), max_size=4)


@settings(max_examples=200, deadline=None)
@given(DELAYS, st.sampled_from([math.inf, 0, 3, 7]), st.integers(1, 5))
def test_events_run_in_simpys_order_at_simpys_times(delays, until, limit):
    ours, theirs = Environment(), Environment()
    log_ours: list[tuple[int, str]] = []
    log_theirs: list[tuple[int, str]] = []
    world(ours, delays, log_ours, reuse=True)
    world(theirs, delays, log_theirs, reuse=False)
    count = 0
    while (ran := run_events(ours, until, limit, checks=True)) == limit:  # in pieces
        count += ran
    count += ran
    steps = 0
    while theirs.peek() <= until and theirs.peek() != math.inf:
        theirs.step()
        steps += 1
    assert log_ours == log_theirs
    assert count == steps and ours.now == theirs.now
    assert [entry[:3] for entry in ours._queue] == [entry[:3] for entry in theirs._queue]


def test_an_event_at_infinity_never_runs():
    env = Environment()
    env.timeout(3)
    env.timeout(math.inf)
    assert run_events(env, math.inf, sys.maxsize, checks=False) == 1
    assert env.now == 3 and len(env._queue) == 1


def test_a_failed_event_nobody_defused_ends_the_run_with_its_error():
    env = Environment()
    env.event().fail(KeyError("lost"))
    with pytest.raises(KeyError, match="lost") as caught:
        run_events(env, math.inf, sys.maxsize, checks=False)
    assert isinstance(caught.value.__cause__, KeyError)


def test_a_defused_failure_runs_on():
    env = Environment()
    failed = env.event()
    failed.fail(KeyError("lost"))
    failed.defused = True
    env.timeout(3)
    assert run_events(env, math.inf, sys.maxsize, checks=False) == 2
    assert env.now == 3


def test_the_clock_going_back_is_an_invariant_error_under_checks():
    env = Environment()
    env.timeout(5)
    run_events(env, math.inf, 1, checks=True)
    env._queue.append((2, 1, -1, env.event()))  # an entry in the past, as a bug would leave
    with pytest.raises(InvariantError, match="went back from 5 to 2"):
        run_events(env, math.inf, sys.maxsize, checks=True)


def test_an_event_fired_after_a_delay_at_its_priority():
    env = Environment()
    seen: list[str] = []
    late, early = env.event(), env.event()
    late.callbacks.append(lambda e: seen.append(f"late {e.value}"))
    early.callbacks.append(lambda e: seen.append(f"early {e.value}"))
    fire_after(late, 4, simpy.events.NORMAL, "a")
    fire_after(early, 4, simpy.events.URGENT, "b")
    assert set(scheduled(env)) == {late, early}
    assert runs_next(env, simpy.events.URGENT)  # nothing is due now
    env.run()
    assert seen == ["early b", "late a"] and env.now == 4
    assert scheduled(env) == []


def test_a_stage_runs_next_only_if_nothing_due_now_runs_before_or_with_it():
    env = Environment()
    assert runs_next(env, simpy.events.NORMAL)
    env.timeout(0)  # NORMAL, now
    assert runs_next(env, simpy.events.URGENT)  # an urgent one would run first
    assert not runs_next(env, simpy.events.NORMAL)  # an equal one scheduled earlier runs first


def test_an_inbox_put_wakes_a_waiting_get_with_the_item():
    env = Environment()
    items: list[str] = []
    inbox = Inbox(env, items)
    got: list[object] = []

    def waiter():
        got.append((yield inbox.get()))

    env.process(waiter())
    env.run()
    inbox.put("req")
    env.run()
    assert got == ["req"] and items == []
    inbox.put("next")
    assert items == ["next"]  # nobody waits: it stays for the owner to read
