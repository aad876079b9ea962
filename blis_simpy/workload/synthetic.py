"""Synthetic requests: gaussian prompt/output lengths, a shared prefix, poisson or constant gaps.

Two sources of randomness, one per mode:
* default: numpy streams per subsystem (`rng.streams`), poisson or constant arrivals;
* compat (`compat: blis`): the reference's exact draws from Go's math/rand seeded with the
  master seed (spec engine.md §6), constant spacing int64(1/(rate/1e6)) µs.
Requests are produced lazily, in arrival order, so a long run never holds every prompt at once.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from blis_simpy.config.workload import DistributionWorkload, LengthConfig
from blis_simpy.core.request import Request
from blis_simpy.core.units import US_PER_S, VOCAB
from blis_simpy.rng.gomath import GoRand
from blis_simpy.rng.streams import stream


def round_half_away(x: float) -> int:
    """Go's math.Round: halves round away from zero (Python's round() is banker's)."""
    whole = math.trunc(x)
    if abs(x - whole) >= 0.5:
        whole += 1 if x > 0 else -1
    return int(whole)


def go_length(rng: GoRand, spec: LengthConfig) -> int:
    if spec.min == spec.max:
        return spec.min
    value = rng.norm_float64() * spec.stdev + spec.mean
    return round_half_away(min(max(value, spec.min), spec.max))


def compat_requests(spec: DistributionWorkload, seed: int, horizon: int | None
                    ) -> Iterator[Request]:
    """The reference's generator, draw for draw."""
    rng = GoRand(seed)
    gap = int(1 / (spec.rate_per_s / US_PER_S))
    prefix = rng.intn_array(VOCAB, spec.prefix_tokens)
    t = 0
    for i in range(spec.num_requests):
        if horizon is not None and t >= horizon:
            return
        prompt = rng.intn_array(VOCAB, go_length(rng, spec.prompt))
        output = rng.intn_array(VOCAB, go_length(rng, spec.output))
        yield Request(i, t, np.concatenate((prefix, prompt)) if len(prefix) else prompt, output)
        t += gap


def numpy_length(rng: np.random.Generator, spec: LengthConfig) -> int:
    if spec.min == spec.max:
        return spec.min
    value = rng.normal(spec.mean, spec.stdev) if spec.stdev > 0 else spec.mean
    return round_half_away(min(max(value, spec.min), spec.max))


def native_requests(spec: DistributionWorkload, seed: int, horizon: int | None
                    ) -> Iterator[Request]:
    """Arrivals, lengths and token ids from independent numpy streams."""
    arrivals = stream(seed, "workload.arrivals")
    lengths = stream(seed, "workload.lengths")
    tokens = stream(seed, "workload.tokens")
    mean_gap = US_PER_S / spec.rate_per_s
    prefix = tokens.integers(0, VOCAB, spec.prefix_tokens)
    clock = 0.0
    for i in range(spec.num_requests):
        if spec.arrival == "poisson":
            clock += arrivals.exponential(mean_gap)
        elif i > 0:
            clock += mean_gap
        t = round(clock)
        if horizon is not None and t > horizon:
            return
        prompt = tokens.integers(0, VOCAB, numpy_length(lengths, spec.prompt))
        output = tokens.integers(0, VOCAB, numpy_length(lengths, spec.output))
        yield Request(i, t, np.concatenate((prefix, prompt)), output)
