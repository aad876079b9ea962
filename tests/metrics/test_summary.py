"""Summary statistics: the reference's percentile and mean, on plain and weighted samples."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from blis_simpy.metrics.summary import Samples


def test_percentile_interpolates_like_the_reference():
    samples = Samples(np.array([4000, 1000, 3000, 2000]))
    assert samples.percentile_ms(50) == 2.5  # rank 1.5 between 2 ms and 3 ms
    assert samples.percentile_ms(99) == 3 + 1000 * (0.99 * 3 - 2) / 1000
    assert samples.mean_ms() == 2.5


def test_empty_samples_give_zero():
    assert Samples(np.zeros(0, dtype=np.int64)).percentile_ms(99) == 0.0
    assert Samples(np.zeros(0, dtype=np.int64)).mean_ms() == 0.0


@given(st.lists(st.tuples(st.integers(1, 10**7), st.integers(0, 5)), min_size=1, max_size=40),
       st.sampled_from([50, 90, 95, 99]))
def test_weighted_samples_equal_their_expansion(pairs, p):
    values = np.array([v for v, _ in pairs])
    weights = np.array([w for _, w in pairs])
    weighted = Samples(values, weights)
    expanded = Samples(np.repeat(values, weights))
    assert weighted.count == expanded.count
    assert weighted.percentile_ms(p) == expanded.percentile_ms(p)
    assert weighted.mean_ms() == expanded.mean_ms()
