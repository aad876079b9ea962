"""Correlated prompt and output lengths: a Gaussian copula (seed 001 §7, correlation structure).

Two standard normals with correlation rho are drawn; each is mapped through its own length
distribution's quantile function (the normal's CDF, then the inverse CDF), so each length keeps
exactly its configured distribution while their ranks correlate: Spearman's rank correlation
is (6/pi) asin(rho/2), whatever the two shapes. The rounding and clamping after the draw are
the uncorrelated draw's (`sampling.one_token_count`).
"""

from __future__ import annotations

import math

import numpy as np

from blis_simpy.config.distributions import (
    Constant,
    Distribution,
    Empirical,
    Exponential,
    Gaussian,
    LogNormal,
    Uniform,
    bins_table,
    lognormal_mu,
)
from blis_simpy.workload.sampling import token_bounds

SQRT2 = math.sqrt(2.0)


def normal_cdf(z: float) -> float:
    """The standard normal's CDF (math.erfc keeps its far tails exact)."""
    return 0.5 * math.erfc(-z / SQRT2)


def from_normal(dist: Distribution, z: float) -> float:
    """The value of `dist` at the quantile a standard normal `z` sits at (unrounded)."""
    if isinstance(dist, Gaussian):
        return dist.mean + dist.stdev * z
    if isinstance(dist, LogNormal):
        return math.exp(lognormal_mu(dist.mean, dist.sigma) + dist.sigma * z)
    if isinstance(dist, Constant):
        return float(dist.value)
    if isinstance(dist, Uniform):
        return dist.low + (dist.high - dist.low) * normal_cdf(z)
    if isinstance(dist, Exponential):
        upper = normal_cdf(-z)  # 1 - F, exact in the far tail
        return math.inf if upper <= 0 else -dist.mean * math.log(upper)
    if isinstance(dist, Empirical):
        values, probs = bins_table(dist)
        order = np.argsort(values, kind="stable")
        cumulative = np.cumsum(probs[order])
        at = int(np.searchsorted(cumulative, normal_cdf(z), side="right"))
        return float(values[order][min(at, len(values) - 1)])
    raise TypeError(f"{dist.type} has no quantile function for a correlated draw")


def token_count(dist: Distribution, x: float) -> int:
    """A raw value as a token count: clamped, rounded half away from zero, clamped again."""
    lo, hi = token_bounds(dist)
    x = min(max(x, lo), float(hi))
    whole = math.trunc(x)
    return min(max(whole + (x - whole >= 0.5), lo), hi)


def correlated_counts(prompt: Distribution, output: Distribution, rho: float,
                      rng: np.random.Generator) -> tuple[int, int]:
    """One (prompt, output) token-count pair whose normal scores correlate with `rho`."""
    z1 = float(rng.standard_normal())
    z2 = rho * z1 + math.sqrt(max(0.0, 1.0 - rho * rho)) * float(rng.standard_normal())
    return token_count(prompt, from_normal(prompt, z1)), token_count(output,
                                                                      from_normal(output, z2))
