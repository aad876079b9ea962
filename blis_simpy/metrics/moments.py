"""Exact sums for spreads and fits, the same whatever order the values come in.

A streaming run (metrics/stream.py) sees its samples a chunk at a time, in hand-over order,
and must report what an in-memory run reports to the last bit. Integer sums are exact in any
order; these make the others so too: sums of squares as Python integers, sums of floats as
the exact rationals they are (each float is one), rounded once at the end.
"""

from __future__ import annotations

import math
from fractions import Fraction
from operator import mul

import numpy as np

from blis_simpy.core.units import US_PER_MS


def square_sum(values: np.ndarray, weights: np.ndarray | None = None) -> int:
    """Sum of weight x value² of non-negative integer values, exactly (µs² can overflow
    int64: then in Python integers)."""
    v = np.asarray(values, dtype=np.int64)
    if weights is None:
        return dot(v, v)
    w = np.asarray(weights, dtype=np.int64)
    if not len(v):
        return 0
    top = int(v.max())
    if top * top < LIMIT:
        return dot(v * v, w)
    return sum(map(mul, map(mul, v.tolist(), v.tolist()), w.tolist()))


LIMIT = 2**63  # int64 sums below this are exact


def dot(a: np.ndarray, b: np.ndarray) -> int:
    """The exact dot product of non-negative int64 vectors: numpy's when no partial sum can
    overflow, else in Python integers."""
    if not len(a):
        return 0
    if int(a.max()) * int(b.max()) * len(a) < LIMIT:
        return int(np.dot(a, b))
    return sum(map(mul, a.tolist(), b.tolist()))


def float_sum(values: np.ndarray) -> Fraction:
    """The exact sum of float64 values: `math.fsum` rounds it once, so what it rounded off is
    the exact sum of the values and its negation, found the same way, until nothing is left
    (a nonzero remainder is at least the smallest float, so it never rounds to 0)."""
    parts = values.tolist()
    total = Fraction(0)
    while (rounded := math.fsum(parts)) != 0:
        total += Fraction(rounded)
        parts.append(-rounded)
    return total


def std_ms(count: int, total: float | Fraction, squares: int | Fraction) -> float:
    """The population standard deviation, in ms, of `count` µs values whose sum and sum of
    squares are exact: sqrt((n·Σx² − (Σx)²) / n²), rounded once before the root."""
    if not count:
        return 0.0
    total = Fraction(total)
    variance = (count * Fraction(squares) - total * total) / (count * count)
    return math.sqrt(max(float(variance), 0.0)) / US_PER_MS
