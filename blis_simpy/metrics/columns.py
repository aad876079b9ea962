"""A finished run's tables as named columns (numpy arrays and lists), written to CSV straight
from them; a pandas DataFrame is built only when someone asks for one.

pandas costs about a third of a second to import and a DataFrame's `to_csv` is slower than
formatting whole columns at once, so a command-line run (which only writes files) never
imports it. The CSV text is the same bytes `DataFrame.to_csv(index=False,
lineterminator="\\n")` writes: pandas formats a float column with numpy's shortest
round-trip `str` and leaves NaN empty, other values with `str`, and quotes through Python's
csv module with the same settings used here.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

Column = np.ndarray | Sequence[Any]
CHUNK = 65_536  # rows formatted at a time when writing CSV


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
            writer = csv.writer(f, lineterminator="\n")
            writer.writerow(list(self.columns))
            for start in range(0, len(self), CHUNK):
                writer.writerows(self.rows(start, start + CHUNK))

    def rows(self, start: int = 0, stop: int | None = None) -> Iterator[tuple[str, ...]]:
        """Rows start..stop-1 as CSV cells (a chunk at a time keeps the text of a
        million-row table out of memory)."""
        return zip(*(csv_cells(values[start:stop]) for values in self.columns.values()),
                   strict=True)


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
    return ["" if v is None or (isinstance(v, float) and v != v) else str(v) for v in values]
