"""`Table.write_csv` joins cells itself instead of going through `csv.writer` row by row; it
must write exactly the bytes `csv.writer` writes (and so `DataFrame.to_csv`), whatever the
text: commas, quotes, line breaks, empty cells, one-column tables, no rows."""

from __future__ import annotations

import csv
import io
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from blis_simpy.metrics.columns import (
    FEW,
    Coded,
    Table,
    cell_matrix,
    csv_cells,
    decimal_matrix,
    digits,
    distinct_matrix,
)

TEXT = st.text(alphabet=st.sampled_from(list('ab ,"\r\n\t;\'é')), max_size=6)
FLOATS = st.floats(allow_nan=True, allow_infinity=True, width=64)
LEVELS = [0.0, -0.0, math.nan, math.inf, -math.inf, 0.1, 1 / 3, 5e-05, 1e16, 2.5, -7.0,
          6.84814244136278e-05]  # repr with and without an exponent, signed zeros


def column(kind: str, rows: int) -> st.SearchStrategy:
    if kind == "text":
        return st.lists(st.one_of(st.none(), TEXT, st.just("")), min_size=rows, max_size=rows)
    if kind == "float":
        return st.lists(FLOATS, min_size=rows, max_size=rows).map(
            lambda v: np.array(v, dtype=np.float64))
    if kind == "float32":
        return st.lists(st.floats(width=32), min_size=rows, max_size=rows).map(
            lambda v: np.array(v, dtype=np.float32))
    if kind == "int":
        return st.lists(st.integers(-2**62, 2**62), min_size=rows, max_size=rows).map(np.array)
    if kind == "levels":  # few distinct values, each repeated: written once per value
        return st.one_of(
            st.lists(st.sampled_from(LEVELS), min_size=rows, max_size=rows).map(
                lambda v: np.array(v, dtype=np.float64)),
            st.tuples(st.integers(-10**17, 10**17), st.lists(st.integers(0, 3), min_size=rows,
                                                            max_size=rows)).map(
                lambda case: case[0] + np.array(case[1], dtype=np.int64)),
            st.lists(st.sampled_from(["a", "b,c", 'q"', "é", ""]), min_size=rows,
                     max_size=rows))
    if kind == "coded":  # text as codes into its values (each step's instance id)
        return st.tuples(st.lists(TEXT, min_size=1, max_size=4),
                         st.lists(st.integers(0, 3), min_size=rows, max_size=rows)).map(
            lambda case: Coded(case[0], np.array(case[1], dtype=np.int64) % len(case[0])))
    return st.lists(st.one_of(st.none(), st.integers(), st.just(math.nan), TEXT),
                    min_size=rows, max_size=rows)  # a mixed Python list


@st.composite
def tables(draw: st.DrawFn) -> Table:
    rows = draw(st.integers(0, 6) | st.integers(8, 40))
    kinds = draw(st.lists(st.sampled_from(["text", "float", "float32", "int", "mixed",
                                           "levels", "coded"]),
                          min_size=0, max_size=4))
    names = draw(st.lists(TEXT, min_size=len(kinds), max_size=len(kinds), unique=True))
    return Table({name: draw(column(kind, rows)) for name, kind in zip(names, kinds,
                                                                        strict=True)})


def through_csv_writer(table: Table) -> str:
    """What the writer used to do: every row through `csv.writer`."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(list(table.columns))
    writer.writerows(zip(*(unquoted_cells(v) for v in table.columns.values()), strict=True))
    return out.getvalue()


def unquoted_cells(values) -> list[str]:
    if isinstance(values, np.ndarray):
        return csv_cells(values)
    return ["" if v is None or (isinstance(v, float) and v != v) else str(v) for v in values]


@settings(max_examples=300, deadline=None)
@given(tables())
def test_write_csv_is_byte_identical_to_csv_writer(tmp_path_factory, table):
    path = tmp_path_factory.mktemp("csv") / "t.csv"
    table.write_csv(path)
    assert path.read_bytes() == through_csv_writer(table).encode("utf-8")


def test_lone_empty_cells_and_quoted_names_match_csv_writer(tmp_path):
    for table in (Table({"": ["", None, "a"]}), Table({'say "hi"': [""], "b,c": ["\r\n"]}),
                  Table({}), Table({"a": []})):
        table.write_csv(tmp_path / "t.csv")
        assert (tmp_path / "t.csv").read_bytes() == through_csv_writer(table).encode()


def test_a_table_longer_than_a_chunk_is_written_whole(tmp_path, monkeypatch):
    from blis_simpy.metrics import columns

    monkeypatch.setattr(columns, "CHUNK", 3)
    table = Table({"a": np.arange(10), "b": [f"x{i}" if i % 2 else "y,z" for i in range(10)],
                   "c": Coded(["instance_1", "i,0"], np.arange(10) % 3 // 2)})
    table.write_csv(tmp_path / "t.csv")
    assert (tmp_path / "t.csv").read_bytes() == through_csv_writer(table).encode()


def test_a_coded_column_reads_and_frames_as_its_strings():
    values = ["instance_1", "instance_0", "é"]
    codes = np.array([2, 0, 0, 1, 2])
    coded, strings = Coded(values, codes), [values[c] for c in codes]
    assert list(coded) == coded.tolist() == strings and len(coded) == 5
    assert coded[3] == "instance_0" and list(coded[1:4]) == strings[1:4]
    assert list(coded[np.array([4, 0])]) == [strings[4], strings[0]]
    table = Table({"instance": coded, "n": np.arange(5)})
    assert table.frame().equals(Table({"instance": strings, "n": np.arange(5)}).frame())
    assert table.array("instance").tolist() == strings


def matrix_cells(values) -> list[str] | None:
    """`cell_matrix`'s cells as text (None when it declines the column)."""
    matrix = cell_matrix(values)
    return None if matrix is None else [bytes(row[row != 0]).decode() for row in matrix]


