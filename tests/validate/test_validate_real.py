"""validate-real: the bundled public sets parse and turn into native scenarios that model the
load as it ran; the harness compares like with like and its report's arithmetic holds; the
command runs on the bundled sets and on inference-perf folders (rebuilt from the sets' facts),
and a wrong input is one line and exit 2."""

from __future__ import annotations

import re
import statistics
from pathlib import Path

import pytest
from typer.testing import CliRunner

from blis_simpy.cli import app
from blis_simpy.validate.harness import (
    Latency,
    headline,
    report,
    scored,
    stage_scenario,
    summarise,
    validate,
)
from blis_simpy.validate.importers import Hints, read
from blis_simpy.validate.sets import bundled_sets
from tests.validate.helpers import SAMPLE, stages, write_ground_truth

SHORT = 300  # requests of each stage the fast tests simulate


@pytest.fixture(scope="module")
def rows():
    return validate(stages(names=SAMPLE), Latency.default(), max_requests=SHORT)


def test_every_bundled_set_names_its_source_and_what_is_guessed():
    sets = bundled_sets()
    assert {s.name for s in sets} >= {"inference-sim-training", "datacrunch-h200-sglang",
                                      "gpustack-performance-lab", "rtx4090-mistral-vllm"}
    for measured in sets:
        assert measured.source and "licence" in measured.source, measured.name
        assert measured.known and measured.guesses, measured.name
        for stage in measured.stages:
            stage_scenario(stage, Latency.default(), max_requests=10)  # every one builds


def test_the_sets_cover_gpus_servers_models_and_tp_degrees():
    all_stages = [s for ms in bundled_sets() for s in ms.stages]
    assert {s.gpu for s in all_stages} >= {"H100", "H200", "A100-SXM", "RTX-4090"}
    assert {s.server for s in all_stages} == {"vllm", "sglang"}
    assert {s.tp for s in all_stages} >= {1, 2, 4}
    assert len({s.model for s in all_stages}) >= 7
    assert any(s.saturated for s in all_stages) and any(not s.saturated for s in all_stages)


def test_a_cycled_prompt_stage_models_the_load_as_it_ran():
    stage = stages(names=("llama-2-7b-tp1-general/0",))[0]
    scenario = stage_scenario(stage, Latency.default(), max_requests=SHORT)
    workload = scenario.to_dict()["workload"]
    assert len(workload["prefix_groups"]) == 100
    assert {g["length"]["value"] for g in workload["prefix_groups"]} == {574}
    assert workload["max_requests"] == 1000  # ten rounds of the 100 prompts at least
    tenant = workload["tenants"][0]
    assert tenant["arrival"]["type"] == "poisson" and tenant["output"]["value"] == 248
    assert scenario.engine.kv_blocks == 7463
    assert (scenario.engine.max_running_requests, scenario.engine.max_scheduled_tokens) == (
        128, 2048)
    assert scenario.latency.type == "physical" and scenario.latency.coefficients == "vllm"


def test_burst_and_concurrency_stages():
    burst = next(s for s in stages("datacrunch-h200-sglang") if s.load.arrival == "burst")
    scenario = stage_scenario(burst, Latency.default(), max_requests=50)
    assert scenario.workload.max_requests == 50
    assert scenario.workload.tenants[0].arrival.type == "constant"
    assert scenario.latency.coefficients == "sglang"
    closed = stages("rtx4090-mistral-vllm")[0]
    loop = stage_scenario(closed, Latency.default()).workload.tenants[0].closed_loop
    assert loop is not None and loop.users == closed.load.concurrency == 4


def test_stages_compare_like_with_like(rows):
    for row in rows:
        m = row.stage.measured
        e2e = row.compared("e2e")
        assert e2e is not None and e2e.statistic == "mean"
        assert e2e.measured == m.stat("e2e", "mean")
        tpot = row.compared("tpot")  # inference-perf's ITL is not used: derived on both sides
        steps = row.stage.mean_output - 1
        assert tpot.measured == pytest.approx((m.stat("e2e", "mean") - m.stat("ttft", "mean"))
                                              / steps)
        assert tpot.simulated == pytest.approx(
            (row.simulated["e2e:mean"] - row.simulated["ttft:mean"]) / steps)
        assert row.error("e2e") == pytest.approx(100 * (e2e.simulated - e2e.measured)
                                                 / e2e.measured)
    datacrunch = stages("datacrunch-h200-sglang")[0]  # medians only: compared as medians
    sim = {f"{m}:{s}": 1.0 for m in ("ttft", "e2e", "tpot", "itl")
           for s in ("mean", "median", "p90", "p99")} | {"requests_per_s": 1.0}
    assert headline(datacrunch, sim, "ttft").statistic == "median"
    assert headline(datacrunch, sim, "tpot").statistic == "itl median"


