"""Arrival processes and load profiles.

An arrival process says how requests are spaced (Poisson, gamma, Weibull, constant, periodic,
bursty, spiky) at a nominal rate; a load profile says how the load varies over the day
(steps, ramps, a diurnal sinusoid, spikes) as a multiplier m(t) >= 0 of that rate.

They are combined by a time change, not by thinning: the process is drawn at `rate_per_s` in
*operational time* u, and each epoch u is mapped to real time t = M^{-1}(u), where
M(t) = ∫_0^t m(s) ds. Thinning (drop arrivals with probability 1 - m/m_max) is exact only for
Poisson and changes the spacing of every other process; the time change keeps each process
intact, so the expected number of arrivals in [a, b) is exactly rate * (M(b) - M(a)).
A non-Poisson process therefore keeps its CV in operational time: at a steady multiplier m
its gaps are the nominal ones divided by m, so the CV is unchanged.

Operational time is measured from 0 (with a constant profile it equals real time), so
time-based features of a process (the spiky process's spike windows) sit at fixed
operational times, whatever the `start_s` of a draw.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from blis_simpy.config.arrivals import (
    ArrivalProcess,
    BurstyProcess,
    ConstantProcess,
    ConstantProfile,
    DiurnalProfile,
    GammaProcess,
    LoadProfile,
    PeriodicProcess,
    PoissonProcess,
    RampProfile,
    SpikeProfile,
    SpikyProcess,
    StepProfile,
    WeibullProcess,
)

FIRST_CHUNK = 1024
MAX_CHUNK = 65_536


def weibull_cv(k: float) -> float:
    """CV of a Weibull with shape k: sqrt(Γ(1+2/k)/Γ(1+1/k)^2 - 1), in logs to avoid
    overflow for small k and with expm1 to keep precision for large k."""
    return math.sqrt(math.expm1(math.lgamma(1 + 2 / k) - 2 * math.lgamma(1 + 1 / k)))


def weibull_shape(cv: float) -> float:
    """The shape k with weibull_cv(k) == cv, by bisection on log k (CV falls as k grows)."""
    lo, hi = math.log(0.01), math.log(1000.0)
    for _ in range(100):
        mid = (lo + hi) / 2
        if weibull_cv(math.exp(mid)) > cv:
            lo = mid
        else:
            hi = mid
    return math.exp((lo + hi) / 2)


def renewal_gaps(process: ArrivalProcess, rate: float, rng: np.random.Generator, n: int
                 ) -> np.ndarray:
    """n independent gaps with mean 1/rate."""
    if isinstance(process, PoissonProcess):
        return rng.exponential(1 / rate, n)
    if isinstance(process, GammaProcess):
        shape = 1 / process.cv**2
        return rng.gamma(shape, 1 / (rate * shape), n)
    if isinstance(process, WeibullProcess):
        k = weibull_shape(process.cv)
        return rng.weibull(k, n) / (rate * math.exp(math.lgamma(1 + 1 / k)))
    if isinstance(process, BurstyProcess):
        alpha = process.pareto_alpha
        xm = (alpha - 1) / (alpha * rate)
        return xm * (1.0 + rng.pareto(alpha, n))
    raise TypeError(f"not a renewal process: {process!r}")


def chunk_sizes(limit: int | None) -> Iterator[int]:
    size = FIRST_CHUNK if limit is None else max(1, min(limit, FIRST_CHUNK))
    while True:
        yield size
        size = min(size * 2, MAX_CHUNK)


def operational_epochs(process: ArrivalProcess, rate: float, rng: np.random.Generator,
                       u0: float, limit: int | None) -> Iterator[np.ndarray]:
    """Increasing arrival epochs in operational time, from u0 on, in growing chunks."""
    sizes = chunk_sizes(limit)
    if isinstance(process, ConstantProcess | PeriodicProcess):
        yield from lattice_epochs(process, rate, rng, u0, sizes)
    elif isinstance(process, SpikyProcess):
        yield from spiky_epochs(process, rate, rng, u0, sizes)
    else:
        last = u0
        for n in sizes:
            epochs = last + np.cumsum(renewal_gaps(process, rate, rng, n))
            last = float(epochs[-1])
            yield epochs


def lattice_epochs(process: ConstantProcess | PeriodicProcess, rate: float,
                   rng: np.random.Generator, u0: float, sizes: Iterator[int]
                   ) -> Iterator[np.ndarray]:
    """u0 + k/rate (constant) or u0 + (k + 1/2 + jitter*U(-1/2, 1/2))/rate (periodic),
    computed from the integer k rather than accumulated, so there is no drift."""
    first = 0
    for n in sizes:
        k = np.arange(first, first + n, dtype=np.float64)
        if isinstance(process, PeriodicProcess):
            k += 0.5 + process.jitter * (rng.random(n) - 0.5)
        first += n
        yield u0 + k / rate


def spiky_epochs(process: SpikyProcess, rate: float, rng: np.random.Generator, u0: float,
                 sizes: Iterator[int]) -> Iterator[np.ndarray]:
    """Inhomogeneous Poisson by its own time change: unit-rate epochs in the integrated
    intensity Λ, mapped back through the closed-form Λ^{-1} (piecewise linear)."""
    base = process.base_rate(rate)
    every, length, mult = process.spike_every_s, process.spike_length_s, process.spike_multiplier
    cycle = every + (mult - 1) * length  # Λ/base over one period

    def big_lambda(u: float) -> float:
        k, r = divmod(u, every)
        return base * (k * cycle + mult * min(r, length) + max(r - length, 0.0))

    def inverse(y: np.ndarray) -> np.ndarray:
        k, r = np.divmod(y / base, cycle)
        inside = r < mult * length
        return k * every + np.where(inside, r / mult, length + (r - mult * length))

    last = big_lambda(u0)
    for n in sizes:
        levels = last + np.cumsum(rng.exponential(1.0, n))
        last = float(levels[-1])
        yield np.maximum(inverse(levels), u0)


class TimeChange(Protocol):
    """m(t), M(t) = ∫_0^t m and M^{-1}(u) = inf{t >= 0 : M(t) >= u} (inf if never)."""

    def multiplier(self, t: np.ndarray) -> np.ndarray: ...
    def cumulative(self, t: np.ndarray) -> np.ndarray: ...
    def inverse(self, u: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True, slots=True)
class Piecewise:
    """Piecewise-linear m(t) for t >= 0: on [knots[i], knots[i+1]) m = level[i] + slope[i]*dt;
    the last piece runs to infinity with slope 0. `areas[i]` = M(knots[i])."""

    knots: np.ndarray
    level: np.ndarray
    slope: np.ndarray
    areas: np.ndarray

    @classmethod
    def build(cls, knots: Sequence[float], level: Sequence[float], slope: Sequence[float]
              ) -> Piecewise:
        t, m, s = (np.asarray(x, dtype=np.float64) for x in (knots, level, slope))
        width = np.diff(t)
        pieces = m[:-1] * width + 0.5 * s[:-1] * width**2
        return cls(t, m, s, np.concatenate(([0.0], np.cumsum(pieces))))

    def piece(self, t: np.ndarray) -> np.ndarray:
        return np.maximum(np.searchsorted(self.knots, t, side="right") - 1, 0)

    def multiplier(self, t: np.ndarray) -> np.ndarray:
        i = self.piece(t)
        return self.level[i] + self.slope[i] * (t - self.knots[i])

    def cumulative(self, t: np.ndarray) -> np.ndarray:
        t = np.maximum(t, 0.0)
        i = self.piece(t)
        dt = t - self.knots[i]
        return self.areas[i] + self.level[i] * dt + 0.5 * self.slope[i] * dt**2

    def inverse(self, u: np.ndarray) -> np.ndarray:
        u = np.asarray(u, dtype=np.float64)
        # First piece whose end area reaches u: the earliest t with M(t) >= u.
        i = np.clip(np.searchsorted(self.areas, u, side="left") - 1, 0, len(self.knots) - 1)
        d = np.maximum(u - self.areas[i], 0.0)
        m, s = self.level[i], self.slope[i]
        root = np.sqrt(np.maximum(m * m + 2 * s * d, 0.0))
        # Stable root of s/2 x² + m x = d; m = s = 0 only on a flat last piece: never (inf).
        with np.errstate(divide="ignore", invalid="ignore"):
            dt = np.where(d > 0, 2 * d / (m + root), 0.0)
        return self.knots[i] + dt


@dataclass(frozen=True, slots=True)
class Diurnal:
    """Closed-form M for the sinusoid, inverted by safeguarded Newton (m >= 1 - a > 0)."""

    period: float
    amplitude: float
    phase: float

    def angle(self, t: np.ndarray | float) -> np.ndarray:
        return 2 * math.pi * (np.asarray(t, dtype=np.float64) - self.phase) / self.period

    def multiplier(self, t: np.ndarray) -> np.ndarray:
        return 1 + self.amplitude * np.cos(self.angle(t))

    def cumulative(self, t: np.ndarray) -> np.ndarray:
        scale = self.amplitude * self.period / (2 * math.pi)
        return np.asarray(t) + scale * (np.sin(self.angle(t)) - np.sin(self.angle(0.0)))

    def inverse(self, u: np.ndarray) -> np.ndarray:
        u = np.asarray(u, dtype=np.float64)
        # |M(t) - t| <= a*period/π, which brackets the root.
        reach = self.amplitude * self.period / math.pi
        lo, hi, t = u - reach, u + reach, u.copy()
        # M(t) is only known to a few ulps; once within that, t is as good as it gets (this
        # matters near a deep trough, where m is tiny and Newton steps are rounding noise).
        noise = 4 * np.spacing(np.abs(u) + reach)
        for _ in range(100):
            f = self.cumulative(t) - u
            lo, hi = np.where(f < 0, t, lo), np.where(f < 0, hi, t)
            guess = t - f / self.multiplier(t)
            bad = (guess < lo) | (guess > hi)
            new = np.where(np.abs(f) <= noise, t, np.where(bad, (lo + hi) / 2, guess))
            done = np.abs(new - t) <= np.maximum(1e-10, 8 * np.spacing(np.abs(t)))
            t = new
            if done.all():
                break
        return t


def time_change(profile: LoadProfile) -> TimeChange:
    """The profile as m, M and M^{-1} (vectorised)."""
    if isinstance(profile, ConstantProfile):
        return Piecewise.build([0.0], [1.0], [0.0])
    if isinstance(profile, StepProfile):
        knots = [0.0] + [s.at_s for s in profile.steps]
        return Piecewise.build(knots, [1.0] + [s.multiplier for s in profile.steps],
                               [0.0] * len(knots))
    if isinstance(profile, RampProfile):
        return ramp_pieces(profile)
    if isinstance(profile, DiurnalProfile):
        return Diurnal(profile.period_s, profile.amplitude, profile.phase_s)
    if isinstance(profile, SpikeProfile):
        return spike_pieces(profile)
    raise TypeError(f"not a load profile: {profile!r}")


def ramp_pieces(profile: RampProfile) -> Piecewise:
    a, b = profile.from_multiplier, profile.to_multiplier
    slope = (b - a) / (profile.end_s - profile.start_s)
    return Piecewise.build([0.0, profile.start_s, profile.end_s], [a, a, b], [0.0, slope, 0.0])


def spike_pieces(profile: SpikeProfile) -> Piecewise:
    knots, level = [0.0], [1.0]
    for seg in sorted(profile.segments, key=lambda s: s.start_s):
        knots += [seg.start_s, seg.end_s]
        level += [seg.multiplier, 1.0]
    return Piecewise.build(knots, level, [0.0] * len(knots))


# --------------------------------------------------------------------------- arrivals


def arrival_times(process: ArrivalProcess, rate_per_s: float, profile: LoadProfile,
                  rng: np.random.Generator, start_s: float, end_s: float,
                  limit: int | None = None) -> Iterator[float]:
    """Increasing arrival times (s) in [start_s, end_s), at most `limit` of them, lazily.

    The process runs at `rate_per_s` in operational time from M(start_s) and is mapped to
    real time through the profile (see the module docstring). Deterministic given `rng`.
    """
    if not rate_per_s > 0:
        raise ValueError(f"rate_per_s must be > 0, got {rate_per_s}")
    if start_s < 0:
        raise ValueError(f"start_s must be >= 0, got {start_s}")
    if (limit is not None and limit <= 0) or end_s <= start_s:
        return
    change = time_change(profile)
    u0 = float(change.cumulative(np.array(start_s)))
    count = 0
    for epochs in operational_epochs(process, rate_per_s, rng, u0, limit):
        times = np.maximum(change.inverse(epochs), start_s)
        stop = int(np.searchsorted(times, end_s, side="left"))
        if limit is not None:
            stop = min(stop, limit - count)
        yield from times[:stop].tolist()
        count += stop
        if stop < len(times):
            return
