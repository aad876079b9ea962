"""Drawing from the scenario's value distributions: vectorised (a batch per numpy call), with
the generator passed in, so streams stay independent and reproducible.

Two samplers share the draws: `sample_tokens` rounds half away from zero (Go's math.Round, as
the reference does) and never returns 0, because a request with no prompt or no output token
is not a request; `sample_seconds` only clamps at 0, because a duration can be empty.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass
from typing import Final

import numpy as np

from blis_simpy.config.distributions import (
    Constant,
    Distribution,
    Empirical,
    Exponential,
    Gaussian,
    LogNormal,
    ParetoLogNormal,
    Uniform,
    bins_table,
    lognormal_mu,
)
from blis_simpy.core.units import MAX_TOKENS


def draw(dist: Distribution, rng: np.random.Generator, n: int) -> np.ndarray:
    """n raw (unclamped, unrounded) float draws."""
    if isinstance(dist, Gaussian):
        return rng.normal(dist.mean, dist.stdev, n)
    if isinstance(dist, Constant):
        return np.full(n, float(dist.value))
    if isinstance(dist, Uniform):
        return rng.uniform(dist.low, dist.high, n)
    if isinstance(dist, Exponential):
        return rng.exponential(dist.mean, n)
    if isinstance(dist, LogNormal):
        return rng.lognormal(lognormal_mu(dist.mean, dist.sigma), dist.sigma, n)
    if isinstance(dist, ParetoLogNormal):
        return draw_pareto_lognormal(dist, rng, n)
    if isinstance(dist, Empirical):
        values, probs = bins_table(dist)
        return rng.choice(values, size=n, p=probs)
    raise TypeError(f"not a distribution: {dist!r}")


def draw_pareto_lognormal(dist: ParetoLogNormal, rng: np.random.Generator, n: int
                          ) -> np.ndarray:
    pick_pareto = rng.random(n) < dist.mix_weight
    # Classic Pareto = xm * (1 + Lomax); numpy's `pareto` is the Lomax form.
    pareto = dist.xm * (1.0 + rng.pareto(dist.alpha, n))
    body = rng.lognormal(dist.mu, dist.sigma, n)
    return np.where(pick_pareto, pareto, body)


def round_half_away(x: np.ndarray) -> np.ndarray:
    """Go's math.Round on an array (numpy's rint rounds halves to even). Exact: adding 0.5
    first would round 0.49999999999999994 up."""
    whole = np.trunc(x)
    return whole + np.copysign(np.abs(x - whole) >= 0.5, x)


def token_bounds(dist: Distribution) -> tuple[int, int]:
    """The integer range token counts are clamped to: [max(min, 1), max] within MAX_TOKENS."""
    lo = math.ceil(max(dist.min if dist.min is not None else 1.0, 1.0))
    hi = min(math.floor(dist.max), MAX_TOKENS) if dist.max is not None else MAX_TOKENS
    if hi < lo:
        raise ValueError(f"no token count >= 1 lies in [{dist.min}, {dist.max}]")
    return lo, hi


def sample_tokens(dist: Distribution, rng: np.random.Generator, n: int) -> np.ndarray:
    """n token counts (int64): draw, round half away from zero, clamp to [max(min, 1), max]."""
    lo, hi = token_bounds(dist)
    # Clip in float space first so huge draws cannot overflow int64, then round and re-clip
    # to the integer bounds (rounding may cross a fractional bound).
    values = round_half_away(np.clip(draw(dist, rng, n), lo, float(hi)))
    return np.clip(values, lo, hi).astype(np.int64)


def sample_seconds(dist: Distribution, rng: np.random.Generator, n: int) -> np.ndarray:
    """n durations in seconds (float64), clamped to [max(min, 0), max]."""
    return np.clip(draw(dist, rng, n), *seconds_bounds(dist))


def seconds_bounds(dist: Distribution) -> tuple[float, float]:
    lo = max(dist.min if dist.min is not None else 0.0, 0.0)
    return lo, dist.max if dist.max is not None else math.inf


def draw_one(dist: Distribution, rng: np.random.Generator) -> float:
    """`draw(dist, rng, 1)[0]`: numpy's scalar form of the same draw (one value is one call
    of the same generator function either way) where there is one, without the array."""
    if isinstance(dist, Gaussian):
        return float(rng.normal(dist.mean, dist.stdev))
    if isinstance(dist, Constant):
        return float(dist.value)
    if isinstance(dist, Uniform):
        return float(rng.uniform(dist.low, dist.high))
    if isinstance(dist, Exponential):
        return float(rng.exponential(dist.mean))
    if isinstance(dist, LogNormal):
        return float(rng.lognormal(lognormal_mu(dist.mean, dist.sigma), dist.sigma))
    return float(draw(dist, rng, 1)[0])


def one_token_count(dist: Distribution, rng: np.random.Generator) -> int:
    """`sample_tokens(dist, rng, 1)[0]` (the same draw, the same value) in scalar arithmetic:
    a source that draws one count at a time (tenants react to completions, so their draws
    cannot be made ahead) would otherwise pay for six numpy calls on one-element arrays."""
    lo, hi = token_bounds(dist)
    x = min(max(draw_one(dist, rng), lo), float(hi))
    whole = math.trunc(x)
    return min(max(whole + (x - whole >= 0.5), lo), hi)  # x >= lo >= 1: halves round up


def one_duration(dist: Distribution, rng: np.random.Generator) -> float:
    """`sample_seconds(dist, rng, 1)[0]` in scalar arithmetic (the same draw and value)."""
    lo, hi = seconds_bounds(dist)
    return min(max(draw_one(dist, rng), lo), hi)


@dataclass(frozen=True, slots=True)
class WeightedPick:
    """`rng.choice(len(weights), p=weights / weights.sum())` without its per-call checks: the
    cumulative table is built once, the same way numpy's Generator.choice builds it, and each
    pick consumes the same single `random()` draw and searches it the same way (right side)."""

    cdf: list[float]

    @classmethod
    def of(cls, weights: list[float]) -> WeightedPick:
        p = np.array(weights, dtype=float)
        cdf = (p / p.sum()).cumsum()
        cdf /= cdf[-1]
        return cls(cdf.tolist())

    def pick(self, rng: np.random.Generator) -> int:
        return bisect_right(self.cdf, rng.random())


class UniformIds:
    """`rng.integers(0, high, n)` call after call (the same values), for a generator that
    draws nothing else: token ids, one array per request. numpy draws each value by Lemire's
    method from the bit generator's 32-bit outputs (a 64-bit output split low half first, the
    high half kept for the next call, even the next `integers` call), rejecting the rare words
    whose low product is below a threshold; so the ids of successive calls are one stream of
    accepted words, and it is drawn here a block at a time. A call to `integers` spends ~3 µs
    in per-call checks (`np.prod` of the size), more than the draws of a typical prompt."""

    BLOCK: Final = 1 << 14  # 64-bit outputs drawn at a time

    def __init__(self, rng: np.random.Generator, high: int) -> None:
        if not 1 < high < 1 << 32:
            raise ValueError(f"token id range must be in (1, 2**32), got {high}")
        self.bits = rng.bit_generator
        self.high = high
        self.threshold = ((1 << 32) - high) % high  # numpy's (UINT32_MAX - rng) % (rng + 1)
        self.ready = np.zeros(0, dtype=np.int64)  # accepted values not handed out yet
        self.used = 0

    def take(self, n: int) -> np.ndarray:
        """The next n ids (a new array)."""
        while len(self.ready) - self.used < n:
            self._refill()
        start = self.used
        self.used = start + n
        return self.ready[start : start + n].copy()

    def _refill(self) -> None:
        words = self.bits.random_raw(self.BLOCK).view(np.uint32).astype(np.uint64)
        words *= np.uint64(self.high)
        accepted = (words & np.uint64(0xFFFFFFFF)) >= np.uint64(self.threshold)
        fresh = (words[accepted] >> np.uint64(32)).astype(np.int64)
        self.ready = np.concatenate((self.ready[self.used :], fresh))
        self.used = 0
