"""The bulk encoders behind the compat results.json (`format_floats`, `quote_all`) give the
same text as the one-value ones, which the Go vectors pin: on those vectors, on any finite
floats, and on any strings (plain, HTML-unsafe, control, non-ASCII, lone surrogates)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from blis_simpy.compat.gojson import format_float, format_floats, quote, quote_all

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


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.text(), st.from_regex(r"[a-z_0-9\-]*", fullmatch=True),
                          st.text(alphabet="<>&\"\\\x00\x7f\u2028é")), max_size=8))
def test_quote_all_is_quote_of_each(strings: list[str]) -> None:
    assert quote_all(strings) == [quote(s) for s in strings]
