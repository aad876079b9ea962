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

from blis_simpy.metrics.columns import Table, csv_cells

TEXT = st.text(alphabet=st.sampled_from(list('ab ,"\r\n\t;\'é')), max_size=6)
FLOATS = st.floats(allow_nan=True, allow_infinity=True, width=64)


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
    return st.lists(st.one_of(st.none(), st.integers(), st.just(math.nan), TEXT),
                    min_size=rows, max_size=rows)  # a mixed Python list


@st.composite
def tables(draw: st.DrawFn) -> Table:
    rows = draw(st.integers(0, 6))
    kinds = draw(st.lists(st.sampled_from(["text", "float", "float32", "int", "mixed"]),
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
    table = Table({"a": np.arange(10), "b": [f"x{i}" if i % 2 else "y,z" for i in range(10)]})
    table.write_csv(tmp_path / "t.csv")
    assert (tmp_path / "t.csv").read_bytes() == through_csv_writer(table).encode()
