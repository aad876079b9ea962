"""Arrival processes and load profiles: rates, CVs, exact time change, validation.

Tolerances are 5 standard errors of each statistic, fixed seeds make the tests deterministic.
* Mean gap of n independent gaps with CV c: relative SE c/sqrt(n).
* Sample CV (delta method on ln s - ln mean): Var(ln CV) = ((kurtosis-1)/4 + c^2 - skew*c)/n,
  from the gap distribution's first four moments (closed form for gamma and Weibull).
* Poisson counts: SE sqrt(expected).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

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
    SpikeSegment,
    SpikyProcess,
    Step,
    StepProfile,
    WeibullProcess,
    parse_process,
    parse_profile,
)
from blis_simpy.core.errors import ScenarioError
from blis_simpy.workload.arrivals import arrival_times, time_change, weibull_cv, weibull_shape

RATE = 100.0
N = 200_000


def arrivals(process: ArrivalProcess, profile: LoadProfile | None = None, *, rate: float = RATE,
             start: float = 0.0, end: float = math.inf, limit: int | None = N,
             seed: int = 11) -> np.ndarray:
    profile = profile or ConstantProfile()
    rng = np.random.default_rng(seed)
    return np.fromiter(arrival_times(process, rate, profile, rng, start, end, limit), float)


def cv_rel_se(raw: list[float], n: int) -> float:
    """Relative SE of the sample CV from raw moments E[X], E[X^2], E[X^3], E[X^4]."""
    m1, m2, m3, m4 = raw
    var = m2 - m1**2
    c = math.sqrt(var) / m1
    skew = (m3 - 3 * m1 * m2 + 2 * m1**3) / var**1.5
    kurt = (m4 - 4 * m1 * m3 + 6 * m1**2 * m2 - 3 * m1**4) / var**2
    return math.sqrt(((kurt - 1) / 4 + c * c - skew * c) / n)


def gamma_moments(cv: float) -> list[float]:
    k = 1 / cv**2
    return [math.exp(math.lgamma(k + r) - math.lgamma(k) - r * math.log(k)) for r in range(1, 5)]


def weibull_moments(cv: float) -> list[float]:
    k = weibull_shape(cv)
    return [math.exp(math.lgamma(1 + r / k)) for r in range(1, 5)]


def assert_gaps(times: np.ndarray, rate: float, cv: float, moments: list[float]) -> None:
    gaps = np.diff(times)
    n = len(gaps)
    mean_tol = 5 * cv / math.sqrt(n)
    assert abs(gaps.mean() * rate - 1) < mean_tol, (gaps.mean() * rate, mean_tol)
    cv_tol = 5 * cv_rel_se(moments, n)
    measured = gaps.std() / gaps.mean()
    assert abs(measured / cv - 1) < cv_tol, (measured, cv, cv_tol)


def test_poisson_rate_and_cv_one():
    """Exponential gaps: CV SE 1/sqrt(n) -> 1.1% tolerance on 200k gaps."""
    times = arrivals(PoissonProcess())
    assert len(times) == N and np.all(np.diff(times) > 0)
    assert_gaps(times, RATE, 1.0, gamma_moments(1.0))


def test_gamma_cv_three():
    """Shape 1/9: CV SE sqrt(5/n) -> 2.5% tolerance."""
    assert_gaps(arrivals(GammaProcess(cv=3)), RATE, 3.0, gamma_moments(3.0))


@pytest.mark.parametrize("cv", [0.5, 2.0])
def test_weibull_cv(cv: float):
    """Shape from bisection on the CV; tolerance from the Weibull's own moments."""
    assert weibull_cv(weibull_shape(cv)) == pytest.approx(cv, rel=1e-12)
    assert_gaps(arrivals(WeibullProcess(cv=cv)), RATE, cv, weibull_moments(cv))


def test_weibull_shape_covers_the_valid_range():
    for cv in (0.01, 1.0, 10.4):
        assert weibull_cv(weibull_shape(cv)) == pytest.approx(cv, rel=1e-9)
    assert weibull_shape(1.0) == pytest.approx(1.0, rel=1e-9)  # exponential


def test_constant_is_an_exact_lattice():
    times = arrivals(ConstantProcess(), start=5.0, end=105.0, limit=None)
    assert len(times) == 10_000
    assert times[0] == 5.0
    assert np.allclose(times, 5.0 + np.arange(10_000) / RATE, rtol=0, atol=1e-9)


def test_periodic_jitter_keeps_order_and_rate():
    """Each arrival stays inside its slot [k, k+1)/rate, so order and the count are exact;
    gap CV is jitter/sqrt(6) (difference of two uniforms). Its SE, with the lag-1
    correlation of the gaps, is under 0.003 on 200k gaps: 2% tolerance is > 5 SE."""
    jitter = 0.8
    times = arrivals(PeriodicProcess(jitter=jitter), start=0.0, end=N / RATE, limit=None)
    assert len(times) == N
    assert np.all(np.diff(times) > 0)
    assert np.array_equal(np.floor(times * RATE), np.arange(N))
    gaps = np.diff(times)
    assert abs(gaps.std() / gaps.mean() / (jitter / math.sqrt(6)) - 1) < 0.02


