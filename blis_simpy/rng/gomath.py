"""Bit-exact port of Go's ``math/rand`` (v1): ``rand.New(rand.NewSource(seed))``.

The Go reference draws every random quantity from this generator, so any deviation
(even one ulp in a float, or one skipped raw draw) desynchronises the whole stream.
Go semantics that matter and are easy to get wrong are called out where they occur.

Speed: the additive lagged-Fibonacci recurrence ``x[k] = x[k-607] + x[k-273] (mod 2^64)``
lets 273 outputs be computed per numpy operation, so raw values are produced in blocks.
All draws (scalar and bulk) consume one shared buffer through a cursor, which keeps
them interleavable exactly like successive Go calls.
"""

from __future__ import annotations

import json
import math
import struct
from bisect import bisect_left
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from importlib import resources

import numpy as np

_LEN = 607
_TAP = 273
_MASK63 = (1 << 63) - 1
_MASK64 = (1 << 64) - 1
_INT32_MAX = (1 << 31) - 1
_SEED_ZERO = 89482311
_TWO_NEG63 = 2.0**-63
_BLOCK = 1 << 15  # raw values generated per refill (one Intn reduction covers a block)
# Values converted to Python ints at a time for scalar draws: from the smallest window after
# a bulk draw (the reference draws one or two scalars between its token arrays) doubling up to
# the largest while scalar draws follow each other.
_SCALAR_WINDOW_MIN = 4
_SCALAR_WINDOW_MAX = 64


def _load_tables() -> dict:
    """Read Go's constant tables once; they are data, not code, to keep this module short."""
    text = resources.files("blis_simpy.data").joinpath("go_math_rand_tables.json").read_text()
    return json.loads(text)


_F32 = struct.Struct("<f")


def _f32(value: float) -> float:
    """Round a float64 to float32 (nearest-even), as Go's float32() conversion does."""
    return _F32.unpack(_F32.pack(value))[0]


_TABLES = _load_tables()
_COOKED_U64 = np.array([v & _MASK64 for v in _TABLES["cooked"]], dtype=np.uint64)
_KN: list[int] = [int(v) for v in _TABLES["kn"]]
# wn and fn are float32 in Go; the JSON holds their shortest decimal forms.
_WN: list[float] = [_f32(float(v)) for v in _TABLES["wn"]]
_FN: list[float] = [_f32(float(v)) for v in _TABLES["fn"]]
_FN_STEP: list[float] = [0.0] + [_f32(_FN[i - 1] - _FN[i]) for i in range(1, 128)]
_RN = float(_TABLES["rn"])
# Go folds ``1.0 / rn`` at compile time from the exact decimal constant; float division
# of the already-rounded rn could be off by one ulp.
_INV_RN = float(1 / Fraction(Decimal(repr(_RN))))


# --------------------------------------------------------------------------- seeding


def _seedrand(x: int) -> int:
    """One step of Go's 48271 LCG mod 2^31-1 (Schrage form; x stays positive)."""
    hi, lo = divmod(x, 44488)
    x = 48271 * lo - 3399 * hi
    return x + _INT32_MAX if x < 0 else x


def _seed_vector(seed: int) -> np.ndarray:
    """Go's rngSource.Seed: the 607-word register as uint64 (int64 bit patterns)."""
    s = _to_int64(seed) % _INT32_MAX  # Python's floor mod equals Go's "% then += M"
    x = s or _SEED_ZERO
    for _ in range(20):
        x = _seedrand(x)
    words = []
    for _ in range(_LEN):
        x = _seedrand(x)
        u = x << 40
        x = _seedrand(x)
        u ^= x << 20
        x = _seedrand(x)
        words.append((u ^ x) & _MASK64)
    return np.array(words, dtype=np.uint64) ^ _COOKED_U64


