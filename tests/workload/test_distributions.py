"""Value distributions: moments, bounds, rounding and validation.

Tolerances are 5 standard errors of the statistic checked (with a fixed seed each test is
deterministic; 5 SE keeps the tests valid for any seed with probability ~1 - 6e-7).
For n draws with coefficient of variation CV, the sample mean's relative SE is CV/sqrt(n);
a normal sample's standard deviation has relative SE 1/sqrt(2n).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from blis_simpy.config.distributions import (
    Constant,
    Distribution,
    Empirical,
    Exponential,
    Gaussian,
    LogNormal,
    ParetoLogNormal,
    Uniform,
    mean_of,
    parse_distribution,
)
from blis_simpy.core.errors import ScenarioError
from blis_simpy.workload.sampling import round_half_away, sample_seconds, sample_tokens

N = 200_000


def rng(seed: int = 7) -> np.random.Generator:
    return np.random.default_rng(seed)


def assert_mean(values: np.ndarray, mean: float, stdev: float) -> None:
    """Sample mean within 5 SE (stdev/sqrt(n)) of the configured mean."""
    tolerance = 5 * stdev / math.sqrt(len(values))
    assert abs(values.mean() - mean) < tolerance, (values.mean(), mean, tolerance)


def assert_normal_stdev(values: np.ndarray, stdev: float) -> None:
    """Sample stdev of (near-)normal data within 5 SE: relative SE 1/sqrt(2n)."""
    tolerance = 5 * stdev / math.sqrt(2 * len(values))
    assert abs(values.std() - stdev) < tolerance, (values.std(), stdev, tolerance)


def test_gaussian_tokens_match_mean_and_stdev():
    """Mean 500, stdev 100: the clamp at 1 is 5 sigma away (negligible); rounding adds
    variance 1/12, 4e-6 relative, far inside the 1.1% stdev tolerance."""
    tokens = sample_tokens(Gaussian(mean=500, stdev=100), rng(), N)
    assert tokens.dtype == np.int64
    assert_mean(tokens, 500, 100)
    assert_normal_stdev(tokens, 100)


def test_uniform_matches_mean_and_stdev():
    """Uniform on [10, 1000): stdev (high-low)/sqrt(12); the stdev's relative SE is
    sqrt((kurtosis-1)/(4n)) with kurtosis 1.8, about 0.45/sqrt(n)."""
    dist = Uniform(low=10, high=1000)
    values = sample_seconds(dist, rng(), N)
    stdev = 990 / math.sqrt(12)
    assert_mean(values, mean_of(dist), stdev)
    assert abs(values.std() - stdev) < 5 * stdev * math.sqrt(0.8 / (4 * N))
    assert values.min() >= 10 and values.max() < 1000


def test_exponential_matches_mean_and_cv():
    """Exponential: CV 1; the stdev's relative SE is sqrt((9-1)/(4n)) = sqrt(2/n)."""
    values = sample_seconds(Exponential(mean=2.0), rng(), N)
    assert_mean(values, 2.0, 2.0)
    assert abs(values.std() - 2.0) < 5 * 2.0 * math.sqrt(2 / N)


def test_lognormal_is_set_by_its_mean():
    """mean 1000, sigma 1: CV sqrt(e - 1) = 1.31; the logs are exactly normal with
    mu = ln(1000) - 1/2 and stdev 1, which gives tight checks on both parameters."""
    dist = LogNormal(mean=1000, sigma=1.0)
    values = sample_seconds(dist, rng(), N)
    assert_mean(values, 1000, 1000 * math.sqrt(math.e - 1))
    logs = np.log(values)
    assert_mean(logs, math.log(1000) - 0.5, 1.0)
    assert_normal_stdev(logs, 1.0)


def test_pareto_lognormal_mixture():
    """30% Pareto(xm 100, alpha 2.5) + 70% lognormal(mu 5, sigma 0.5). The mean is checked
    against the analytic mixture mean with the analytic stdev (alpha > 2: finite variance);
    the spread through P(X < xm), which only the lognormal body can produce: binomial SE."""
    dist = ParetoLogNormal(alpha=2.5, xm=100, mu=5, sigma=0.5, mix_weight=0.3)
    values = sample_seconds(dist, rng(), N)
    w = 0.3
    second = w * 2.5 * 100**2 / 0.5 + (1 - w) * math.exp(2 * 5 + 2 * 0.25)
    mean = mean_of(dist)
    assert mean == pytest.approx(w * 2.5 * 100 / 1.5 + (1 - w) * math.exp(5 + 0.125))
    assert_mean(values, mean, math.sqrt(second - mean**2))
    below = (1 - w) * 0.5 * (1 + math.erf((math.log(100) - 5) / (0.5 * math.sqrt(2))))
    share = float((values < 100).mean())
    assert abs(share - below) < 5 * math.sqrt(below * (1 - below) / N)


def test_empirical_bins_match_weights():
    """Frequencies of 3 non-zero bins: Pearson chi-square with 2 degrees of freedom is below
    20 with probability 1 - 4.5e-5; the zero-weight bin never appears."""
    dist = parse_distribution({"type": "empirical",
                               "bins": {100: 1, 200: 2, 400: 0, 800: 1}}, "d")
    tokens = sample_tokens(dist, rng(), N)
    assert set(np.unique(tokens)) == {100, 200, 800}
    expected = np.array([0.25, 0.5, 0.25]) * N
    observed = np.array([(tokens == v).sum() for v in (100, 200, 800)])
    assert ((observed - expected) ** 2 / expected).sum() < 20
    assert mean_of(dist) == pytest.approx(325.0)


