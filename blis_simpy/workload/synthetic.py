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
from blis_simpy.core.request import NO_TOKENS, Request
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
    for req, parts in compat_drawn(spec, seed, horizon):
        req.tokens = np.concatenate(parts)
        yield req


def compat_drawn(spec: DistributionWorkload, seed: int, horizon: int | None
                 ) -> Iterator[tuple[Request, tuple[np.ndarray, ...]]]:
    """`compat_requests`' requests without their token arrays: each with the parts its
    sequence is made of, in order (the shared prefix if any, the prompt, the output: views
    of the generator's draws), for a caller that hashes many at once without copying each
    request's tokens into an array of its own first (`source.compat_hashed`)."""
    rng = GoRand(seed)
    gap = int(1 / (spec.rate_per_s / US_PER_S))
    prefix = rng.intn_array(VOCAB, spec.prefix_tokens)
    shared = len(prefix)
    t = 0
    for i in range(spec.num_requests):
        if horizon is not None and t >= horizon:
            return
        prompt = rng.intn_array(VOCAB, go_length(rng, spec.prompt))
        output = rng.intn_array(VOCAB, go_length(rng, spec.output))
        req = Request(i, t, NO_TOKENS, NO_TOKENS)
        req.input_len = shared + len(prompt)
        req.prefill_target = req.input_len
        req.output_len = len(output)
        req.max_tokens = max(req.output_len, 1)
        yield req, ((prefix, prompt, output) if shared else (prompt, output))
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
