"""Arrival processes and load profiles, as scenario data.

An arrival process says how requests are spaced (Poisson, gamma, Weibull, constant, periodic,
bursty, spiky) at a nominal rate; a load profile says how the load varies over the day (steps,
ramps, a diurnal sinusoid, spikes) as a multiplier m(t) >= 0 of that rate. How they are drawn
and combined (by a time change) is `blis_simpy.workload.arrivals`.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import Any, Literal

from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.schema import convert, join, spec

# --------------------------------------------------------------------------- processes


@dataclass(frozen=True, slots=True, kw_only=True)
class PoissonProcess:
    type: Literal["poisson"] = spec("poisson", help="exponential gaps (CV 1), memoryless")


@dataclass(frozen=True, slots=True, kw_only=True)
class GammaProcess:
    type: Literal["gamma"] = spec("gamma", help="gamma gaps with a chosen CV (> 1: bursty)")
    cv: float = spec(help="coefficient of variation of the gaps", gt=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class WeibullProcess:
    type: Literal["weibull"] = spec("weibull", help="Weibull gaps with a chosen CV")
    cv: float = spec(help="coefficient of variation of the gaps", ge=0.01, le=10.4)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConstantProcess:
    type: Literal["constant"] = spec(
        "constant", help="exactly one arrival every 1/rate s, the first at the start"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class PeriodicProcess:
    """One arrival per period slot [k/rate, (k+1)/rate): at the slot's centre, displaced by
    a uniform draw in ±jitter*period/2. Each arrival stays in its slot, so order and the
    count per slot are exact; jitter 0 is a constant process shifted by half a period."""

    type: Literal["periodic"] = spec("periodic", help="one arrival per period, jittered")
    jitter: float = spec(0.0, help="displacement range as a fraction of the period", ge=0, le=1)


@dataclass(frozen=True, slots=True, kw_only=True)
class BurstyProcess:
    type: Literal["bursty"] = spec("bursty", help="Pareto (heavy-tailed) gaps, mean 1/rate")
    pareto_alpha: float = spec(
        help="Pareto shape; the gap variance is infinite if <= 2", gt=1
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class SpikyProcess:
    """Poisson with rate b * spike_multiplier during [k*every, k*every + length) and b
    otherwise (windows in operational time, from 0). The base rate b is scaled down so the
    long-run mean rate is the configured rate: b = rate / (1 + (multiplier-1)*length/every).
    """

    type: Literal["spiky"] = spec("spiky", help="Poisson with periodic rate spikes")
    spike_multiplier: float = spec(help="rate inside a spike relative to outside", gt=0)
    spike_every_s: float = spec(help="time from one spike's start to the next", gt=0)
    spike_length_s: float = spec(help="length of each spike", gt=0)

    def validate(self, path: str) -> None:
        if self.spike_length_s > self.spike_every_s:
            raise ScenarioError(
                join(path, "spike_length_s"),
                f"{self.spike_length_s} is longer than spike_every_s {self.spike_every_s}",
            )

    def base_rate(self, rate_per_s: float) -> float:
        """Rate outside spikes; rate inside is base_rate * spike_multiplier."""
        share = self.spike_length_s / self.spike_every_s
        return rate_per_s / (1 + (self.spike_multiplier - 1) * share)


ArrivalProcess = (PoissonProcess | GammaProcess | WeibullProcess | ConstantProcess
                  | PeriodicProcess | BurstyProcess | SpikyProcess)


def parse_process(data: Any, path: str) -> ArrivalProcess:
    """Load one arrival process from parsed YAML (dispatching on `type`, default poisson)."""
    return convert(ArrivalProcess, data, path, {})


# --------------------------------------------------------------------------- profiles


@dataclass(frozen=True, slots=True, kw_only=True)
class ConstantProfile:
    type: Literal["constant"] = spec("constant", help="the nominal rate throughout")


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    at_s: float = spec(help="time the multiplier takes effect", ge=0)
    multiplier: float = spec(help="rate multiplier from at_s on", ge=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class StepProfile:
    type: Literal["step"] = spec("step", help="piecewise-constant multiplier; 1 before the first")
    steps: list[Step] = spec(help="changes of the multiplier, in time order", min_len=1)

    def validate(self, path: str) -> None:
        for i in range(1, len(self.steps)):
            if self.steps[i].at_s <= self.steps[i - 1].at_s:
                raise ScenarioError(join(join(join(path, "steps"), i), "at_s"),
                                    "steps must be in increasing time order")


@dataclass(frozen=True, slots=True, kw_only=True)
class RampProfile:
    type: Literal["ramp"] = spec("ramp", help="linear change of the multiplier")
    from_multiplier: float = spec(help="multiplier until start_s", ge=0)
    to_multiplier: float = spec(help="multiplier from end_s on", ge=0)
    start_s: float = spec(help="ramp start", ge=0)
    end_s: float = spec(help="ramp end", ge=0)

    def validate(self, path: str) -> None:
        if self.end_s <= self.start_s:
            raise ScenarioError(join(path, "end_s"), f"must be after start_s {self.start_s}")


@dataclass(frozen=True, slots=True, kw_only=True)
class DiurnalProfile:
    """m(t) = 1 + a*cos(2π(t - phase_s)/period_s), a = (R - 1)/(R + 1) for R = peak_to_trough:
    mean multiplier 1 over a period, max/min = R, peak at phase_s."""

    type: Literal["diurnal"] = spec("diurnal", help="sinusoidal daily cycle, mean multiplier 1")
    period_s: float = spec(86_400.0, help="length of one cycle", gt=0)
    peak_to_trough: float = spec(help="peak multiplier / trough multiplier", ge=1)
    phase_s: float = spec(0.0, help="time of a peak")

    @property
    def amplitude(self) -> float:
        return (self.peak_to_trough - 1) / (self.peak_to_trough + 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class SpikeSegment:
    start_s: float = spec(help="segment start", ge=0)
    end_s: float = spec(help="segment end (exclusive)", ge=0)
    multiplier: float = spec(help="rate multiplier inside the segment", ge=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class SpikeProfile:
    type: Literal["spike"] = spec("spike", help="multiplier 1 except in the given segments")
    segments: list[SpikeSegment] = spec(help="non-overlapping segments", min_len=1)

    def validate(self, path: str) -> None:
        where = join(path, "segments")
        for i, seg in enumerate(self.segments):
            if seg.end_s <= seg.start_s:
                raise ScenarioError(join(join(where, i), "end_s"),
                                    f"must be after start_s {seg.start_s}")
        order = sorted(range(len(self.segments)), key=lambda i: self.segments[i].start_s)
        for a, b in pairwise(order):
            if self.segments[b].start_s < self.segments[a].end_s:
                raise ScenarioError(join(join(where, b), "start_s"),
                                    f"overlaps segment {a}")


LoadProfile = ConstantProfile | StepProfile | RampProfile | DiurnalProfile | SpikeProfile


def parse_profile(data: Any, path: str) -> LoadProfile:
    """Load one load profile from parsed YAML (dispatching on `type`, default constant)."""
    return convert(LoadProfile, data, path, {})
