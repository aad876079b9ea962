"""Streaming records (sim/stream.py, metrics/stream.py): a run that writes its tables as it
goes and keeps running totals writes the same output folder, byte for byte, as one that keeps
every record in memory; its requests leave memory once they finish; runs it cannot stream are
refused by name, and `auto` streams only long runs into a folder."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import blis_simpy.core.records as records_module
import blis_simpy.metrics.stream as metrics_stream
import blis_simpy.sim.build as build_module
import blis_simpy.sim.stream as stream_module
from blis_simpy.cli import app
from blis_simpy.config.library import scenario_file
from blis_simpy.core.errors import ScenarioError
from blis_simpy.sim.output import OutputFolder
from blis_simpy.sim.run import prepare, simulate

RUNNER = CliRunner()


@pytest.fixture
def small_chunks(monkeypatch):
    """Hand requests over 7 at a time, every 50 events: every path of the hand-over (the step
    windows, their folding, requests waiting for their last step's rows) runs in a small
    scenario; the waiting requests are judged for load imbalance 5 at a time."""
    monkeypatch.setattr(records_module, "STREAM_CHUNK", 7)
    monkeypatch.setattr(metrics_stream, "WAITING_CHUNK", 5)
    monkeypatch.setattr(build_module, "EVENTS_PER_SLICE", 50)


def run_into(folder: Path, scenario, mode: str, **kw):
    out = OutputFolder(folder, "csv")
    result = simulate(prepare(scenario, **kw), folder=out, record_mode=mode)
    result.save(out)
    return result


def both(tmp_path: Path, scenario, **kw):
    memory = run_into(tmp_path / "memory", scenario, "memory", **kw)
    streamed = run_into(tmp_path / "stream", scenario, "stream", **kw)
    return memory, streamed


def differing(a: Path, b: Path) -> list[str]:
    names = sorted({p.name for p in a.iterdir()} | {p.name for p in b.iterdir()})
    return [n for n in names if not (a / n).is_file() or not (b / n).is_file()
            or (a / n).read_bytes() != (b / n).read_bytes()]


@pytest.mark.parametrize("name", ["quickstart", "mixed-slo", "routing-round-robin",
                                  "abusive-tenant", "trace-azure-code"])
def test_a_streamed_run_writes_the_in_memory_runs_files_byte_for_byte(tmp_path, small_chunks,
                                                                    name):
    memory, streamed = both(tmp_path, scenario_file(name))
    assert differing(tmp_path / "memory", tmp_path / "stream") == []
    assert streamed.streamed is not None and memory.streamed is None
    assert memory.summary == streamed.summary


def test_load_imbalance_is_judged_the_same_when_the_steps_stream(tmp_path, small_chunks):
    """`load_imbalance` reads every replica's step times and the waiting requests: a streamed
    run writes the waiting requests to a scratch file and judges them a few at a time against
    the steps they overlap, read back from its step file."""
    both(tmp_path, scenario_file("search-routing"),
         overrides={"policies.routing.type": "always-busiest"})
    anomalies = pd.read_csv(tmp_path / "stream" / "anomalies.csv")
    assert (anomalies["type"] == "load_imbalance").sum() >= 5
    assert differing(tmp_path / "memory", tmp_path / "stream") == []


def test_a_run_cut_at_its_horizon_streams_the_same_files(tmp_path, small_chunks):
    """Requests still queued and running at the end, a last step cut at the horizon."""
    both(tmp_path, scenario_file("quickstart"),
         overrides={"horizon_s": 5.0, "workload.rate_per_s": 60.0})
    summary = json.loads((tmp_path / "stream" / "summary.json").read_text())
    assert summary["still_running"] + summary["still_queued"] > 0
    assert differing(tmp_path / "memory", tmp_path / "stream") == []


@pytest.mark.parametrize("requests", [{"max_retries": 2, "backoff_s": 0.05},
                                      {"on_failure": "lose"}])
def test_a_run_with_failures_streams_the_same_files_faults_csv_included(tmp_path,
                                                                       small_chunks,
                                                                       requests):
    """Crashes, repairs, lost, retried and failed requests: a failed request has finished for
    good (it is handed over), and the faults summary and table come from the fault rows."""
    memory, _ = both(tmp_path, scenario_file("quickstart"), overrides={
        "cluster.instances": 2, "workload.rate_per_s": 40.0,
        "faults": {"crashes": [{"at_s": 2.0, "instances": ["instance_0"], "repair_s": 1.0},
                               {"at_s": 5.0, "instances": ["instance_1"]}],
                   "requests": requests}})
    faults = memory.summary["faults"]
    assert faults["lost_requests"] > 0
    assert (faults["failed_requests"] > 0) == (requests.get("on_failure") == "lose")
    assert (tmp_path / "stream" / "faults.csv").is_file()
    assert differing(tmp_path / "memory", tmp_path / "stream") == []


def test_requests_pass_an_unfinished_one_and_the_summary_stays_exact(tmp_path, small_chunks,
                                                                    monkeypatch):
    """When many requests wait behind an unfinished one, the finished ones are handed over
    out of arrival order: the rows come in another order, every figure of the summary is
    the same."""
    monkeypatch.setattr(records_module, "PENDING_LIMIT", 20)
    memory, streamed = both(tmp_path, scenario_file("mixed-slo"))
    assert memory.summary == streamed.summary
    rows = {mode: (tmp_path / mode / "requests.csv").read_text().splitlines()
            for mode in ("memory", "stream")}
    assert rows["memory"] != rows["stream"]
    assert sorted(rows["memory"]) == sorted(rows["stream"])


def test_requests_leave_memory_when_they_finish(tmp_path, monkeypatch):
    monkeypatch.setattr(records_module, "STREAM_CHUNK", 50)
    monkeypatch.setattr(build_module, "EVENTS_PER_SLICE", 200)
    # blackbox step times, as the slice counts below were set with (the physical model's
    # larger batches take fewer events: 92 slices)
    sim = prepare(scenario_file("quickstart"), overrides={"workload.num_requests": 3000,
                                                          "workload.rate_per_s": 20.0,
                                                          "latency.type": "blackbox"})
    held: list[int] = []
    real = records_module.Recorder.sweep

    def sweep(self, now):
        real(self, now)
        held.append(len(self.requests))

    monkeypatch.setattr(records_module.Recorder, "sweep", sweep)
    out = OutputFolder(tmp_path / "out", "csv")
    result = simulate(sim, folder=out, record_mode="stream")
    assert result.summary["completed_requests"] == 3000
    assert len(held) > 100 and max(held) < 400  # a few chunks, never the whole run


def test_a_streamed_results_tables_are_read_from_its_folder(tmp_path, small_chunks):
    memory, streamed = both(tmp_path, scenario_file("quickstart"))
    assert streamed.request_table.columns == {}
    pd.testing.assert_frame_equal(memory.requests, streamed.requests)
    pd.testing.assert_frame_equal(memory.steps, streamed.steps)
    pd.testing.assert_frame_equal(memory.instances, streamed.instances)


@pytest.mark.parametrize(("change", "needle"), [
    ({"compat": "blis"}, "compat"),
    ({"cluster.trace_level": "decisions"}, "decision trace"),
    ({"engine.kv_tiers.cpu_blocks": 100}, "KV tiers"),
    ({"cluster.flow_control": {}}, "gateway queue"),
])
def test_a_run_that_cannot_stream_is_refused_by_name(tmp_path, change, needle):
    sim = prepare(scenario_file("quickstart"), overrides=change)
    with pytest.raises(ScenarioError, match=needle) as err:
        simulate(sim, folder=OutputFolder(tmp_path / "out", "csv"), record_mode="stream")
    assert err.value.path == "--records"
    assert stream_module.streams(sim, OutputFolder(tmp_path / "o2", "csv"), "auto") is False


def test_streaming_needs_an_output_folder_and_a_known_mode(tmp_path):
    sim = prepare(scenario_file("quickstart"))
    with pytest.raises(ScenarioError, match="output folder"):
        simulate(sim, record_mode="stream")
    with pytest.raises(ScenarioError, match="auto, memory, stream"):
        simulate(sim, record_mode="disk")


def test_auto_streams_a_long_run_into_a_folder_and_keeps_a_short_one(tmp_path, monkeypatch):
    sim = prepare(scenario_file("quickstart"))
    folder = OutputFolder(tmp_path / "out", "csv")
    assert not stream_module.streams(sim, folder, "auto")  # 500 requests
    monkeypatch.setattr(stream_module, "STREAM_FROM", 500)
    assert stream_module.streams(sim, folder, "auto")
    assert not stream_module.streams(sim, None, "auto")  # nowhere to stream to
    assert stream_module.expected_requests(prepare(scenario_file("mixed-slo"))) > 0
    assert stream_module.expected_requests(prepare(scenario_file("trace-azure-code"))) > 0


def test_the_command_line_streams_with_records_stream(tmp_path):
    args = ["run", "quickstart", "--quiet", "--out"]
    first = RUNNER.invoke(app, [*args, str(tmp_path / "a"), "--records", "memory"])
    second = RUNNER.invoke(app, [*args, str(tmp_path / "b"), "--records", "stream"])
    assert first.exit_code == second.exit_code == 0
    assert first.stdout == second.stdout
    assert differing(tmp_path / "a", tmp_path / "b") == []
    bad = RUNNER.invoke(app, [*args, str(tmp_path / "c"), "--records", "disk"])
    assert bad.exit_code == 2 and "--records" in bad.output
    assert not (tmp_path / "c").exists()


def test_parquet_tables_stream_as_row_groups(tmp_path, small_chunks):
    pytest.importorskip("pyarrow")
    frames = {}
    for mode in ("memory", "stream"):
        out = OutputFolder(tmp_path / mode, "parquet")
        result = simulate(prepare(scenario_file("quickstart")), folder=out, record_mode=mode)
        result.save(out)
        frames[mode] = {name: pd.read_parquet(tmp_path / mode / f"{name}.parquet")
                        for name in ("requests", "steps", "instances")}
    for name, frame in frames["memory"].items():
        pd.testing.assert_frame_equal(frame, frames["stream"][name])
