"""Byte-exact reproduction of Go's ``encoding/json`` ``MarshalIndent`` output.

The reference simulator (Go) prints its metrics and writes its results file with
``json.MarshalIndent(v, "", "  ")``. Users diff and parse that text, so the compatibility
mode must emit the same bytes, which Python's :mod:`json` does not: it writes ``500.0``
where Go writes ``500``, ``1e-07`` where Go writes ``1e-7``, and it does not HTML-escape.

Behaviour pinned here (Go 1.22 and later; checked against go1.25 output stored in
``tests/compat/data/go_json_vectors.json``):

* floats: shortest round-trip digits, plain notation unless ``abs < 1e-6`` or
  ``abs >= 1e21``; exponents lose a leading zero only when negative (``1e-7`` but
  ``1e+21``); integral values have no ``.0``; ``-0.0`` prints ``-0``; NaN and Inf are errors.
* strings: ``<``, ``>``, ``&``, U+2028 and U+2029 are escaped as ``\\u003c`` and so on;
  control characters use ``\\b \\f \\n \\r \\t`` or ``\\u00XX``; DEL and other non-ASCII
  text pass through raw; each byte of invalid UTF-8 becomes ``\\ufffd``.
* containers: dicts keep insertion order (like struct fields); empty ones print as
  ``[]`` and ``{}`` even when indenting; ``indent=""`` still breaks lines.
"""

from __future__ import annotations

import codecs
import math
import re
from collections.abc import Mapping, Sequence
from numbers import Integral

import numpy as np

from blis_simpy.metrics.columns import decimal_matrix

__all__ = ["dumps", "format_float", "format_float_array", "format_floats", "quote", "quote_all"]

_ERRORS = "blis_simpy.gojson.surrogates"
# Lead byte -> total length of a well-formed UTF-8 sequence (RFC 3629 / Go's utf8 package).
_SEQ_LEN = {
    **dict.fromkeys(range(0xC2, 0xE0), 2),
    **dict.fromkeys(range(0xE0, 0xF0), 3),
    **dict.fromkeys(range(0xF0, 0xF5), 4),
}
_SHORT_ESCAPES = {
    0x22: '\\"',
    0x5C: "\\\\",
    0x08: "\\b",
    0x0C: "\\f",
    0x0A: "\\n",
    0x0D: "\\r",
    0x09: "\\t",
}
_HTML_UNSAFE = (0x3C, 0x3E, 0x26)  # < > &
# Printable ASCII (and DEL) minus the quote, the backslash and & < >: copied through as is.
_SAFE_ASCII = re.compile(r"[ !#-%'-;=?-\[\]-\x7f]*")


def _ascii_escape(b: int) -> str:
    """Return Go's rendering of one ASCII byte inside a string literal."""
    if b in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[b]
    if b < 0x20 or b in _HTML_UNSAFE:
        return f"\\u{b:04x}"
    return chr(b)


_ASCII = tuple(_ascii_escape(b) for b in range(0x80))


def _surrogates_to_bytes(err: UnicodeError) -> tuple[bytes, int]:
    """Encode lone surrogates the way the equivalent Go string would hold them.

    Undecodable bytes read with ``errors="surrogateescape"`` come back as their raw byte,
    so a file name or label that was invalid UTF-8 in Go is invalid in the same way here.
    Other lone surrogates get their (invalid in Go) 3-byte encoding.
    """
    if not isinstance(err, UnicodeEncodeError):
        raise err
    out = bytearray()
    for ch in err.object[err.start : err.end]:
        code = ord(ch)
        out += (
            bytes([code - 0xDC00])
            if 0xDC80 <= code <= 0xDCFF
            else ch.encode("utf-8", "surrogatepass")
        )
    return bytes(out), err.end


codecs.register_error(_ERRORS, _surrogates_to_bytes)


def _rune_len(raw: bytes, i: int) -> int:
    """Length of the valid UTF-8 sequence at ``raw[i]``, or 0 where Go sees RuneError.

    Go replaces only the first byte of a bad sequence and retries at the next byte, unlike
    Python's ``errors="replace"``, which swallows a truncated sequence as one U+FFFD.
    """
    size = _SEQ_LEN.get(raw[i], 0)
    try:
        raw[i : i + size].decode("utf-8")  # strict: rejects truncation, overlongs, surrogates
    except UnicodeDecodeError:
        return 0
    return size


def quote(s: str) -> str:
    """Return ``s`` as a Go ``json.Marshal`` string literal (HTML-safe escaping on)."""
    if _SAFE_ASCII.fullmatch(s):
        return f'"{s}"'
    raw = s.encode("utf-8", _ERRORS)
    out = ['"']
    i = 0
    while i < len(raw):
        if raw[i] < 0x80:
            out.append(_ASCII[raw[i]])
            i += 1
            continue
        size = _rune_len(raw, i)
        if size == 0:
            out.append("\\ufffd")
            i += 1
            continue
        ch = raw[i : i + size].decode("utf-8")
        out.append(f"\\u{ord(ch):04x}" if ch in "\u2028\u2029" else ch)
        i += size
    out.append('"')
    return "".join(out)


def quote_all(strings: list[str]) -> list[str]:
    """`quote` of each string, in bulk: when every one is plain ASCII (the usual ids and
    instance names) they are quoted at once, without a call per string."""
    if not _SAFE_ASCII.fullmatch("".join(strings)):
        return [quote(s) for s in strings]
    # none holds NUL (not in the safe set), so it can separate them
    return ('"' + '"\0"'.join(strings) + '"').split("\0") if strings else []