def test_bursty_pareto_mean_gap():
    """alpha 2.5: gap CV 1/sqrt(alpha(alpha-2)) = 0.894, smallest gap (alpha-1)/(alpha*rate).
    The variance is finite, so the mean gap's SE is CV/sqrt(n): 1% tolerance."""
    alpha = 2.5
    gaps = np.diff(arrivals(BurstyProcess(pareto_alpha=alpha)))
    cv = 1 / math.sqrt(alpha * (alpha - 2))
    assert abs(gaps.mean() * RATE - 1) < 5 * cv / math.sqrt(len(gaps))
    assert gaps.min() >= (alpha - 1) / (alpha * RATE) * (1 - 1e-9)


def test_spiky_long_run_and_in_spike_rates():
    """Multiplier 5 for 1 s in every 10 s: base rate 100/1.4, in-spike rate 5x that.
    Counts are Poisson: 5 SE is 5*sqrt(count)."""
    process = SpikyProcess(spike_multiplier=5, spike_every_s=10, spike_length_s=1)
    horizon = 2000.0
    times = arrivals(process, end=horizon, limit=None)
    base = process.base_rate(RATE)
    assert base == pytest.approx(RATE / 1.4)
    assert abs(len(times) - RATE * horizon) < 5 * math.sqrt(RATE * horizon)
    spike = (times % 10) < 1
    in_spike = 5 * base * horizon / 10
    assert abs(spike.sum() - in_spike) < 5 * math.sqrt(in_spike)
    outside = base * horizon * 0.9
    assert abs((~spike).sum() - outside) < 5 * math.sqrt(outside)


def test_window_start_end_and_limit():
    times = arrivals(PoissonProcess(), start=3.0, end=7.0, limit=None)
    assert times.min() >= 3.0 and times.max() < 7.0
    assert len(arrivals(PoissonProcess(), start=3.0, end=1e9, limit=17)) == 17
    assert len(arrivals(PoissonProcess(), start=3.0, end=3.0)) == 0
    assert np.array_equal(arrivals(GammaProcess(cv=2), seed=5, limit=5000),
                          arrivals(GammaProcess(cv=2), seed=5, limit=5000))


PROFILES: dict[str, LoadProfile] = {
    "step": StepProfile(steps=[Step(at_s=100, multiplier=2), Step(at_s=200, multiplier=0.5),
                               Step(at_s=300, multiplier=0)]),
    "ramp": RampProfile(from_multiplier=0.5, to_multiplier=3, start_s=50, end_s=250),
    "diurnal": DiurnalProfile(period_s=100, peak_to_trough=4, phase_s=20),
    "spike": SpikeProfile(segments=[SpikeSegment(start_s=100, end_s=150, multiplier=0),
                                    SpikeSegment(start_s=50, end_s=60, multiplier=10)]),
}
WINDOWS = [(0, 50), (50, 60), (60, 100), (100, 175), (175, 250), (250, 300), (300, 400)]


@pytest.mark.parametrize("name", PROFILES)
def test_profile_counts_match_the_integral(name: str):
    """Poisson at 500/s: the count in [a, b) is Poisson with mean 500*(M(b) - M(a))."""
    profile = PROFILES[name]
    change = time_change(profile)
    times = arrivals(PoissonProcess(), profile, rate=500, end=400, limit=None)
    for a, b in WINDOWS:
        expected = 500 * float(change.cumulative(np.array(b)) - change.cumulative(np.array(a)))
        count = int(((times >= a) & (times < b)).sum())
        assert abs(count - expected) <= 5 * math.sqrt(expected), (a, b, count, expected)


@pytest.mark.parametrize("name", PROFILES)
def test_constant_process_under_a_profile_is_exact(name: str):
    """No randomness: the k-th arrival is at M^{-1}(k/rate), so every window's count is
    within one of rate*(M(b) - M(a))."""
    change = time_change(PROFILES[name])
    times = arrivals(ConstantProcess(), PROFILES[name], rate=50, end=400, limit=None)
    for a, b in WINDOWS:
        expected = 50 * float(change.cumulative(np.array(b)) - change.cumulative(np.array(a)))
        assert abs(((times >= a) & (times < b)).sum() - expected) <= 1


