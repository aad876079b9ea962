"""The release of a known workload: every request handed over at its arrival time (BC-1), in
order, flagged `alone` exactly when no other request arrives at that time, ahead of instance
events at the same time."""

from __future__ import annotations

import numpy as np
import simpy
from hypothesis import given
from hypothesis import strategies as st

from blis_simpy.core.clock import Environment
from blis_simpy.core.request import Request
from blis_simpy.workload.release import rebuilt, release


@given(st.lists(st.integers(0, 50), max_size=30))
def test_requests_are_handed_over_at_their_arrival_in_order(gaps):
    times = np.cumsum(gaps).tolist()
    requests = [Request(i, t, np.arange(3), np.arange(2)) for i, t in enumerate(times)]
    env = Environment()
    handed: list[tuple[int, int, bool]] = []
    env.process(release(env, requests,
                        lambda req, alone: handed.append((env.now, req.index, alone))))
    env.run()
    assert [(now, i) for now, i, _ in handed] == [(t, i) for i, t in enumerate(times)]
    assert [alone for *_, alone in handed] == [i == len(times) - 1 or times[i + 1] != t
                                               for i, t in enumerate(times)]


def test_arrivals_run_before_instance_events_at_the_same_time():
    env = Environment()
    seen: list[str] = []
    simpy.Timeout(env, 5).callbacks.append(lambda _: seen.append("instance"))
    env.process(release(env, [Request(0, 5, np.arange(3), np.arange(2))],
                        lambda req, alone: seen.append("arrival")))
    env.run()
    assert seen == ["arrival", "instance"]


def test_rebuilt_requests_keep_only_their_own_keys():
    """A chunk's keys are sliced per request; the chunk's vector is freed once the call
    returns (it was kept alive by every call: a streamed 1M run held ~400 MiB of them)."""
    import tracemalloc

    from blis_simpy.core.hashing import keys_of

    count, blocks = 500, 32
    chains = np.arange(count * blocks, dtype=np.uint64)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(40):
            made = rebuilt(list(range(count)), [0] * count, [512] * count, [8] * count,
                           [blocks] * count, chains.tolist(), keys_of(chains))
            del made
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < chains.nbytes, f"{grown:,} bytes still held after 40 chunks of {chains.nbytes:,}"
