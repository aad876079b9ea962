"""Writing a result's tables: two at a time, the same bytes, failures raised to the caller."""

from __future__ import annotations

import numpy as np
import pytest

from blis_simpy.metrics.columns import Table
from blis_simpy.sim import result as result_module
from blis_simpy.sim.result import write_tables


def tables(count: int) -> list[Table]:
    return [Table({"a": np.arange(n * 1000), "b": np.arange(n * 1000) / 8})
            for n in range(1, count + 1)]


def test_tables_written_two_at_a_time_are_the_bytes_of_one_at_a_time(tmp_path):
    made = tables(5)
    write_tables([(table, tmp_path / f"t{i}.csv") for i, table in enumerate(made)])
    for i, table in enumerate(made):
        table.write_csv(tmp_path / "serial.csv")
        assert (tmp_path / f"t{i}.csv").read_bytes() == (tmp_path / "serial.csv").read_bytes()


def test_a_failed_table_write_is_raised_in_the_callers_thread(tmp_path, monkeypatch):
    real = result_module.write_table

    def full_disk(table, path):
        if path.name == "t2.csv":
            raise OSError(28, "No space left on device")
        real(table, path)

    monkeypatch.setattr(result_module, "write_table", full_disk)
    with pytest.raises(OSError, match="No space left"):
        write_tables([(table, tmp_path / f"t{i}.csv") for i, table in enumerate(tables(4))])


def test_the_text_files_are_written_while_the_longest_table_is(tmp_path, monkeypatch):
    """`meanwhile` runs on the caller's thread while the helper takes the tables; a failure
    in it stops the tables not yet started and is raised once the helper's table is done."""
    real = result_module.write_table
    started, finished = [], []

    def watched(table, path):
        started.append(path.name)
        real(table, path)
        finished.append(path.name)

    monkeypatch.setattr(result_module, "write_table", watched)

    def texts():
        (tmp_path / "summary.json").write_text("{}\n")

    write_tables([(table, tmp_path / f"t{i}.csv") for i, table in enumerate(tables(4))],
                 meanwhile=texts)
    assert sorted(finished) == ["t0.csv", "t1.csv", "t2.csv", "t3.csv"]
    assert (tmp_path / "summary.json").read_text() == "{}\n"

    started.clear()
    finished.clear()

    def no_room():
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        write_tables([(table, tmp_path / f"u{i}.csv") for i, table in enumerate(tables(4))],
                     meanwhile=no_room)
    assert started == finished  # whatever was started was finished before the raise
