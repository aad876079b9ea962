"""Why the run store is SQLite: the two formats the issue named, measured at the store's job.

A sweep must have each finished evaluation on disk before the next one finishes (a killed
sweep keeps everything it did), and must find whether a run is already there by its key. So
each format writes N real sweep rows one at a time, each durable on its own, then looks up
every key once:

* SQLite: `blis_simpy.search.store.RunStore` (one INSERT per row in WAL mode, a primary-key
  lookup);
* Parquet (pyarrow): one file per row (a Parquet file cannot be appended to; rewriting one
  growing file costs O(N) per row), the lookup reading every file's key column.

    python scripts/store_formats.py [--rows 1000]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any


def sweep_row() -> dict[str, Any]:
    """A real row of a sweep (one run of a small scenario), as the store keeps it."""
    from blis_simpy.search.store import normalised
    from blis_simpy.search.sweep import LABELS, run_many

    table = run_many("quickstart", {"rr": None}, [1], workers=1)
    return normalised({k: v for k, v in table.iloc[0].items() if k not in LABELS})


def sqlite_store(folder: Path, rows: list[tuple[str, dict[str, Any]]]) -> tuple[float, float]:
    from blis_simpy.search.store import RunStore

    store = RunStore(folder / "runs.sqlite")
    started = time.perf_counter()
    for key, row in rows:
        store.put(key, row)
    written = time.perf_counter() - started
    started = time.perf_counter()
    found = store.get(key for key, _ in rows)
    assert len(found) == len(rows)
    return written, time.perf_counter() - started


def parquet_store(folder: Path, rows: list[tuple[str, dict[str, Any]]]) -> tuple[float, float]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    started = time.perf_counter()
    for key, row in rows:
        table = pa.Table.from_pylist([{"key": key, "row": json.dumps(row)}])
        pq.write_table(table, folder / f"{key}.parquet")
    written = time.perf_counter() - started
    started = time.perf_counter()
    keys = set(pq.read_table(folder, columns=["key"]).column("key").to_pylist())
    assert keys == {key for key, _ in rows}
    return written, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000)
    args = parser.parse_args()
    row = sweep_row()
    rows = [(f"{i:064x}", row) for i in range(args.rows)]
    print(f"{args.rows} rows of {len(json.dumps(row))} bytes (JSON), each written durably")
    for name, store in (("SQLite", sqlite_store), ("Parquet", parquet_store)):
        with tempfile.TemporaryDirectory() as tmp:
            written, looked_up = store(Path(tmp), rows)
            size = sum(p.stat().st_size for p in Path(tmp).rglob("*"))
        print(f"{name:<8} write {written / args.rows * 1e3:6.2f} ms/row  "
              f"look up all {looked_up * 1e3:7.1f} ms  on disk {size / 1e6:5.1f} MB")


if __name__ == "__main__":
    main()