def _initial_history(vec: np.ndarray) -> np.ndarray:
    """Reorder the register so that out[k] = h[k-607] + h[k-273] reproduces Go's tap/feed walk.

    Go starts with tap=0, feed=334 and decrements both before each draw, so the value the
    recurrence calls x[m] (m = -607..-1) lives at vec[(333 - (m + 607)) mod 607].
    """
    idx = (333 - np.arange(_LEN)) % _LEN
    return vec[idx].copy()


# ----------------------------------------------------------------- raw value stream


class _LaggedFibonacci:
    """Go's rngSource as a block generator of raw 64-bit outputs.

    One buffer holds the 607 values of history followed by the block being generated, and the
    (history, history, block) views of each 273-value step are made once per block size: a
    step is then one `np.add` on ready views, not three slices and an add (the slicing was
    most of a step's ~5 us). The generated values are copied out by the caller."""

    def __init__(self, seed: int) -> None:
        self._buf = _initial_history(_seed_vector(seed))
        self._steps: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def _layout(self, count: int) -> None:
        """Size the buffer for blocks of `count` values (keeping the history at its front)."""
        buf = np.empty(_LEN + count, dtype=np.uint64)
        buf[:_LEN] = self._buf[-_LEN:]
        end = _LEN + count
        self._buf, self._steps = buf, []
        for start in range(_LEN, end, _TAP):
            stop = min(start + _TAP, end)
            self._steps.append((buf[start - _LEN : stop - _LEN], buf[start - _TAP : stop - _TAP],
                                buf[start:stop]))

    def generate(self, count: int) -> np.ndarray:
        """The next ``count`` raw uint64 outputs (Go's rngSource.Uint64 values), as a view
        into the generator's buffer: valid until the next call, which overwrites it."""
        if self._buf.size != _LEN + count:
            self._layout(count)
        buf = self._buf
        add = np.add
        for lagged, tapped, out in self._steps:
            add(lagged, tapped, out=out)
        buf[:_LEN] = buf[-_LEN:]  # the next block's history (numpy copies overlaps safely)
        return buf[_LEN:]


# ------------------------------------------------------------------- math helpers


def _to_int64(value: int) -> int:
    """Wrap an integer to Go's int64 range (two's complement)."""
    value &= _MASK64
    return value - (1 << 64) if value >> 63 else value


_LOG_L = (
    6.666666666666735130e-01,
    3.999999999940941908e-01,
    2.857142874366239149e-01,
    2.222219843214978396e-01,
    1.818357216161805012e-01,
    1.531383769920937332e-01,
    1.479819860511658591e-01,
)
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_HALF_SQRT2 = 7.07106781186547524401e-01


def _go_log(x: float) -> float:
    """Go's math.Log (amd64 assembly == portable Go without FMA); not correctly rounded.

    libm's log differs by an ulp on some inputs, which would change NormFloat64's tail
    values. Only positive normal inputs reach here (Float64 results); 0 gives -inf.
    """
    if x == 0.0:
        return -math.inf
    f1, ki = math.frexp(x)
    if f1 <= _HALF_SQRT2:  # CMPSD predicate NLT with swapped operands, i.e. "<="
        f1 *= 2.0
        ki -= 1
    f = f1 - 1.0
    k = float(ki)
    l1, l2, l3, l4, l5, l6, l7 = _LOG_L
    s = f / (2.0 + f)
    s2 = s * s
    s4 = s2 * s2
    t1 = s2 * (l1 + s4 * (l3 + s4 * (l5 + s4 * l7)))
    t2 = s4 * (l2 + s4 * (l4 + s4 * l6))
    r = t1 + t2
    hfsq = 0.5 * f * f
    return k * _LN2_HI - ((hfsq - (s * (hfsq + r) + k * _LN2_LO)) - f)