def test_empirical_samples_are_resampled_uniformly():
    """4 values, 3 degrees of freedom: chi-square below 25 has probability 1 - 1.6e-5."""
    dist = Empirical(samples=[5.0, 7.0, 7.0, 11.0])
    values = sample_seconds(dist, rng(), N)
    expected = np.array([0.25, 0.5, 0.25]) * N
    observed = np.array([(values == v).sum() for v in (5.0, 7.0, 11.0)])
    assert ((observed - expected) ** 2 / expected).sum() < 25
    assert mean_of(dist) == 7.5


@pytest.mark.parametrize("dist", [
    Gaussian(mean=500, stdev=300, min=100, max=900),
    Uniform(low=0, high=2000, min=100, max=900),
    Exponential(mean=500, min=100, max=900),
    LogNormal(mean=500, sigma=1.5, min=100, max=900),
    ParetoLogNormal(alpha=1.2, xm=50, mu=6, sigma=1, mix_weight=0.5, min=100, max=900),
])
def test_bounds_are_respected_and_reached(dist: Distribution):
    tokens = sample_tokens(dist, rng(), 50_000)
    assert tokens.min() == 100 and tokens.max() == 900
    seconds = sample_seconds(dist, rng(), 50_000)
    assert seconds.min() == 100 and seconds.max() == 900


@pytest.mark.parametrize("low", [None, 0, -5])
def test_token_counts_are_never_zero(low: float | None):
    """Mean 2, stdev 5: 45% of the draws are below 0.5, yet every count is >= 1."""
    tokens = sample_tokens(Gaussian(mean=2, stdev=5, min=low), rng(), N)
    assert tokens.min() == 1
    assert (tokens == 1).mean() > 0.4


def test_seconds_clamp_at_zero():
    values = sample_seconds(Gaussian(mean=0, stdev=1), rng(), N)
    assert values.dtype == np.float64
    assert values.min() == 0.0
    zero = float((values == 0).mean())
    assert abs(zero - 0.5) < 5 * math.sqrt(0.25 / N)


def test_rounding_is_half_away_from_zero():
    """Go's math.Round, not numpy's round-half-to-even."""
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 2.4999, 2.5001])
    assert round_half_away(x).tolist() == [-3, -2, -1, 1, 2, 3, 2, 3]
    assert sample_tokens(Constant(value=2.5), rng(), 3).tolist() == [3, 3, 3]
    assert sample_tokens(Constant(value=4.5), rng(), 1).tolist() == [5]
    assert sample_tokens(Constant(value=0.3), rng(), 1).tolist() == [1]


def test_fractional_bounds_round_inwards():
    tokens = sample_tokens(Uniform(low=0, high=10, min=2.2, max=7.7), rng(), 10_000)
    assert tokens.min() == 3 and tokens.max() == 7
    with pytest.raises(ValueError):
        sample_tokens(Constant(value=1, max=0.5), rng(), 1)


def test_same_seed_same_draws():
    dist = ParetoLogNormal(alpha=2, xm=10, mu=3, sigma=1, mix_weight=0.4)
    assert np.array_equal(sample_tokens(dist, rng(3), 1000), sample_tokens(dist, rng(3), 1000))


def test_mean_of_reports_configured_means():
    assert mean_of(Constant(value=7)) == 7
    assert mean_of(Gaussian(mean=3, stdev=1, min=5)) == 3
    assert mean_of(Uniform(low=2, high=4)) == 3
    assert mean_of(LogNormal(mean=9, sigma=2)) == 9
    assert mean_of(ParetoLogNormal(alpha=1, xm=1, mu=0, sigma=1, mix_weight=0.1)) == math.inf
    assert mean_of(ParetoLogNormal(alpha=1, xm=1, mu=0, sigma=0, mix_weight=0)) == 1


def test_loading_dispatches_on_type_default_gaussian():
    assert parse_distribution({"mean": 5, "stdev": 1}, "d") == Gaussian(mean=5, stdev=1)
    loaded = parse_distribution({"type": "lognormal", "mean": 5, "sigma": 1, "max": 10}, "d")
    assert loaded == LogNormal(mean=5, sigma=1, max=10)


def error(data: Any) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        parse_distribution(data, "workload.prompt")
    return info.value


@pytest.mark.parametrize(("data", "path"), [
    ({"type": "gaussian", "mean": 1, "stdev": -1}, "stdev"),
    ({"type": "gaussian", "mean": 1, "stdev": 1, "min": 5, "max": 2}, "min"),
    ({"type": "uniform", "low": 5, "high": 2}, "low"),
    ({"type": "exponential", "mean": 0}, "mean"),
    ({"type": "lognormal", "mean": -1, "sigma": 1}, "mean"),
    ({"type": "lognormal", "mean": 1, "sigma": -1}, "sigma"),
    ({"type": "pareto-lognormal", "alpha": 0, "xm": 1, "mu": 0, "sigma": 1,
      "mix_weight": 0.5}, "alpha"),
    ({"type": "pareto-lognormal", "alpha": 2, "xm": 1, "mu": 0, "sigma": 1,
      "mix_weight": 1.5}, "mix_weight"),
    ({"type": "empirical"}, "bins"),
    ({"type": "empirical", "bins": {1: 1}, "samples": [1]}, "bins"),
    ({"type": "empirical", "bins": {1: 0, 2: 0}}, "bins"),
    ({"type": "empirical", "bins": {}}, "bins"),
    ({"type": "empirical", "bins": {100: -1, 2: 1}}, "bins.100"),
    ({"type": "empirical", "bins": {"many": 1}}, "bins.many"),
    ({"type": "empirical", "samples": []}, "samples"),
    ({"type": "gamma", "mean": 1}, "type"),
    ({"type": "constant", "value": 1, "mean": 2}, "mean"),
])
def test_validation_errors_name_the_field(data: dict[str, Any], path: str):
    assert error(data).path == f"workload.prompt.{path}"
