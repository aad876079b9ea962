"""Determinism: same scenario -> byte-identical outputs; RNG streams keyed by (seed, name) only."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import blis_simpy
from blis_simpy.config.resolve import resolve
from blis_simpy.rng.streams import stream
from blis_simpy.workload.synthetic import native_requests
from tests.conftest import scenario

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = ["arrival_s", "input_tokens", "output_tokens"]


def save_runs(sc, count: int, root: Path) -> list[dict[str, bytes]]:
    """Run `sc` `count` times in process, save each to its own folder, return file contents."""
    folders = []
    for i in range(count):
        folder = root / f"run{i}"
        blis_simpy.run(sc).save(folder, "csv")
        folders.append({p.name: p.read_bytes() for p in sorted(folder.iterdir())})
    return folders


def assert_all_identical(runs: list[dict[str, bytes]]) -> None:
    first = runs[0]
    for i, other in enumerate(runs[1:], start=1):
        assert other.keys() == first.keys()
        for name in first:
            assert other[name] == first[name], f"run {i}: {name} differs from run 0"


def requests(**changes):
    return blis_simpy.run(scenario(**changes)).requests


# --- whole runs ---------------------------------------------------------------------------------


def test_native_runs_save_byte_identical_files(tmp_path):
    runs = save_runs(scenario(workload={"prefix_tokens": 32}), 20, tmp_path)
    assert set(runs[0]) == {"summary.json", "scenario.yaml", "requests.csv", "steps.csv",
                            "metrics.json", "evaluation.json", "anomalies.csv", "instances.csv",
                            "preemptions.csv"}
    assert_all_identical(runs)


def test_compat_runs_save_byte_identical_files(tmp_path):
    runs = save_runs(scenario(compat="blis"), 10, tmp_path)
    assert {"results.json", "blis_stdout.txt", "requests.csv"} <= set(runs[0])
    assert_all_identical(runs)


def test_different_seeds_give_different_arrivals_and_lengths():
    a, b = requests(seed=1), requests(seed=2)
    assert not np.array_equal(a["arrival_s"], b["arrival_s"])
    assert not np.array_equal(a["input_tokens"], b["input_tokens"])
    assert not np.array_equal(a["output_tokens"], b["output_tokens"])


def test_different_seeds_give_different_compat_workloads():
    a, b = requests(seed=1, compat="blis"), requests(seed=2, compat="blis")
    assert not np.array_equal(a["input_tokens"], b["input_tokens"])


def test_scenario_object_and_resolved_scenario_give_same_result():
    sc = scenario()
    assert blis_simpy.run(sc).summary == blis_simpy.run(resolve(sc)).summary


# --- RNG streams --------------------------------------------------------------------------------


def draw(seed: int, name: str) -> list[int]:
    return stream(seed, name).integers(0, 2**62, 8).tolist()


def test_stream_is_reproducible():
    assert draw(42, "workload.arrivals") == draw(42, "workload.arrivals")


def test_stream_differs_across_names():
    names = ["workload.arrivals", "workload.lengths", "workload.tokens", "a", "b"]
    assert len({tuple(draw(42, n)) for n in names}) == len(names)


def test_stream_differs_across_seeds():
    assert len({tuple(draw(s, "workload.arrivals")) for s in (0, 1, 2, 42, 2**40)}) == 5


def test_stream_accepts_negative_and_huge_seeds():
    assert draw(-1, "x") == draw(-1, "x")
    assert draw(2**70, "x") == draw(2**70, "x")


DRAW_SCRIPT = (
    "from blis_simpy.rng.streams import stream;"
    "print(stream(42, 'workload.arrivals').integers(0, 2**62, 8).tolist())"
)


@pytest.mark.parametrize("hashseed", ["1", "2"])
def test_stream_does_not_depend_on_python_hash_seed(hashseed):
    proc = subprocess.run(
        [sys.executable, "-c", DRAW_SCRIPT], capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONHASHSEED": hashseed, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(draw(42, "workload.arrivals"))


# --- stream independence per subsystem ----------------------------------------------------------


def test_one_more_request_leaves_earlier_requests_unchanged():
    forty, forty_one = requests(), requests(workload={"num_requests": 41})
    assert len(forty) == 40 and len(forty_one) == 41
    assert forty[COLUMNS].equals(forty_one[COLUMNS].iloc[:40])


def test_one_more_request_leaves_earlier_token_ids_unchanged():
    base = resolve(scenario()).workload
    more = resolve(scenario(workload={"num_requests": 41})).workload
    a = list(native_requests(base, 7, None))
    b = list(native_requests(more, 7, None))[:40]
    for x, y in zip(a, b, strict=True):
        assert (x.arrival, x.input_len, x.output_len) == (y.arrival, y.input_len, y.output_len)
        assert np.array_equal(x.tokens, y.tokens)


def test_one_more_compat_request_leaves_earlier_requests_unchanged():
    forty = requests(compat="blis")
    forty_one = requests(compat="blis", workload={"num_requests": 41})
    assert forty[COLUMNS].equals(forty_one[COLUMNS].iloc[:40])


def test_changing_lengths_leaves_arrivals_unchanged():
    a = requests()
    b = requests(workload={"prompt": {"mean": 600, "stdev": 10}})
    assert a["arrival_s"].equals(b["arrival_s"])
    assert not a["input_tokens"].equals(b["input_tokens"])


def test_changing_token_draws_leaves_arrivals_and_lengths_unchanged():
    a = requests()
    b = requests(workload={"prefix_tokens": 50})
    assert a["arrival_s"].equals(b["arrival_s"])
    assert (b["input_tokens"] - 50).equals(a["input_tokens"])
    assert a["output_tokens"].equals(b["output_tokens"])


def test_changing_rate_leaves_lengths_unchanged():
    a = requests()
    b = requests(workload={"rate_per_s": 5})
    assert not a["arrival_s"].equals(b["arrival_s"])
    assert a["input_tokens"].equals(b["input_tokens"])
    assert a["output_tokens"].equals(b["output_tokens"])