def test_the_report_arithmetic(rows):
    kept = scored(rows, "e2e")
    assert len(kept) == 3 and all(not r.saturated for r in kept)
    summary = summarise(kept, "e2e")
    assert summary.median_abs == pytest.approx(statistics.median(abs(r.error("e2e"))
                                                                  for r in kept))
    text = report(rows, Latency.default())
    assert re.search(r"codellama-34b-tp2-reasoning/0 .* censored: completed", text)
    assert "inference-sim-training" in text and "all sets" in text


def test_censored_stages_run_with_the_clients_timeout():
    stage = stages(names=("codellama-34b-tp2-reasoning/0",))[0]
    assert stage.censored and stage.saturated and stage.measured.timeout_s == 300.0
    assert stage_scenario(stage, Latency.default(), max_requests=10).workload.timeout_s == 300
    assert stage_scenario(stages(names=SAMPLE[:1])[0], Latency.default(),
                          max_requests=10).workload.timeout_s is None


def test_an_inference_perf_folder_reads_as_the_bundled_stages(tmp_path: Path):
    measured = read(write_ground_truth(tmp_path / "gt"), Hints(gpu="H100"))
    bundled = {s.name: s for s in stages(names=SAMPLE)}
    assert {s.name for s in measured.stages} == set(bundled)
    for stage in measured.stages:
        twin = bundled[stage.name]
        assert (stage.model, stage.tp, stage.distinct_prompts) == (
            twin.model, twin.tp, twin.distinct_prompts)
        assert stage.output == twin.output and stage.load == twin.load
        assert stage.measured.stat("e2e", "mean") == pytest.approx(twin.measured.stat("e2e",
                                                                                       "mean"))
        assert stage.measured.timeout_s == twin.measured.timeout_s


def test_cli_runs_a_bundled_subset():
    result = CliRunner().invoke(app, ["validate-real", "--only", "llama-2-7b-tp1-general/0",
                                      "--requests", "200"])
    assert result.exit_code == 0, result.output
    assert "inference-sim-training:llama-2-7b-tp1-general/0" in result.stdout
    assert "1 stages" in result.stdout


def test_cli_reads_an_inference_perf_folder(tmp_path: Path):
    root = write_ground_truth(tmp_path / "gt", SAMPLE[:1])
    result = CliRunner().invoke(app, ["validate-real", str(root), "--requests", "200",
                                      "--latency", "roofline"])
    assert result.exit_code == 0, result.output
    assert "llama-2-7b-tp1-general/0" in result.stdout and "native roofline" in result.stdout


@pytest.mark.parametrize("args, message", [
    (["missing-folder"], "does not exist"),
    (["--only", "nothing-matches"], "matches no stage"),
    (["--latency", "magic"], "unknown model"),
    (["--cv", "gpu"], "--cv"),
])
def test_wrong_input_is_one_line_and_exit_2(tmp_path: Path, args, message):
    args = [str(tmp_path / a) if a == "missing-folder" else a for a in args]
    result = CliRunner().invoke(app, ["validate-real", *args, "--requests", "50"])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("file, text, message", [
    ("results/stage_0_lifecycle_metrics.json", "{", "is not valid JSON"),
    ("results/stage_0_lifecycle_metrics.json", "{}", "lifecycle-metrics"),
    ("exp-config.yaml", "model: [", "not valid YAML"),
    ("exp-config.yaml", "model: m\ntensor_parallelism: 0\n", "tp"),
])
def test_malformed_files_are_one_line_and_exit_2(tmp_path: Path, file, text, message):
    root = write_ground_truth(tmp_path / "gt", SAMPLE[:1])
    folder = next(iter(sorted(root.iterdir())))
    (folder / file).write_text(text)
    result = CliRunner().invoke(app, ["validate-real", str(root)])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
