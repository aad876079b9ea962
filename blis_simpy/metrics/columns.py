"""A finished run's tables as named columns (numpy arrays and lists), written to CSV straight
from them; a pandas DataFrame is built only when someone asks for one.

pandas costs about a third of a second to import and a DataFrame's `to_csv` is slower than
formatting whole columns at once, so a command-line run (which only writes files) never
imports it. The CSV text is the same bytes `DataFrame.to_csv(index=False,
lineterminator="\\n")` writes: pandas formats a float column with numpy's shortest
round-trip `str` and leaves NaN empty, other values with `str`, and quotes through Python's
csv module. Rows are joined with commas directly (4-5x faster than `csv.writer`); the few
cells the csv module would quote (a comma, a quote or a line break in a text column) are
quoted by that module, so the bytes stay the same.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, overload

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

Column = np.ndarray | Sequence[Any]
CHUNK = 65_536  # rows formatted at a time when writing CSV
QUOTED = re.compile('[,"\r\n]')  # what can make the csv module quote a cell
LONE_EMPTY = '""'  # a row whose only cell is empty, as the csv module writes it (not a blank line)


class Coded(Sequence[str]):
    """A text column of few distinct values (each step's instance id) held as an int code per
    row into its values: a million-row column is one array, its CSV cells each value's bytes
    repeated (`cell_matrix`), never a million strings. Reads like the list of strings."""

    __slots__ = ("codes", "values")

    def __init__(self, values: Sequence[str], codes: np.ndarray) -> None:
        self.values = list(values)
        self.codes = codes

    def __len__(self) -> int:
        return len(self.codes)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> Coded: ...

    @overload
    def __getitem__(self, index: np.ndarray) -> Coded: ...

    def __getitem__(self, index: int | slice | np.ndarray) -> str | Coded:
        if isinstance(index, slice | np.ndarray):  # rows, or rows picked or reordered
            return Coded(self.values, self.codes[index])
        return self.values[self.codes[index]]

    def __iter__(self) -> Iterator[str]:
        return map(self.values.__getitem__, self.codes.tolist())

    def tolist(self) -> list[str]:
        return list(self)


def plain(values: Column) -> Column:
    """A column as pandas and numpy take it (a coded one as its list of strings)."""
    return values.tolist() if isinstance(values, Coded) else values


@dataclass(frozen=True, eq=False)
class Table:
    """Equal-length columns by name, in output order."""

    columns: dict[str, Column]

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def __getitem__(self, name: str) -> Column:
        return self.columns[name]

    def array(self, name: str) -> np.ndarray:
        return np.asarray(plain(self.columns[name]))

    def frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame({name: plain(values) for name, values in self.columns.items()})

    def write_csv(self, path: Path) -> None:
        with path.open("wb") as f:
            self.write_header(f)
            self.write_rows(f)

    def write_header(self, f: BinaryIO) -> None:
        names = quoted(list(self.columns))
        f.write(((",".join(names) if names != [""] else LONE_EMPTY) + "\n").encode())

    def write_rows(self, f: BinaryIO) -> None:
        for start in range(0, len(self), CHUNK):
            stop = start + CHUNK
            text = self.csv_bytes(start, stop)
            if text is None:
                rows = self.rows(start, stop)
                text = ("\n".join(map(",".join, rows)) + "\n").encode()
            f.write(text)

    def csv_bytes(self, start: int, stop: int) -> bytes | None:
        """Rows start..stop-1 as CSV text built as one byte matrix (`cell_matrix`): each
        column's cells NUL-padded to one width, commas and line ends between them, then the
        padding dropped. None for a one-column table or a column with text that is not plain
        ASCII; those go cell by cell."""
        if len(self.columns) < 2:
            return None
        blocks = []
        for values in self.columns.values():
            block = cell_matrix(values[start:stop])
            if block is None:
                return None
            blocks.append(block)
        return side_by_side(blocks).tobytes().translate(None, b"\0")

    def rows(self, start: int = 0, stop: int | None = None) -> Iterator[tuple[str, ...]]:
        """Rows start..stop-1 as CSV cells, quoted where needed (a chunk at a time keeps the
        text of a million-row table out of memory)."""
        cells = [csv_cells(values[start:stop]) for values in self.columns.values()]
        if len(cells) == 1:  # a one-column table's cells are whole rows
            cells[0] = [c or LONE_EMPTY for c in cells[0]]
        return zip(*cells, strict=True)


class TableWriter:
    """A table written as its rows come, a chunk at a time (a streaming run's requests and
    steps): CSV appended (the bytes `Table.write_csv` writes for the whole table), or Parquet
    one row group per chunk, each chunk's columns cast to the first one's types. The file
    exists from the start, with the header alone until rows come."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.parquet: Any = None  # pyarrow's ParquetWriter, opened with the first chunk
        self.handle: BinaryIO | None = None if path.suffix == ".parquet" else path.open("wb")
        self.started = False

    def write(self, table: Table) -> None:
        if self.handle is not None:
            if not self.started:
                table.write_header(self.handle)
            table.write_rows(self.handle)
        else:
            import pyarrow as pa  # type: ignore[import-not-found]
            import pyarrow.parquet as pq  # type: ignore[import-not-found]

            chunk = pa.Table.from_pandas(table.frame(), preserve_index=False)
            if self.parquet is None:
                self.parquet = pq.ParquetWriter(self.path, chunk.schema)
            self.parquet.write_table(chunk.cast(self.parquet.schema))
        self.started = True

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
        elif self.parquet is not None:
            self.parquet.close()

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def quoted(cells: list[str]) -> list[str]:
    """Text cells as the csv module writes them, the whole column checked at once: nearly
    always none needs quoting."""
    if not QUOTED.search("".join(cells)):
        return cells
    return [csv_field(c) if QUOTED.search(c) else c for c in cells]


def csv_field(cell: str) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow([cell, ""])
    return out.getvalue()[:-2]  # the cell, then the comma and line end of the empty one


def csv_cells(values: Column) -> list[str]:
    """One column as pandas writes it: floats by numpy's str with NaN empty, the rest by
    str with None empty."""
    if isinstance(values, np.ndarray) and values.dtype == np.float64:
        # Python's float repr is numpy's shortest round-trip str, 2.5x faster per cell
        cells = list(map(repr, values.tolist()))
        for i in np.flatnonzero(np.isnan(values)).tolist():
            cells[i] = ""
        return cells
    if isinstance(values, np.ndarray) and values.dtype.kind == "f":
        text = values.astype(str)
        text[np.isnan(values)] = ""
        return text.tolist()
    if isinstance(values, np.ndarray) and values.dtype.kind in "iub":
        return list(map(str, values.tolist()))
    return quoted(["" if v is None or (isinstance(v, float) and v != v) else str(v)
                   for v in values])


# ----------------------------------------------------------------- cells as byte matrices

FEW = 4  # a column has few distinct values when it has at most a quarter as many as rows
PROBE = 1024  # rows looked at to guess whether a float column has few distinct values
# The sort is skipped only when nearly every probed value is distinct: a column of levels can
# start with many (each step's KV utilisation as the pools fill up: 829 of the 10K bench's
# first 1,024 steps, 3,380 of its 27,269).
ALL_DISTINCT = 7 / 8
MAX_DIGITS = 15  # decimals of at most this many digits are what a double's repr prints


def cell_matrix(values: Column) -> np.ndarray | None:
    """A column's CSV cells (as `csv_cells` writes them) as a (rows x width) uint8 matrix of
    ASCII, each cell NUL-padded. A column with few distinct values (levels, counts, step
    times, instance ids) has each value's cell made once and repeated (`np.take` of its
    rows). Integers are written in decimal with numpy; a float column whose every value is a
    decimal of at most 3 or 6 places (times in ms and s made from integer µs) likewise;
    anything else is formatted by `csv_cells` first. None when a cell is not plain ASCII (or
    holds a NUL)."""
    if isinstance(values, np.ndarray) and values.dtype.kind in "iu" and len(values) \
            and int(values.min()) > -10**18 and int(values.max()) < 10**18:
        whole = values.astype(np.int64)
        low, high = int(whole.min()), int(whole.max())
        if high - low < len(whole) // FEW:  # levels and counts: each value written once
            return np.take(int_matrix(np.arange(low, high + 1)), whole - low, axis=0)
        return int_matrix(whole)
    if isinstance(values, np.ndarray) and values.dtype in (np.float64, np.float32) \
            and len(values):
        block = distinct_matrix(values)
        if block is None and values.dtype == np.float64:
            block = decimal_matrix(values)
        if block is not None:
            return block
    if isinstance(values, Coded) and len(values):
        table = ascii_matrix(quoted(values.values))  # each value's cell once
        return None if table is None else np.take(table, values.codes, axis=0)
    if type(values) is list and values and set(map(type, values)) == {str}:
        distinct = list(dict.fromkeys(values))
        if len(distinct) > max(len(values) // FEW, 1):
            return ascii_matrix(quoted(values))
        table = ascii_matrix(quoted(distinct))  # instance ids, tenants, states: each once
        if table is None:
            return None
        if len(distinct) == 1:  # a constant column (one model, no tenants)
            return np.repeat(table, len(values), axis=0)
        index = {cell: i for i, cell in enumerate(distinct)}
        return np.take(table, np.fromiter(map(index.__getitem__, values), np.intp, len(values)),
                       axis=0)
    return ascii_matrix(csv_cells(values))


def side_by_side(blocks: list[np.ndarray]) -> np.ndarray:
    """Cell matrices of equal rows as one matrix, a comma after each one's cells and a line
    end after the last's. Each is copied in as one column of `width`-byte items (a field of
    a structured view): `np.concatenate(axis=1)` copies each row of each block on its own, a
    call per cell (a million for a 10K run's tables), ~3x slower."""
    widths = [block.shape[1] for block in blocks]
    offsets = np.cumsum([0] + [w + 1 for w in widths[:-1]]).tolist()
    out = np.full((len(blocks[0]), sum(widths) + len(widths)), ord(","), dtype=np.uint8)
    kept = [i for i, w in enumerate(widths) if w]
    fields = np.dtype({"names": [f"c{i}" for i in kept],
                       "formats": [f"V{widths[i]}" for i in kept],
                       "offsets": [offsets[i] for i in kept], "itemsize": out.shape[1]})
    rows = out.view(fields).reshape(-1)
    for i in kept:
        rows[f"c{i}"] = np.ascontiguousarray(blocks[i]).view(f"V{widths[i]}").reshape(-1)
    out[:, -1] = ord("\n")
    return out


def int_matrix(whole: np.ndarray) -> np.ndarray:
    return join_parts(whole < 0, digits(np.abs(whole)))


def distinct_matrix(values: np.ndarray) -> np.ndarray | None:
    """A float column with few distinct values (step times, utilisation levels): each
    distinct value's cell made once, then one row of that small matrix per value. Values are
    told apart by their bits, so -0.0 and 0.0 stay apart. None when the first rows are
    nearly all distinct (the sort would not pay), when more than a quarter of all rows are,
    or when `cell_matrix` declines the distinct values."""
    bits = values.view(f"u{values.dtype.itemsize}")
    probed = min(len(values), PROBE)
    if np.count_nonzero(np.diff(np.sort(bits[:PROBE]))) >= int(probed * ALL_DISTINCT):
        return None
    distinct, inverse = distinct_and_inverse(bits)
    if len(distinct) > len(values) // FEW:
        return None
    table = cell_matrix(distinct.view(values.dtype))
    return None if table is None else np.take(table, inverse, axis=0)


def distinct_and_inverse(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sorted distinct keys and each key's position among them: what `np.unique(keys,
    return_inverse=True)` gives, without the numpy.ma import numpy 2.3's `unique` makes
    (a command-line run never loads it)."""
    order = np.argsort(keys)
    ordered = keys[order]
    first = np.empty(len(keys), dtype=bool)
    first[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    inverse = np.empty(len(keys), dtype=np.intp)
    inverse[order] = np.cumsum(first) - 1
    return ordered[first], inverse


def ascii_matrix(cells: list[str]) -> np.ndarray | None:
    joined = "".join(cells)
    if not joined.isascii() or "\0" in joined:
        return None
    array = np.array(cells, dtype="S")
    return array.view(np.uint8).reshape(len(cells), array.dtype.itemsize)


def digits(values: np.ndarray, width: int | None = None) -> np.ndarray:
    """Non-negative int64 values in decimal, right-aligned, leading zeros as NUL (0 is "0");
    with `width`, exactly that many digits with their leading zeros (a fraction's). Four
    digits per division, each group looked up as one 32-bit word of ASCII: a group below the
    value's leading digit with all its zeros, the leading one (what is left before its
    division is under 10,000) from a table without the leading zeros."""
    pad = width is None
    if width is None:
        width = len(str(int(values.max()))) if len(values) else 1
    groups = -(-width // 4)
    words = np.empty((len(values), groups), dtype=np.uint32)
    rest = values
    for group in range(groups - 1, -1, -1):
        left = rest
        rest, four = np.divmod(left, 10_000)
        if not pad:
            words[:, group] = four_digit_words(4)[four]
        else:  # a leading group: "0012" -> "12"; "0000" -> "" ("0" when it is the last)
            leading = four_digit_words(0 if group < groups - 1 else 1)[four]
            words[:, group] = np.where(left >= 10_000, four_digit_words(4)[four], leading)
    return words.view(np.uint8)[:, 4 * groups - width:]


@cache  # built on first use: a run that writes no table pays nothing at import
def four_digit_words(keep: int) -> np.ndarray:
    """"0000" to "9999" as 32-bit words of their ASCII bytes, the zeros before the leading
    digit turned to NUL except the last `keep` places: 4 keeps them all, 1 keeps "0" as
    "0", 0 turns "0000" into nothing (a group above the value's leading digit)."""
    number = np.arange(10_000)
    place = 10 ** np.arange(3, -1, -1)
    text = (number[:, None] // place % 10 + ord("0")).astype(np.uint8)
    text[(number[:, None] < place) & (place >= 10**keep)] = 0
    return text.view(np.uint32).ravel()


def join_parts(negative: np.ndarray, *parts: np.ndarray) -> np.ndarray:
    sign = np.where(negative, ord("-"), 0).astype(np.uint8)[:, None]
    return np.concatenate((sign, *parts), axis=1)


def decimal_matrix(values: np.ndarray) -> np.ndarray | None:
    """Floats that are each the double nearest to n / 10^places (places 3, else 6) with
    |n| < 10^15, written as Python's repr writes them: such a value has at most 15 digits,
    and distinct decimals of at most 15 digits are distinct doubles, so repr's shortest
    round-trip digits are n's, with the point put back and trailing zeros dropped (at least
    one digit after the point). NaN is an empty cell. None when some value is not such a
    decimal, is infinite, or is non-zero below 1e-4 (which repr writes with an exponent).
    Each number of places is tried on the first rows before the whole column (seconds made
    from µs fail 3 places at once)."""
    nan = np.isnan(values)
    finite = np.where(nan, 0.0, values)
    if not np.isfinite(finite).all() or ((finite != 0) & (np.abs(finite) < 1e-4)).any():
        return None
    for places in (3, 6):
        if scaled_whole(finite[:PROBE], places) is None:
            continue
        whole = scaled_whole(finite, places)
        if whole is not None:
            return decimal_cells(np.signbit(values) & ~nan, whole, places, nan)
    return None


def scaled_whole(finite: np.ndarray, places: int) -> np.ndarray | None:
    """|n| for each value that is the double nearest to n / 10^places with |n| < 10^15;
    None when some value is not."""
    scale = 10**places
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = np.rint(finite * scale)
    if not np.abs(scaled).max() < 10**MAX_DIGITS:
        return None
    whole = np.abs(scaled).astype(np.int64)
    return whole if (np.where(finite < 0, -whole, whole) / scale == finite).all() else None


def decimal_cells(negative: np.ndarray, whole: np.ndarray, places: int, empty: np.ndarray
                  ) -> np.ndarray:
    integral, fraction = np.divmod(whole, 10**places)
    tail = digits(fraction, places)
    trailing = np.logical_and.accumulate(tail[:, :0:-1] == ord("0"), axis=1)
    tail[:, :0:-1][trailing] = 0  # trailing zeros dropped, the first digit kept
    point = np.full((len(whole), 1), ord("."), dtype=np.uint8)
    matrix = join_parts(negative, digits(integral), point, tail)
    matrix[empty] = 0
    return matrix
