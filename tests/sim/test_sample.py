"""`workload sample` (sim/sample.py): run a scenario, write its arrivals as a trace, and
replay that trace to the same requests."""

from __future__ import annotations

import numpy as np
import pytest

from blis_simpy.config.scenario import Scenario
from blis_simpy.sim.sample import sample, sample_requests
from tests.workload_helpers import (
    TENANTS,
    assert_usage_error,
    cli,
    read_rows,
    scenario_dict,
    write_yaml,
)


def test_sample_replays_through_a_trace_workload(tmp_path):
    """Session turns arrive when earlier responses complete; the trace freezes those times."""
    original = sample_requests(Scenario.from_dict(scenario_dict(TENANTS)))
    out = tmp_path / "sampled.csv"
    sample(Scenario.from_dict(scenario_dict(TENANTS)), out)
    replay = Scenario.from_dict(scenario_dict({"type": "trace", "path": "sampled.csv"}),
                                tmp_path)
    replayed = sample_requests(replay)
    assert len(replayed) == len(original)
    for (a, a_tokens), (b, b_tokens) in zip(original, replayed, strict=True):
        assert (a.arrival, a.input_len, a.output_len) == (b.arrival, b.input_len, b.output_len)
        assert np.array_equal(a_tokens, b_tokens)


def test_sample_seed_and_set_change_the_run(tmp_path):
    scenario = write_yaml(tmp_path / "s.yaml", scenario_dict(TENANTS))
    outs = [tmp_path / f"{i}.csv" for i in range(3)]
    assert cli("workload", "sample", scenario, "--out", outs[0]).exit_code == 0
    assert cli("workload", "sample", scenario, "--out", outs[1], "--seed", "99").exit_code == 0
    result = cli("workload", "sample", scenario, "--out", outs[2],
                 "--set", "workload.duration_s=0.5")
    assert result.exit_code == 0, result.output
    assert outs[0].read_text() != outs[1].read_text()
    assert len(read_rows(outs[2])) < len(read_rows(outs[0]))


@pytest.mark.parametrize("change, needles", [
    ({"out": "missing/trace.csv"}, ("--out", "does not exist")),
    ({"out": "."}, ("--out", "is a folder")),
    ({"set": "workload.rate_per_s=-1"}, ("workload.rate_per_s",)),
])
def test_sample_bad_input_exits_2(tmp_path, monkeypatch, change, needles):
    monkeypatch.chdir(tmp_path)
    scenario = write_yaml(tmp_path / "s.yaml", scenario_dict(TENANTS))
    args = ["workload", "sample", scenario, "--out", change.get("out", "t.csv")]
    if "set" in change:
        args += ["--set", change["set"]]
    assert_usage_error(cli(*args), *needles)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


def test_sample_missing_scenario_exits_2(tmp_path):
    assert_usage_error(cli("workload", "sample", tmp_path / "nope.yaml", "--out",
                           tmp_path / "t.csv"), "cannot read")

