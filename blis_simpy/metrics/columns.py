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
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

Column = np.ndarray | Sequence[Any]
CHUNK = 65_536  # rows formatted at a time when writing CSV
QUOTED = re.compile('[,"\r\n]')  # what can make the csv module quote a cell
LONE_EMPTY = '""'  # a row whose only cell is empty, as the csv module writes it (not a blank line)


@dataclass(frozen=True, eq=False)
class Table:
    """Equal-length columns by name, in output order."""

    columns: dict[str, Column]

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def __getitem__(self, name: str) -> Column:
        return self.columns[name]

    def array(self, name: str) -> np.ndarray:
        return np.asarray(self.columns[name])

    def frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(self.columns)

    def write_csv(self, path: Path) -> None:
        with path.open("w", newline="", encoding="utf-8") as f:
            names = quoted(list(self.columns))
            f.write((",".join(names) if names != [""] else LONE_EMPTY) + "\n")
            for start in range(0, len(self), CHUNK):
                f.write("\n".join(map(",".join, self.rows(start, start + CHUNK))) + "\n")

    def rows(self, start: int = 0, stop: int | None = None) -> Iterator[tuple[str, ...]]:
        """Rows start..stop-1 as CSV cells, quoted where needed (a chunk at a time keeps the
        text of a million-row table out of memory)."""
        cells = [csv_cells(values[start:stop]) for values in self.columns.values()]
        if len(cells) == 1:  # a one-column table's cells are whole rows
            cells[0] = [c or LONE_EMPTY for c in cells[0]]
        return zip(*cells, strict=True)


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
