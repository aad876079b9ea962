"""Value distributions for token counts and durations, as scenario data.

One frozen dataclass per shape, tagged by `type` so a scenario picks one by name. Every shape
has optional `min`/`max` bounds applied after the draw. Drawing from them is the workload's job
(`blis_simpy.workload.sampling`); here they are only described and validated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.schema import convert, join, spec

MIN_HELP = "smallest value returned (token counts are never below 1, durations never below 0)"
MAX_HELP = "largest value returned; null: unbounded"


def check_bounds(lo: float | None, hi: float | None, path: str) -> None:
    if lo is not None and hi is not None and lo > hi:
        raise ScenarioError(join(path, "min"), f"{lo} is above max {hi}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Gaussian:
    type: Literal["gaussian"] = spec("gaussian", help="normal draw, clamped to [min, max]")
    mean: float = spec(help="mean of the normal draw (before clamping)")
    stdev: float = spec(help="standard deviation of the normal draw", ge=0)
    min: float | None = spec(None, help=MIN_HELP)
    max: float | None = spec(None, help=MAX_HELP)

    def validate(self, path: str) -> None:
        check_bounds(self.min, self.max, path)


@dataclass(frozen=True, slots=True, kw_only=True)
class Constant:
    type: Literal["constant"] = spec("constant", help="always the same value")
    value: float = spec(help="the value")
    min: float | None = spec(None, help=MIN_HELP)
    max: float | None = spec(None, help=MAX_HELP)

    def validate(self, path: str) -> None:
        check_bounds(self.min, self.max, path)


@dataclass(frozen=True, slots=True, kw_only=True)
class Uniform:
    type: Literal["uniform"] = spec("uniform", help="uniform on [low, high)")
    low: float = spec(help="lower end")
    high: float = spec(help="upper end")
    min: float | None = spec(None, help=MIN_HELP)
    max: float | None = spec(None, help=MAX_HELP)

    def validate(self, path: str) -> None:
        if self.low > self.high:
            raise ScenarioError(join(path, "low"), f"{self.low} is above high {self.high}")
        check_bounds(self.min, self.max, path)


@dataclass(frozen=True, slots=True, kw_only=True)
class Exponential:
    type: Literal["exponential"] = spec("exponential", help="exponential (memoryless) draw")
    mean: float = spec(help="mean of the draw", gt=0)
    min: float | None = spec(None, help=MIN_HELP)
    max: float | None = spec(None, help=MAX_HELP)

    def validate(self, path: str) -> None:
        check_bounds(self.min, self.max, path)


@dataclass(frozen=True, slots=True, kw_only=True)
class LogNormal:
    """Set by its mean (what users know) and the log-space sigma (the skew):
    mu = ln(mean) - sigma^2/2, so E[X] = exp(mu + sigma^2/2) = mean."""

    type: Literal["lognormal"] = spec("lognormal", help="log-normal draw, set by its mean")
    mean: float = spec(help="mean of the draw (not of its log)", gt=0)
    sigma: float = spec(help="standard deviation of the log of the draw", ge=0)
    min: float | None = spec(None, help=MIN_HELP)
    max: float | None = spec(None, help=MAX_HELP)

    def validate(self, path: str) -> None:
        check_bounds(self.min, self.max, path)


@dataclass(frozen=True, slots=True, kw_only=True)
class ParetoLogNormal:
    """The reference's ServeGen mixture: a heavy Pareto tail over a log-normal body."""

    type: Literal["pareto-lognormal"] = spec(
        "pareto-lognormal", help="with probability mix_weight Pareto(xm, alpha), else lognormal"
    )
    alpha: float = spec(help="Pareto shape (tail index; the mean is infinite if <= 1)", gt=0)
    xm: float = spec(help="Pareto scale: its smallest value", gt=0)
    mu: float = spec(help="log-normal: mean of the log")
    sigma: float = spec(help="log-normal: standard deviation of the log", ge=0)
    mix_weight: float = spec(help="probability of a Pareto draw", ge=0, le=1)
    min: float | None = spec(None, help=MIN_HELP)
    max: float | None = spec(None, help=MAX_HELP)

    def validate(self, path: str) -> None:
        check_bounds(self.min, self.max, path)


