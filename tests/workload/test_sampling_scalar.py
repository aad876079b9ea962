"""The scalar samplers a reactive source draws one value at a time with give exactly the values
of the vectorised ones, and leave the stream where they leave it: the tenants workload's
outputs depend on both."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from blis_simpy.config.distributions import (
    Constant,
    Distribution,
    Empirical,
    Exponential,
    Gaussian,
    LogNormal,
    ParetoLogNormal,
    Uniform,
)
from blis_simpy.workload.sampling import (
    UniformIds,
    WeightedPick,
    one_duration,
    one_token_count,
    sample_seconds,
    sample_tokens,
)

bounds = st.one_of(st.none(), st.floats(0.0, 3000.0))
scale = st.floats(0.01, 2000.0)


@st.composite
def distributions(draw: st.DrawFn) -> Distribution:
    return replace(draw(shapes()), min=draw(bounds), max=draw(bounds))


@st.composite
def shapes(draw: st.DrawFn) -> Distribution:
    shape = draw(st.sampled_from(["gaussian", "constant", "uniform", "exponential",
                                  "lognormal", "pareto", "empirical"]))
    if shape == "gaussian":
        return Gaussian(mean=draw(scale), stdev=draw(st.floats(0, 500)))
    if shape == "constant":
        return Constant(value=draw(st.floats(0, 3000)))
    if shape == "uniform":
        a, b = sorted((draw(scale), draw(scale)))
        return Uniform(low=a, high=b)
    if shape == "exponential":
        return Exponential(mean=draw(scale))
    if shape == "lognormal":
        return LogNormal(mean=draw(scale), sigma=draw(st.floats(0, 2)))
    if shape == "pareto":
        return ParetoLogNormal(alpha=draw(st.floats(0.5, 3)), xm=draw(scale),
                               mu=draw(st.floats(0, 7)), sigma=draw(st.floats(0, 2)),
                               mix_weight=draw(st.floats(0, 1)))
    return Empirical(samples=draw(st.lists(st.floats(0, 3000), min_size=1, max_size=8)))


def token_range_ok(dist: Distribution) -> bool:
    try:
        sample_tokens(dist, np.random.default_rng(0), 1)
    except ValueError:
        return False
    return True


@settings(max_examples=300, deadline=None)
@given(distributions(), st.integers(0, 2**32))
def test_one_token_count_equals_sample_tokens(dist: Distribution, seed: int) -> None:
    if not token_range_ok(dist):
        return
    one, many = np.random.default_rng(seed), np.random.default_rng(seed)
    for _ in range(5):
        value = one_token_count(dist, one)
        assert type(value) is int
        assert value == int(sample_tokens(dist, many, 1)[0])
    assert one.random() == many.random()  # the stream is left at the same place


@settings(max_examples=300, deadline=None)
@given(distributions(), st.integers(0, 2**32))
def test_one_duration_equals_sample_seconds(dist: Distribution, seed: int) -> None:
    one, many = np.random.default_rng(seed), np.random.default_rng(seed)
    for _ in range(5):
        value = one_duration(dist, one)
        assert type(value) is float
        assert value == float(sample_seconds(dist, many, 1)[0])
    assert one.random() == many.random()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.001, 1000.0), min_size=1, max_size=10), st.integers(0, 2**32))
def test_weighted_pick_equals_generator_choice(weights: list[float], seed: int) -> None:
    pick = WeightedPick.of(weights)
    p = np.array(weights) / np.array(weights).sum()
    ours, numpy = np.random.default_rng(seed), np.random.default_rng(seed)
    for _ in range(50):
        assert pick.pick(ours) == int(numpy.choice(len(weights), p=p))
    assert ours.random() == numpy.random()


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32), high=st.one_of(st.sampled_from([2, 128_000, 2**32 - 1]),
                                                 st.integers(2, 2**32 - 1)),
       sizes=st.lists(st.one_of(st.integers(0, 40), st.integers(0, 40_000)), max_size=12))
def test_uniform_ids_are_numpy_integers_call_after_call(seed, high, sizes):
    """The block-drawn ids equal `rng.integers(0, high, n)` for any sequence of calls, also
    where Lemire's method rejects many words (a range just over 2**31 rejects about half)."""
    numpy_rng = np.random.default_rng(seed)
    ids = UniformIds(np.random.default_rng(seed), high)
    for n in sizes:
        assert np.array_equal(ids.take(n), numpy_rng.integers(0, high, n))
