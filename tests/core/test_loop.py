"""The compiled event loop is SimPy's: the same events run in the same order at the same times
as `Environment.step` runs them, a reused step timeout is scheduled as a new `Timeout` would be,
and failures end the run as SimPy's do."""

from __future__ import annotations

import math
import sys
from typing import cast

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from blis_simpy.core.clock import Environment
from blis_simpy.core.errors import InvariantError
from blis_simpy.core.loop import Waker, run_events


def world(env: Environment, delays: list[list[int]], log: list[tuple[int, str]],
          reuse: bool) -> None:
    """Processes waiting out their delays, a chain of callback timeouts (reused when `reuse`,
    else SimPy's own `Timeout`) and a shared event they all touch, all logging what ran when."""
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
    chain = iter(delays[0] if delays else [])

    def tick(event: simpy.Event) -> None:
        log.append((env.now, "tick"))
        wait = next(chain, None)
        if wait is None:
            return
        if reuse:
            waker.after(env.now, wait, cast(simpy.Timeout, event))
        else:
            simpy.Timeout(env, wait).callbacks.append(tick)

    waker = Waker(env, tick)
    if reuse:
        waker.after(env.now, 0, None)
    else:
        simpy.Timeout(env, 0).callbacks.append(tick)


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