def _shortest_decimal(a: float) -> tuple[str, int]:
    """Split positive finite ``a`` into shortest round-trip digits and decimal point.

    The value is ``0.DIGITS * 10**point``. Python's ``repr`` and Go's ``strconv`` both pick
    the shortest digit string that round-trips (the closest one on ties), so only the
    layout around the digits has to be redone.
    """
    mantissa, _, exp = repr(a).partition("e")
    int_part, _, frac = mantissa.partition(".")
    digits = int_part + frac
    point = len(int_part) + int(exp or 0)
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    return stripped.rstrip("0"), point


def _fixed(digits: str, point: int) -> str:
    """Lay out digits like Go's ``strconv.FormatFloat(x, 'f', -1, 64)``."""
    if point <= 0:
        return "0." + "0" * -point + digits
    if point >= len(digits):
        return digits + "0" * (point - len(digits))
    return f"{digits[:point]}.{digits[point:]}"


def _exponent(digits: str, point: int) -> str:
    """Lay out digits like ``FormatFloat(x, 'e', -1, 64)`` with encoding/json's cleanup.

    Go pads exponents to two digits, then encoding/json strips the pad from negative ones
    only, so 1e-7 prints ``1e-7`` while 1e21 prints ``1e+21``.
    """
    exp = point - 1
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    if exp < 0:
        return f"{mantissa}e-{-exp}"
    return f"{mantissa}e+{exp:02d}"


def format_float(x: float) -> str:
    """Format a float64 exactly as Go's encoding/json does (ES6 number-to-string rules).

    Raises ValueError for NaN and infinities, which Go refuses with the same message.
    """
    x = float(x)
    text = repr(x)
    if "e" not in text and "n" not in text:
        # Plain decimal repr means 1e-4 <= |x| < 1e16: Go's 'f' layout of the same digits.
        return text[:-2] if text.endswith(".0") else text
    if math.isnan(x) or math.isinf(x):
        name = "NaN" if math.isnan(x) else ("+Inf" if x > 0 else "-Inf")
        raise ValueError(f"json: unsupported value: {name}")
    sign = "-" if math.copysign(1.0, x) < 0 else ""
    a = abs(x)
    if a == 0:
        return sign + "0"
    digits, point = _shortest_decimal(a)
    body = _exponent(digits, point) if a < 1e-6 or a >= 1e21 else _fixed(digits, point)
    return sign + body


def format_floats(values: list[float]) -> list[str]:
    """`format_float` of each value, in bulk: when every repr is plain decimal (no exponent,
    NaN or Inf: nearly always) the reprs are joined, the ".0" of integral ones dropped in
    one replace, and split again, without a call per value."""
    if not values:
        return []
    text = "\0".join(map(repr, values)) + "\0"
    if "e" in text or "n" in text:
        return [format_float(v) for v in values]
    return text.replace(".0\0", "\0").split("\0")[:-1]


def format_float_array(values: np.ndarray) -> list[str]:
    """`format_floats` of a float64 array. Times made from integer µs (seconds, ms) are
    decimals of at most 15 digits, whose repr is their own digits (`decimal_matrix`): those
    are written for the whole array at once, without a float repr per value (a 100K-request
    results.json has 300K of them); any other array goes value by value."""
    block = decimal_matrix(values) if len(values) and not np.isnan(values).any() else None
    if block is None:
        return format_floats(values.tolist())
    ends = np.full((len(block), 1), ord("\n"), dtype=np.uint8)
    text = np.concatenate((block, ends), axis=1).tobytes().translate(None, b"\0").decode()
    return text.replace(".0\n", "\n").split("\n")[:-1]


def _scalar(obj: object) -> str | None:
    """Render a JSON scalar, or return None when ``obj`` is a container."""
    if obj is None:
        return "null"
    if isinstance(obj, bool):
        return "true" if obj else "false"
    if isinstance(obj, Integral):  # also numpy integers, common in computed metrics
        return str(int(obj))
    if isinstance(obj, float):
        return format_float(obj)
    if isinstance(obj, str):
        return quote(obj)
    return None


def _entries(obj: object) -> tuple[str, str, list[tuple[str, object]]]:
    """Return a container's brackets and its (rendered key prefix, value) pairs."""
    if isinstance(obj, Mapping):
        pairs = []
        for key, value in obj.items():
            if not isinstance(key, str):
                raise TypeError(f"json: object keys must be str, got {type(key).__name__}")
            pairs.append((quote(key) + ": ", value))
        return "{", "}", pairs
    if isinstance(obj, Sequence) and not isinstance(obj, str | bytes | bytearray):
        return "[", "]", [("", value) for value in obj]
    raise TypeError(f"json: unsupported type: {type(obj).__name__}")


def _write(obj: object, indent: str, depth: int, out: list[str]) -> None:
    """Append the indented encoding of ``obj`` at nesting ``depth`` to ``out``.

    Mirrors Go's Indent pass: a bracket opens a new line only once an element follows,
    which is why empty containers stay ``[]`` and ``{}``.
    """
    text = _scalar(obj)
    if text is not None:
        out.append(text)
        return
    open_, close, pairs = _entries(obj)
    if not pairs:
        out.append(open_ + close)
        return
    inner = "\n" + indent * (depth + 1)
    out.append(open_)
    for n, (key, value) in enumerate(pairs):
        out.append((inner if n == 0 else "," + inner) + key)
        _write(value, indent, depth + 1, out)
    out.append("\n" + indent * depth + close)


def dumps(obj: object, indent: str = "  ") -> str:
    """Return ``json.MarshalIndent(obj, "", indent)`` as Go would produce it.

    Dicts stand for Go structs, so keys keep insertion order; sort them first to mimic a
    Go map. Supports dict, list/tuple, str, bool, None, int and float; no trailing newline.
    """
    out: list[str] = []
    _write(obj, indent, 0, out)
    return "".join(out)
