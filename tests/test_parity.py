"""Parity with the reference Go BLIS on its own outputs (compat mode).

(a) The reference's golden dataset: each case's command line is converted with
    `convert blis-command`, run, and every listed metric must match within relative 1e-9
    (the tolerance the reference's own Go tests use). `simulation_duration_s` is wall time.
(b) Trace replay on one instance and on four round-robin instances: every request's TTFT,
    E2E, ITL, scheduling delay and instance, and every summary field (per instance and for the
    cluster), must equal the reference's output exactly (tolerance 0). The printed
    `Cache Hit Rate` line is excluded: the reference counts phantom misses
    (docs/differences-from-blis.md).
"""

from __future__ import annotations

import json
import math
import shlex

import pytest

import blis_simpy
from blis_simpy.compat.convert import blis_command
from blis_simpy.config.scenario import Scenario
from tests.conftest import DATA, LLAMA_ALPHA, LLAMA_BETA

GOLDEN = json.loads((DATA / "golden" / "goldendataset.json").read_text())["tests"]


@pytest.mark.parametrize("case", GOLDEN, ids=[f"golden{i}" for i in range(len(GOLDEN))])
def test_golden_dataset_metrics_within_1e9(case):
    argv = shlex.split(case["blis-cmd"])[1:]
    result = blis_simpy.run(Scenario.from_dict(blis_command(argv)))
    for key, expected in case["metrics"].items():
        if key == "simulation_duration_s":
            continue
        got = result.summary[key]
        assert math.isclose(got, expected, rel_tol=1e-9, abs_tol=0.0), (key, got, expected)


def trace_scenario(name: str, instances: int = 1) -> Scenario:
    return Scenario.from_dict({
        "version": 1, "compat": "blis", "seed": 42,
        "model": {"name": "meta-llama/llama-3.1-8b-instruct", "gpu": "H100", "tp": 1},
        "latency": {"alpha": LLAMA_ALPHA, "beta": LLAMA_BETA},
        "engine": {"kv_blocks": 29205, "max_running_requests": 256,
                   "max_scheduled_tokens": 2048, "block_size": 16,
                   "long_prefill_threshold": 0},
        "cluster": {"instances": instances},
        "workload": {"type": "trace", "path": str(DATA / "parity" / f"{name}.csv")},
    })


CASES = [("trace_plain_500", 1), ("trace_prefix_500", 1), ("trace_plain_500", 4),
         ("trace_prefix_500", 4)]
IDS = [f"{name}-inst{n}" for name, n in CASES]


@pytest.mark.parametrize("name, instances", CASES, ids=IDS)
def test_trace_replay_matches_reference_per_request_exactly(name, instances):
    reference = json.loads(
        (DATA / "parity" / f"{name}.inst{instances}.results.json").read_text())
    result = blis_simpy.run(trace_scenario(name, instances))
    ours = json.loads(result.extra_files["results.json"])
    for key, expected in reference.items():
        if key != "requests":
            assert ours[key] == expected, key
    by_id = {row["requestID"]: row for row in ours["requests"]}
    assert sorted(by_id) == sorted(row["requestID"] for row in reference["requests"])
    for row in reference["requests"]:
        mine = by_id[row["requestID"]]
        for field in ("ttft_ms", "e2e_ms", "itl_ms", "scheduling_delay_ms", "arrived_at",
                      "num_prefill_tokens", "num_decode_tokens", "handled_by"):
            assert mine[field] == row[field], (row["requestID"], field)


@pytest.mark.parametrize("name, instances", CASES, ids=IDS)
def test_printed_summary_blocks_match_reference(name, instances):
    """Per-instance blocks, then the cluster block, byte for byte."""
    reference = (DATA / "parity" / f"{name}.inst{instances}.stdout.txt").read_text()
    result = blis_simpy.run(trace_scenario(name, instances))
    ours = result.extra_files["blis_stdout.txt"]
    summary_blocks = reference.split("=== KV Cache Metrics ===")[0]
    assert ours.startswith(summary_blocks)
    assert ours.count("=== Simulation Metrics ===") == (instances + 1 if instances > 1 else 1)