@pytest.mark.parametrize("name", PROFILES)
def test_inverse_of_cumulative_is_identity(name: str):
    """M^{-1}(M(t)) == t to 1e-9 wherever m > 0 around t (on a flat stretch M^{-1} returns
    its earliest time); M(M^{-1}(u)) == u everywhere; M matches the integral of m."""
    change = time_change(PROFILES[name])
    t = np.linspace(0, 1000, 200_001)
    m, big_m = change.multiplier(t), change.cumulative(t)
    rising = (m > 0) & (change.multiplier(t - 1e-6) > 0)
    assert np.abs(change.inverse(big_m) - t)[rising].max() < 1e-9
    assert np.abs(change.cumulative(change.inverse(big_m)) - big_m).max() < 1e-9
    fine = np.linspace(0, 400, 400_001)
    mf = change.multiplier(fine)
    trapezoid = np.concatenate(([0.0], np.cumsum((mf[1:] + mf[:-1]) / 2 * np.diff(fine))))
    # The trapezoid rule (h = 1e-3) errs by up to h*|jump|/2 at each jump of m (total jumps
    # here <= 20, so <= 0.01) and by O(h^2) on smooth pieces; a wrong M errs by O(1).
    assert np.abs(change.cumulative(fine) - trapezoid).max() < 0.02


def test_diurnal_mean_one_and_peak_to_trough():
    profile = DiurnalProfile(period_s=3600, peak_to_trough=5, phase_s=600)
    change = time_change(profile)
    t = np.linspace(0, 3600, 360_001)
    m = change.multiplier(t)
    assert m.max() / m.min() == pytest.approx(5)
    assert m.argmax() == 60_000  # the peak is at phase_s
    assert float(change.cumulative(np.array(3600.0))) == pytest.approx(3600, rel=1e-12)
    big = np.array([0.0, 1e3, 12_345.678, 9.9e4])
    assert np.abs(change.inverse(change.cumulative(big)) - big).max() < 1e-9


def test_a_profile_keeps_the_process_cv():
    """Gamma cv 2 at a steady multiplier 2: rate doubles, gaps halve, CV stays 2."""
    profile = StepProfile(steps=[Step(at_s=0, multiplier=2)])
    times = arrivals(GammaProcess(cv=2), profile)
    assert_gaps(times, 2 * RATE, 2.0, gamma_moments(2.0))


def test_profile_that_drops_to_zero_ends_the_stream():
    """After the last step (multiplier 0) no arrival ever comes, even with no end."""
    times = arrivals(PoissonProcess(), PROFILES["step"], limit=None)
    assert times.max() < 300


def test_loading_dispatches_on_type():
    assert parse_process({}, "a") == PoissonProcess()
    assert parse_process({"type": "gamma", "cv": 3}, "a") == GammaProcess(cv=3)
    assert parse_profile({}, "p") == ConstantProfile()
    loaded = parse_profile({"type": "step", "steps": [{"at_s": 1, "multiplier": 2}]}, "p")
    assert loaded == StepProfile(steps=[Step(at_s=1, multiplier=2)])


@pytest.mark.parametrize(("data", "path"), [
    ({"type": "gamma", "cv": 0}, "cv"),
    ({"type": "weibull", "cv": 20}, "cv"),
    ({"type": "weibull", "cv": 0.001}, "cv"),
    ({"type": "periodic", "jitter": 1.5}, "jitter"),
    ({"type": "bursty", "pareto_alpha": 1}, "pareto_alpha"),
    ({"type": "spiky", "spike_multiplier": 3, "spike_every_s": 1, "spike_length_s": 2},
     "spike_length_s"),
    ({"type": "spiky", "spike_multiplier": 0, "spike_every_s": 1, "spike_length_s": 1},
     "spike_multiplier"),
    ({"type": "renewal"}, "type"),
])
def test_process_validation_names_the_field(data: dict[str, Any], path: str):
    with pytest.raises(ScenarioError) as info:
        parse_process(data, "workload.arrival")
    assert info.value.path == f"workload.arrival.{path}"


@pytest.mark.parametrize(("data", "path"), [
    ({"type": "step", "steps": [{"at_s": 5, "multiplier": 1}, {"at_s": 5, "multiplier": 2}]},
     "steps[1].at_s"),
    ({"type": "step", "steps": [{"at_s": 5, "multiplier": -1}]}, "steps[0].multiplier"),
    ({"type": "step", "steps": []}, "steps"),
    ({"type": "ramp", "from_multiplier": 1, "to_multiplier": 2, "start_s": 5, "end_s": 5},
     "end_s"),
    ({"type": "diurnal", "peak_to_trough": 0.5}, "peak_to_trough"),
    ({"type": "diurnal", "peak_to_trough": 2, "period_s": 0}, "period_s"),
    ({"type": "spike", "segments": [{"start_s": 0, "end_s": 10, "multiplier": 2},
                                    {"start_s": 5, "end_s": 20, "multiplier": 3}]},
     "segments[1].start_s"),
    ({"type": "spike", "segments": [{"start_s": 10, "end_s": 10, "multiplier": 2}]},
     "segments[0].end_s"),
])
def test_profile_validation_names_the_field(data: dict[str, Any], path: str):
    with pytest.raises(ScenarioError) as info:
        parse_profile(data, "workload.profile")
    assert info.value.path == f"workload.profile.{path}"
