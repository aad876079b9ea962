"""The release of a known workload: each request handed to the gateway at its arrival time.

One SimPy process (`release`), a compiled generator: it hands over every request due now,
then waits until the next arrival time with cluster-arrival priority, ahead of instance events
at that time. A request is handed over `alone` when the next one is handed over later (the
gateway may then take its zero-latency stages at once: all of one time's arrivals still come
before any of their admissions).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from typing import cast

import simpy
from librt.vecs import vec
from mypy_extensions import i64

from blis_simpy.core.clock import Environment
from blis_simpy.core.loop import Clock
from blis_simpy.core.ordering import CLUSTER_ARRIVAL, StageEvent
from blis_simpy.core.request import NO_TOKENS, Request


def release(env: Environment, requests: Iterable[Request],
            deliver: Callable[[Request, bool], None]) -> Generator[simpy.Event, object, None]:
    """Hand over each request at its arrival time, in order (the requests are made as they
    are reached: a long workload is never all in memory)."""
    clock = Clock(env)  # the time without the interpreted `env.now` property
    ahead = iter(requests)
    req = next(ahead, None)
    while req is not None:
        now = clock.now()
        if req.arrival > now:
            yield StageEvent(env, req.arrival - now, CLUSTER_ARRIVAL)
            continue
        following = next(ahead, None)
        deliver(req, following is None or following.arrival > now)
        req = following



def rebuilt(index: list[int], arrival: list[int], input_len: list[int], output_len: list[int],
            counts: list[int], hashes: list[int], keys: object) -> list[Request]:
    """A synthetic workload's requests made again from their columns (`workload/producer.py`:
    drawn and hashed in another process): each request's index, arrival, prompt and output
    lengths, and its `counts[i]` block hashes, in order, from `hashes` (and their `keys`,
    `Request.keys`). The same requests as
    the synthetic sources make and `prehash.hash_parts` hashes.

    `keys` is a `vec[i64]` passed as an object: mypyc's entry point from interpreted code
    takes a vec argument's buffer and never gives it back, which kept every chunk's keys
    alive (a long streamed run grew ~0.4 KB a request). The cast here is released."""
    native = cast(vec[i64], keys)
    made: list[Request] = []
    lo = 0
    for i in range(len(index)):
        req = Request(index[i], arrival[i], NO_TOKENS, NO_TOKENS)
        n_in, n_out, n = input_len[i], output_len[i], counts[i]
        req.input_len = n_in
        req.prefill_target = n_in
        req.output_len = n_out
        req.max_tokens = max(n_out, 1)
        req.tokens = None
        req.hashes = hashes[lo : lo + n]
        req.keys = native[lo : lo + n]
        req.hashed = True
        lo += n
        made.append(req)
    return made
