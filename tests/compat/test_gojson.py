"""Byte-for-byte checks of blis_simpy.compat.gojson against output recorded from real Go.

The vectors come from scripts/gen_go_json_vectors.go; CI has no Go toolchain, so these
tests read only the committed JSON file.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import pytest

from blis_simpy.compat.gojson import dumps, format_float, quote

DATA = Path(__file__).parent / "data" / "go_json_vectors.json"
PARITY = Path(__file__).parents[1] / "data" / "parity"
VECTORS = json.loads(DATA.read_text(encoding="utf-8"))


def _float(bits: str) -> float:
    """Rebuild a float64 from its 16-hex-digit bit pattern."""
    return struct.unpack(">d", bytes.fromhex(bits))[0]


def _go_string(hex_bytes: str) -> str:
    """Rebuild a Go string as Python holds undecodable bytes: via surrogateescape."""
    return bytes.fromhex(hex_bytes).decode("utf-8", "surrogateescape")


def _rebuild(node: dict) -> object:
    """Turn the generator's typed value tree back into plain Python values."""
    ((kind, payload),) = node.items()
    builders = {
        "null": lambda _: None,
        "bool": bool,
        "int": int,
        "float": _float,
        "str": _go_string,
        "list": lambda items: [_rebuild(item) for item in items],
        "object": lambda pairs: {_go_string(k): _rebuild(v) for k, v in pairs},
    }
    return builders[kind](payload)


def test_vectors_come_from_a_modern_go() -> None:
    """Go 1.22 changed \\b and \\f escapes; the vectors must post-date that change."""
    major, minor = (int(p) for p in VECTORS["go_version"].removeprefix("go").split(".")[:2])
    assert (major, minor) >= (1, 22)
    assert len(VECTORS["floats"]) > 500


@pytest.mark.parametrize(("bits", "text"), VECTORS["floats"])
def test_format_float_matches_go(bits: str, text: str) -> None:
    assert format_float(_float(bits)) == text


@pytest.mark.parametrize(("bits", "message"), VECTORS["float_errors"])
def test_non_finite_floats_raise_like_go(bits: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{message.replace('+', '[+]')}$"):
        format_float(_float(bits))


@pytest.mark.parametrize(("value", "text"), VECTORS["ints"])
def test_ints_match_go(value: str, text: str) -> None:
    assert dumps(int(value)) == text


@pytest.mark.parametrize(("hex_bytes", "text"), VECTORS["strings"])
def test_strings_match_go(hex_bytes: str, text: str) -> None:
    assert quote(_go_string(hex_bytes)) == text
    assert dumps(_go_string(hex_bytes)) == text


@pytest.mark.parametrize("doc", VECTORS["documents"], ids=lambda d: next(iter(d["value"])))
def test_marshal_indent_matches_go(doc: dict) -> None:
    value = _rebuild(doc["value"])
    for indent, text in doc["indented"]:
        assert dumps(value, indent=indent) == text


def test_integral_floats_and_ints_both_print_without_fraction() -> None:
    assert dumps({"a": 500.0, "b": 500, "c": -0.0, "d": True}, indent="") == (
        '{\n"a": 500,\n"b": 500,\n"c": -0,\n"d": true\n}'
    )


def test_lone_surrogates_follow_go_utf8_rules() -> None:
    # U+D800 has no UTF-8 encoding: Go would see 3 invalid bytes, so 3 replacement chars.
    assert quote("a\ud800b") == '"a\\ufffd\\ufffd\\ufffdb"'


@pytest.mark.parametrize("bad", [{1: "x"}, {"a": b"bytes"}, {"a": {1, 2}}, object()])
def test_unsupported_values_raise_type_error(bad: object) -> None:
    with pytest.raises(TypeError):
        dumps(bad)


def test_nan_inside_document_raises() -> None:
    with pytest.raises(ValueError, match="NaN"):
        dumps({"x": [1.0, math.nan]})


@pytest.mark.parametrize("path", sorted(PARITY.glob("*.results.json")), ids=lambda p: p.name)
def test_reference_results_files_round_trip(path: Path) -> None:
    """Re-encoding a results file written by the Go reference reproduces it exactly."""
    text = path.read_text(encoding="utf-8")
    assert dumps(json.loads(text)) == text
