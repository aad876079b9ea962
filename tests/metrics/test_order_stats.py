"""Exact order statistics from a scratch file (metrics/order_stats.py): the k-th smallest of
every group is what a sort in memory gives, and numpy's sum is reproduced value for value."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blis_simpy.metrics import order_stats
from blis_simpy.metrics.order_stats import ALL, SampleFile, pairwise_sum


def chunks_of(values: np.ndarray, cuts: list[int]):
    edges = sorted({0, len(values), *(c % (len(values) + 1) for c in cuts)})
    return (values[a:b] for a, b in itertools.pairwise(edges))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 3000),
       scale=st.sampled_from([1, 3, 1000, 10**7, 10**15, 2**63]),
       floats=st.booleans(), gather=st.sampled_from([4, 64, 1 << 16]))
def test_selected_order_statistics_equal_a_sort(tmp_path_factory, seed, n, scale, floats,
                                                gather):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(order_stats, "GATHER", gather)  # small: more narrowing passes
        patch.setattr(order_stats, "CHUNK", 257)  # several chunks per pass
        check_selection(tmp_path_factory.mktemp("s") / "x.samples", seed, n, scale, floats)


def check_selection(path, seed, n, scale, floats):
    rng = np.random.default_rng(seed)
    if floats:  # non-negative floats sort as their bits do
        keys = np.abs(rng.normal(0, scale, n)).view(np.uint64)
    else:
        keys = rng.integers(0, scale, n, dtype=np.uint64, endpoint=False)
    groups = {name: rng.integers(0, 4, n).astype(np.int32) for name in ("instance", "klass",
                                                                         "tenant")}
    samples = SampleFile(path)
    for start in range(0, n, 500):
        samples.add(keys[start:start + 500], *(g[start:start + 500] for g in groups.values()))
    cells = {(ALL, 0): np.ones(n, dtype=bool)}
    cells.update({(name, g): column == g for name, column in groups.items() for g in range(4)})
    wanted, expected = {}, {}
    for cell, mask in cells.items():
        ordered = np.sort(keys[mask])
        if len(ordered):
            ranks = sorted({0, len(ordered) - 1, *rng.integers(0, len(ordered), 3).tolist()})
            wanted[cell] = ranks
            expected[cell] = {k: int(ordered[k]) for k in ranks}
    assert samples.select(wanted) == expected
    samples.close()
    assert not samples.path.exists()


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 5000),
       cuts=st.lists(st.integers(0, 10**6), max_size=6))
def test_pairwise_sum_is_numpys_sum_to_the_last_bit(seed, n, cuts):
    values = np.random.default_rng(seed).lognormal(0, 3, n) / 1000
    assert pairwise_sum(chunks_of(values, cuts), n) == float(values.sum())


def test_pairwise_sum_of_a_long_array_read_in_chunks():
    values = np.random.default_rng(1).random(1_234_567)
    assert pairwise_sum(chunks_of(values, [10_000 * i for i in range(1, 100)]),
                        len(values)) == float(values.sum())
