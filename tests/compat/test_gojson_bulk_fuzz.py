"""The bulk encoders behind the compat results.json (`format_floats`, `format_float_array`,
`quote_all`) give the same text as the one-value ones, which the Go vectors pin: on those
vectors, on any finite floats, on times made from integer µs, and on any strings (plain,
HTML-unsafe, control, non-ASCII, lone surrogates)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blis_simpy.compat.gojson import (
    format_float,
    format_float_array,
    format_floats,
    quote,
    quote_all,
)

VECTORS = json.loads((Path(__file__).parent / "data" / "go_json_vectors.json").read_text(
    encoding="utf-8"))


def test_format_floats_matches_go_on_every_vector() -> None:
    values = [struct.unpack(">d", bytes.fromhex(bits))[0] for bits, _ in VECTORS["floats"]]
    assert format_floats(values) == [text for _, text in VECTORS["floats"]]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.floats(allow_nan=False, allow_infinity=False),
                          st.integers(0, 10**9).map(lambda us: us / 1000)), max_size=20))
def test_format_floats_is_format_float_of_each(values: list[float]) -> None:
    assert format_floats(values) == [format_float(v) for v in values]


def test_format_float_array_matches_go_on_every_vector() -> None:
    values = [struct.unpack(">d", bytes.fromhex(bits))[0] for bits, _ in VECTORS["floats"]]
    assert format_float_array(np.array(values)) == [text for _, text in VECTORS["floats"]]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-(10**15) + 1, 10**15 - 1), max_size=40),
       st.sampled_from([1, 1000, 1_000_000]),
       st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=3))
def test_format_float_array_is_format_float_of_each(whole: list[int], scale: int,
                                                    others: list[float]) -> None:
    """Times from integer µs (the decimal path: integral values, 1e-4 and below, -0.0), and
    the same with arbitrary floats mixed in (value by value)."""
    for values in (np.array(whole, dtype=np.int64) / scale,
                   np.array([w / scale for w in whole] + others + [-0.0])):
        assert format_float_array(values) == [format_float(v) for v in values.tolist()]


def test_format_float_array_refuses_nan_as_go_does() -> None:
    with pytest.raises(ValueError, match="NaN"):
        format_float_array(np.array([0.5, np.nan]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.text(), st.from_regex(r"[a-z_0-9\-]*", fullmatch=True),
                          st.text(alphabet="<>&\"\\\x00\x7f\u2028é")), max_size=8))
def test_quote_all_is_quote_of_each(strings: list[str]) -> None:
    assert quote_all(strings) == [quote(s) for s in strings]
