"""Production-length traces (workload/trace.py): read twice and never held, checked whole
before the run, gzip read as it is decompressed, their row count known to the progress bar."""

from __future__ import annotations

import gzip
import tracemalloc
from pathlib import Path

import pytest

from blis_simpy.api import prepare, run
from blis_simpy.config.workload import TraceWorkload
from blis_simpy.core.errors import ScenarioError
from blis_simpy.workload.trace import load_trace
from tests.trace_helpers import (
    assert_trace_error,
    azure_text,
    blis_text,
    burstgpt_text,
    mooncake_text,
    trace_scenario,
    write,
)

SAMPLES = {
    "blis": blis_text([(0.0, "a", "m", [1, 2, 3], [4, 5]), (0.2, "b", "m", [1, 2], [8])]),
    "azure": azure_text([("2023-11-16 18:17:03.97", 374, 44),
                         ("2023-11-16 18:17:04.20", 96, 9)]),
    "burstgpt": burstgpt_text([(0.0, "ChatGPT", 120, 30), (0.5, "GPT-4", 80, 12)]),
    "mooncake": mooncake_text([
        {"timestamp": 0, "input_length": 700, "output_length": 5, "hash_ids": [1, 2]},
        {"timestamp": 300, "input_length": 600, "output_length": 9, "hash_ids": [1, 3]}]),
}


def replayed(path: Path) -> list[tuple]:
    trace = load_trace(TraceWorkload("trace", str(path)), seed=3, horizon=None,
                       truncate=False)
    return [(r.name, r.arrival, r.input_len, r.output_len, r.tokens.tolist())
            for r in trace.requests()]


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_a_gzip_trace_replays_as_the_plain_one(tmp_path, fmt):
    plain = write(tmp_path / "t.txt", SAMPLES[fmt])
    packed = write(tmp_path / "t.txt.gz", gzip.compress(SAMPLES[fmt].encode()))
    named_plain = write(tmp_path / "odd.csv", gzip.compress(SAMPLES[fmt].encode()))
    assert replayed(plain) == replayed(packed) == replayed(named_plain)
    assert len(replayed(plain)) == 2


def test_a_cut_gzip_trace_is_refused_before_the_run(tmp_path):
    whole = gzip.compress(SAMPLES["azure"].encode() * 200)
    path = write(tmp_path / "t.csv.gz", whole[: len(whole) // 2])
    with pytest.raises(ScenarioError) as err:
        prepare(trace_scenario(path))
    line = int(err.value.problem.split(":")[0].removeprefix("line "))  # where it broke
    assert_trace_error(err.value, path, line, "gzip")


def test_a_bad_row_late_in_a_trace_fails_before_any_event(tmp_path):
    rows = [(f"{i / 10}", f"r{i}", "m", [1, 2], [3]) for i in range(3000)]
    rows.append(("1.0", "late", "m", [1], [2]))  # earlier than the row before it
    path = write(tmp_path / "t.csv", blis_text(rows))
    with pytest.raises(ScenarioError) as err:
        prepare(trace_scenario(path))
    assert_trace_error(err.value, path, 3002, "before the previous row")


def test_a_repeated_request_id_far_apart_names_both_lines(tmp_path):
    rows = [(f"{i / 10}", f"r{i}", "m", [1], [2]) for i in range(2000)]
    rows.append(("500.0", "r7", "m", [1], [2]))
    path = write(tmp_path / "t.csv", blis_text(rows))
    with pytest.raises(ScenarioError) as err:
        prepare(trace_scenario(path))
    assert_trace_error(err.value, path, 2002, "'r7'", "also on line 9")


def test_a_trace_is_never_held_in_memory(tmp_path):
    """Checking and replaying a 40,000-row trace of token ids holds a few rows at a time
    (the whole file's ids would be several MB; its name hashes are 320 KB)."""
    rows = [(f"{i / 100}", f"id{i}", "m", list(range(i % 50, i % 50 + 30)), [1] * 10)
            for i in range(40_000)]
    path = write(tmp_path / "t.csv", blis_text(rows))
    tracemalloc.start()
    trace = load_trace(TraceWorkload("trace", str(path)), seed=3, horizon=None,
                       truncate=False)
    count = sum(1 for _ in trace.requests())
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert count == len(trace) == 40_000
    assert peak < 2_000_000, peak


def test_the_row_count_is_known_before_the_run(tmp_path):
    path = write(tmp_path / "t.csv", SAMPLES["burstgpt"])
    assert prepare(trace_scenario(path)).expected == 2
    assert run(trace_scenario(path)).summary["arrived_requests"] == 2