def _fma(a: float, b: float, c: float) -> float:
    """a*b + c with a single rounding, computed exactly on integers (Python 3.11 lacks fma)."""
    an, ad = a.as_integer_ratio()
    bn, bd = b.as_integer_ratio()
    cn, cd = c.as_integer_ratio()
    pn, pd = an * bn, ad * bd  # denominators are powers of two
    if pd >= cd:
        return (pn + cn * (pd // cd)) / pd
    return (pn * (cd // pd) + cn) / cd


_EXP_TAYLOR = (
    2.4801587301587301587e-5,
    1.9841269841269841270e-4,
    1.3888888888888888889e-3,
    8.3333333333333333333e-3,
    4.1666666666666666667e-2,
    1.6666666666666666667e-1,
    0.5,
    1.0,
)
_LOG2E = 1.4426950408889634073599246810018920
_LN2U = 0.69314718055966295651160180568695068359375
_LN2L = 0.28235290563031577122588448175013436025525412068e-12
_EXP_OVERFLOW = 7.09782712893384e02


def _go_exp(x: float) -> float:
    """Go's math.Exp on amd64 with FMA (every x86-64 CPU since ~2013).

    Only the wedge test of NormFloat64 uses it, after rounding to float32, so an ulp
    rarely matters; it is ported anyway so that the stream is exact by construction.
    """
    if math.isnan(x) or x > _EXP_OVERFLOW:
        return x if math.isnan(x) else math.inf
    if x == -math.inf:
        return 0.0
    k = round(x * _LOG2E)  # CVTSD2SL rounds half to even, like Python's round
    kf = float(k)
    r = _fma(-kf, _LN2U, x)
    r = _fma(-kf, _LN2L, r) * 0.0625
    p = _EXP_TAYLOR[0]
    for coeff in _EXP_TAYLOR[1:]:
        p = _fma(p, r, coeff)
    y = r * p
    for _ in range(3):
        y = y * (y + 2.0)
    y = _fma(y + 2.0, y, 1.0)
    return _scale(y, k)


def _scale(y: float, k: int) -> float:
    """Multiply by 2^k the way the assembly does (two steps when 2^k is subnormal)."""
    biased = k + 0x3FF
    if biased >= 0x7FF:
        return math.inf
    if biased > 0:
        return y * math.ldexp(1.0, k)
    if biased < -52:
        return 0.0
    return (y * math.ldexp(1.0, k + 1022)) * math.ldexp(1.0, -1022)


# ----------------------------------------------------------------------- the Rand


def _reject_limit(n: int, bits: int) -> int:
    """Largest accepted raw value for Go's Int31n/Int63n rejection loop (non power of two)."""
    return (1 << bits) - 1 - (1 << bits) % n


class GoRand:
    """Go math/rand v1 (rngSource + Rand) seeded like rand.New(rand.NewSource(seed))."""

    def __init__(self, seed: int) -> None:
        self._source = _LaggedFibonacci(seed)
        self._block = np.empty(0, dtype=np.int64)  # Int63 values; consumed up to _pos
        self._pos = 0
        self._vals: list[int] = []  # _block[_win : _win + _nvals] as Python ints, for speed
        self._win = 0
        self._nvals = 0
        self._window = _SCALAR_WINDOW_MIN  # the size of the next scalar window
        self._reduced: _Reduced | None = None  # the block reduced for one Intn bound

    # -- buffer management

    def _refill_scalar(self) -> None:
        """Make the Python-int view cover the next few unconsumed values of the block (or a
        new one). A small window: bulk draws in between skip over it, and converting the
        whole rest of the block each time cost more than the draws; it grows while scalar
        draws use each window up, and starts small again after a bulk draw skipped one: then
        with one value (`item`), as the reference's generator draws one or two scalars between
        its token arrays."""
        if self._pos == self._win + self._nvals:
            self._window = min(2 * self._window, _SCALAR_WINDOW_MAX)
        else:
            self._window = _SCALAR_WINDOW_MIN
        if self._pos >= self._block.size:
            self._replace(self._generate(_BLOCK))
        self._win = self._pos
        if self._window == _SCALAR_WINDOW_MIN:  # ~7x cheaper than a slice's list
            self._vals = [self._block.item(self._pos)]
        else:
            self._vals = self._block[self._pos : self._pos + self._window].tolist()
        self._nvals = len(self._vals)

    def _replace(self, block: np.ndarray) -> None:
        """Start consuming a new block from its first value."""
        self._block, self._pos, self._win = block, 0, 0
        self._vals, self._nvals, self._reduced = [], 0, None

    def _generate(self, count: int) -> np.ndarray:
        """Next ``count`` Int63 values from the source (Go's Int63 masks the sign bit)."""
        raw = self._source.generate(count)  # overwritten by the next call: masked into a copy
        return np.bitwise_and(raw, np.uint64(_MASK63)).view(np.int64)

    def _peek(self, count: int) -> np.ndarray:
        """Next ``count`` Int63 values without consuming them (extends the block if needed)."""
        avail = self._block.size - self._pos
        if avail < count:
            extra = self._generate(max(count - avail, _BLOCK))
            self._replace(np.concatenate((self._block[self._pos :], extra)))
        return self._block[self._pos : self._pos + count]

    # -- Go's Rand methods

    def int63(self) -> int:
        """Go Rand.Int63: a non-negative 63-bit integer."""
        pos = self._pos
        i = pos - self._win
        if i >= self._nvals:
            self._refill_scalar()
            pos, i = self._pos, 0
        self._pos = pos + 1
        return self._vals[i]

    def uint32(self) -> int:
        """Go Rand.Uint32: the top 32 of the 63 bits."""
        return self.int63() >> 31

    def int31(self) -> int:
        """Go Rand.Int31: the top 31 of the 63 bits."""
        return self.int63() >> 32

    def int31n(self, n: int) -> int:
        """Go Rand.Int31n (mask for powers of two, else modulo with rejection)."""
        return self._bounded(n, 32, "Int31n")

    def int63n(self, n: int) -> int:
        """Go Rand.Int63n (mask for powers of two, else modulo with rejection)."""
        return self._bounded(n, 0, "Int63n")

    def intn(self, n: int) -> int:
        """Go Rand.Intn: Int31n when n fits in int32, else Int63n."""
        if n <= _INT32_MAX:
            return self._bounded(n, 32, "Intn")
        return self._bounded(n, 0, "Intn")

    def _bounded(self, n: int, shift: int, who: str) -> int:
        """Shared body of Int31n/Int63n: raw = Int63 >> shift has 63 - shift bits."""
        if n <= 0:
            raise ValueError(f"invalid argument to {who}: {n}")
        if n & (n - 1) == 0:
            return (self.int63() >> shift) & (n - 1)
        limit = _reject_limit(n, 63 - shift)
        v = self.int63() >> shift
        while v > limit:
            v = self.int63() >> shift
        return v % n

    def float64(self) -> float:
        """Go Rand.Float64: Int63 / 2^63, redrawn in the rare case it rounds up to 1.0."""
        while True:
            f = self.int63() * _TWO_NEG63  # int->float rounds to nearest like Go; scaling is exact
            if f != 1.0:
                return f

    def norm_float64(self) -> float:
        """Go Rand.NormFloat64: Marsaglia-Tsang ziggurat with Go's float32 tables."""
        while True:
            j = self.int63() >> 31
            if j >= 1 << 31:
                j -= 1 << 32  # int32(Uint32()): possibly negative
            i = j & 0x7F
            x = j * _WN[i]
            if abs(j) < _KN[i]:
                return x
            if i == 0:
                return self._norm_tail(j)
            # Go evaluates this side in float32 arithmetic, each operation rounded.
            lhs = _f32(_FN[i] + _f32(_f32(self.float64()) * _FN_STEP[i]))
            if lhs < _f32(_go_exp(-0.5 * x * x)):
                return x

    def _norm_tail(self, j: int) -> float:
        """Base-strip tail of the ziggurat (Marsaglia's exponential rejection beyond rn)."""
        while True:
            x = -_go_log(self.float64()) * _INV_RN
            y = -_go_log(self.float64())
            if y + y >= x * x:
                break
        return _RN + x if j > 0 else -_RN - x

    # -- bulk draws

    def intn_array(self, n: int, count: int) -> np.ndarray:
        """``count`` successive Intn(n) results as int64, consuming the stream identically."""
        if n <= 0:
            raise ValueError(f"invalid argument to Intn: {n}")
        if count <= 0:
            return np.empty(0, dtype=np.int64)
        shift = 32 if n <= _INT32_MAX else 0
        if n & (n - 1) == 0:
            raw = self._peek(count) >> shift
            self._pos += count
            return raw & (n - 1)
        self._peek(count)  # so that the whole draw lies in one block, reduced once
        reduced = self._reduced
        if reduced is None or reduced.bound != (n, shift):
            reduced = self._reduced = _Reduced.of(self._block, n, shift)
        start = self._pos
        if not reduced.rejects_in(start, start + count):
            self._pos = start + count
            return reduced.values[start : start + count]
        return self._bounded_array(n, count, shift)

    def _bounded_array(self, n: int, count: int, shift: int) -> np.ndarray:
        """Vectorised rejection loop: rejected raw draws are consumed and skipped, as in Go."""
        limit = _reject_limit(n, 63 - shift)
        p_reject = ((1 << (63 - shift)) - 1 - limit) / (1 << (63 - shift))
        want = count + int(count * p_reject * 1.2) + 16
        while True:
            raw = self._peek(want) >> shift
            ok = raw <= limit
            if ok[:count].all():
                self._pos += count
                return raw[:count] % n
            accepted = np.flatnonzero(ok)
            if accepted.size >= count:
                self._pos += int(accepted[count - 1]) + 1
                return raw[accepted[:count]] % n
            want *= 2


@dataclass(frozen=True, slots=True)
class _Reduced:
    """A block of Int63 values as Intn(n) results, computed once for the whole block so that
    each bulk draw is a slice; the positions Go's rejection loop would skip (rare: ~n/2^31)
    are kept so a draw that meets one takes the exact path."""

    bound: tuple[int, int]  # (n, shift)
    values: np.ndarray
    rejected: list[int]

    @classmethod
    def of(cls, block: np.ndarray, n: int, shift: int) -> _Reduced:
        if shift == 32:  # 31-bit draws: the remainder in 32 bits, by a division numpy does
            # with a precomputed multiplier for a scalar divisor (`%` divides each value, and
            # in 64 bits: ~5x slower)
            high = (block >> 32).astype(np.uint32)
            rejected = np.flatnonzero(high > _reject_limit(n, 31)).tolist()
            bound = np.uint32(n)
            quotient = high // bound
            quotient *= bound
            high -= quotient
            return cls((n, shift), high.astype(np.int64), rejected)
        raw = block >> shift
        rejected = np.flatnonzero(raw > _reject_limit(n, 63 - shift)).tolist()
        return cls((n, shift), raw % n, rejected)

    def rejects_in(self, start: int, stop: int) -> bool:
        """Whether a rejected value lies in [start, stop)."""
        i = bisect_left(self.rejected, start)
        return i < len(self.rejected) and self.rejected[i] < stop


# ------------------------------------------------------------------- seed helpers


def fnv1a64(name: str) -> int:
    """FNV-1a 64-bit hash of the UTF-8 bytes (Go's hash/fnv New64a), as an unsigned int."""
    h = 0xCBF29CE484222325
    for byte in name.encode("utf-8"):
        h = ((h ^ byte) * 0x100000001B3) & _MASK64
    return h


def derived_seed(seed: int, name: str) -> int:
    """Go: ``seed ^ int64(fnv1a64(name))`` — a per-subsystem seed as a signed int64."""
    return _to_int64(_to_int64(seed) ^ _to_int64(fnv1a64(name)))
