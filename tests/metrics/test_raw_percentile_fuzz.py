"""`raw.percentile` stands in for `np.percentile` (which imports `numpy.ma` on first use, 8 ms
of every run's start): the same float, bit for bit, on every float64 sample set, and
`distribution` gives what it gave through numpy for float64 and other dtypes alike."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from blis_simpy.metrics.raw import STATS, distribution, percentile

SAMPLES = st.lists(st.one_of(st.floats(allow_nan=False, allow_infinity=True, width=64),
                             st.sampled_from([0.0, -0.0, 1.0, 1e300, -1e300, 5e-324])),
                   min_size=1, max_size=60)


def same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.copysign(1.0, a) == math.copysign(1.0, b) and (
        a == b or (math.isnan(a) and math.isnan(b)))


@settings(max_examples=400, deadline=None)
@given(values=SAMPLES, p=st.integers(0, 100))
def test_percentile_is_numpys_bit_for_bit(values, p):
    data = np.array(values, dtype=np.float64)
    with np.errstate(invalid="ignore"):  # inf - inf inside numpy's interpolation
        want = float(np.percentile(data, p))
    assert same(percentile(data, p), want)


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.one_of(st.floats(allow_infinity=False, width=64, min_value=-1e9,
                                           max_value=1e9), st.just(math.nan)), max_size=40),
       dtype=st.sampled_from([np.float64, np.float32]))
def test_distribution_matches_numpy_percentiles(values, dtype):
    data = np.array(values, dtype=dtype)
    kept = data[~np.isnan(data)]
    got = distribution("x", data)
    for name, p in STATS:
        want = (None if not len(kept) else float(kept.mean()) if p is None
                else float(np.percentile(kept, p)))
        assert same(got[f"x_{name}_ms"], want), (name, got, want)