DECIMALS = st.tuples(st.lists(st.integers(-10**15, 10**15), min_size=1, max_size=30),
                     st.sampled_from([1, 10, 1000, 10**6, 10**7])).map(
    lambda case: np.array(case[0], dtype=np.int64) / case[1])


@settings(max_examples=500, deadline=None)
@given(st.one_of(DECIMALS, DECIMALS.map(lambda v: np.where(v > 1e9, np.nan, v)),
                 st.lists(FLOATS, min_size=1, max_size=10).map(np.array)))
def test_float_cells_from_the_byte_matrix_are_repr(values):
    assert matrix_cells(values) in (csv_cells(values), None)


def test_decimal_floats_take_the_byte_matrix():
    values = np.array([0.0, -0.0, 1.5, -2.25, 0.001, 123456789.123, np.nan, 3.0, 1e-4])
    assert matrix_cells(values) == csv_cells(values)
    assert decimal_matrix(values) is not None
    exponent = np.array([1.0, 5e-05])  # repr writes 5e-05: formatted cell by cell
    assert decimal_matrix(exponent) is None and matrix_cells(exponent) == ["1.0", "5e-05"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-2**63, 2**63 - 1), min_size=1, max_size=20))
def test_int_cells_from_the_byte_matrix_are_str(values):
    array = np.array(values, dtype=np.int64)
    assert matrix_cells(array) in (csv_cells(array), None)
    assert matrix_cells(np.array([0, -1, 10, 999, -10**17], dtype=np.int64)) == [
        "0", "-1", "10", "999", str(-10**17)]


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.lists(st.sampled_from(LEVELS), min_size=1, max_size=40),
                 st.lists(FLOATS, min_size=1, max_size=3).flatmap(
                     lambda pool: st.lists(st.sampled_from(pool), min_size=1, max_size=40))),
       st.sampled_from([np.float64, np.float32]))
def test_few_distinct_float_cells_are_each_values_repr(values, dtype):
    with np.errstate(over="ignore"):  # float64 values past float32's range: inf
        array = np.array(values, dtype=dtype)
    assert matrix_cells(array) == csv_cells(array)
    if len(set(array.view(f"u{array.itemsize}").tolist())) <= len(array) // FEW:
        assert distinct_matrix(array) is not None  # the path under test was taken


@settings(max_examples=300, deadline=None)
@given(st.integers(-10**18 + 1, 10**18 - 10), st.lists(st.integers(0, 9), min_size=1,
                                                       max_size=60))
def test_narrow_range_int_cells_are_str(low, offsets):
    array = low + np.array(offsets, dtype=np.int64)
    assert matrix_cells(array) == csv_cells(array)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["instance_0", "b,c", 'q"', "line\nbreak", "", "x"]),
                min_size=1, max_size=40))
def test_few_distinct_text_cells_are_quoted_like_csv_writer(values):
    assert matrix_cells(values) == csv_cells(values)
    assert matrix_cells([*values, "é"] * 5) is None  # not plain ASCII: cell by cell


def test_the_few_distinct_paths_are_taken_on_levels_and_skipped_on_distinct_values():
    levels = np.tile(np.array([0.25, 1 / 3, 5e-05, -0.0]), 100)
    assert distinct_matrix(levels) is not None
    assert distinct_matrix(np.arange(400) / 7) is None
    # Levels that start with many distinct values (KV utilisation while the pools fill up)
    ramp = np.concatenate([np.arange(700), np.tile(np.arange(100), 100)]) / 29_205
    assert distinct_matrix(ramp) is not None
    assert matrix_cells(ramp) == csv_cells(ramp)
    for dtype in (np.float16, np.longdouble):  # other widths: cell by cell, as before
        odd = levels.astype(dtype)
        assert matrix_cells(odd) == csv_cells(odd)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 10**18 - 1), st.sampled_from(
    [0, 9, 10, 9999, 10_000, 99_999_999, 10**8, 10**12, 10**16])), min_size=1, max_size=30),
    st.integers(1, 19))
def test_digits_are_the_decimal_text_four_at_a_time(values, width):
    array = np.array(values, dtype=np.int64)
    assert [bytes(row[row != 0]).decode() for row in digits(array)] == list(map(str, values))
    fixed = array % 10**width if width < 19 else array
    assert [bytes(row).decode() for row in digits(fixed, width)] == [
        str(v).zfill(width) for v in fixed.tolist()]