@dataclass(frozen=True, slots=True, kw_only=True)
class Empirical:
    """A measured histogram (`bins`: value -> weight) or a list of observations (`samples`,
    resampled uniformly). Give exactly one."""

    type: Literal["empirical"] = spec("empirical", help="values drawn from data")
    bins: dict[Any, float] | None = spec(None, help="value -> weight (weights >= 0, normalised)")
    samples: list[float] | None = spec(None, help="observed values, each equally likely")
    min: float | None = spec(None, help=MIN_HELP)
    max: float | None = spec(None, help=MAX_HELP)

    def validate(self, path: str) -> None:
        if (self.bins is None) == (self.samples is None):
            raise ScenarioError(join(path, "bins"), "give exactly one of bins and samples")
        if self.samples is not None and not self.samples:
            raise ScenarioError(join(path, "samples"), "needs at least one value")
        if self.bins is not None:
            check_bins(self.bins, join(path, "bins"))
        check_bounds(self.min, self.max, path)


def check_bins(bins: dict[Any, float], path: str) -> None:
    if not bins:
        raise ScenarioError(path, "needs at least one bin")
    for key, weight in bins.items():
        where = join(path, str(key))
        if not is_finite_number(number_or_none(key)):
            raise ScenarioError(where, f"bin value {key!r} is not a finite number")
        if not is_finite_number(weight) or weight < 0:
            raise ScenarioError(where, f"weight must be a finite number >= 0, got {weight!r}")
    if not any(w > 0 for w in bins.values()):
        raise ScenarioError(path, "at least one weight must be > 0")


def number_or_none(value: Any) -> float | None:
    """YAML mapping keys arrive as strings from the loader; accept numbers or numeric text."""
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def is_finite_number(value: Any) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))


Distribution = Gaussian | Constant | Uniform | Exponential | LogNormal | ParetoLogNormal | Empirical


def parse_distribution(data: Any, path: str) -> Distribution:
    """Load one distribution from parsed YAML (dispatching on `type`, default gaussian)."""
    return convert(Distribution, data, path, {})



def bins_table(dist: Empirical) -> tuple[np.ndarray, np.ndarray]:
    """(values, probabilities) of an empirical distribution, zero-weight bins dropped."""
    if dist.samples is not None:
        values = np.asarray(dist.samples, dtype=np.float64)
        return values, np.full(len(values), 1 / len(values))
    assert dist.bins is not None
    pairs = [(float(k), float(w)) for k, w in dist.bins.items() if w > 0]
    values = np.array([v for v, _ in pairs])
    weights = np.array([w for _, w in pairs])
    return values, weights / weights.sum()


def lognormal_mu(mean: float, sigma: float) -> float:
    return math.log(mean) - sigma * sigma / 2


def mean_of(dist: Distribution) -> float:
    """The configured mean, before rounding and clamping (inf for a Pareto tail alpha <= 1)."""
    if isinstance(dist, Gaussian | Exponential | LogNormal):
        return float(dist.mean)
    if isinstance(dist, Constant):
        return float(dist.value)
    if isinstance(dist, Uniform):
        return (dist.low + dist.high) / 2
    if isinstance(dist, ParetoLogNormal):
        tail = dist.alpha * dist.xm / (dist.alpha - 1) if dist.alpha > 1 else math.inf
        body = math.exp(dist.mu + dist.sigma**2 / 2)
        if dist.mix_weight == 0:
            return body
        return dist.mix_weight * tail + (1 - dist.mix_weight) * body
    if isinstance(dist, Empirical):
        values, probs = bins_table(dist)
        return float(values @ probs)
    raise TypeError(f"not a distribution: {dist!r}")
