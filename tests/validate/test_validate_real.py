"""The validation harness on four recorded stages of the public vLLM runs (shortened): the ground
truth folder is rebuilt from the facts in tests/data/real_vllm/stages.json (source named there),
the harness runs, and its table's arithmetic is checked against the measurements."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from blis_simpy.cli import app
from blis_simpy.validate.ground_truth import read_experiments
from blis_simpy.validate.harness import (
    Latency,
    fell_behind,
    report,
    stage_scenario,
    summarise,
    validate,
)

FACTS = Path(__file__).resolve().parents[1] / "data" / "real_vllm" / "stages.json"
SHORT_S = 20.0  # seconds of each stage's arrivals the fast test simulates


def write_ground_truth(root: Path) -> Path:
    """The ground-truth layout (exp-config.yaml, results/config.yaml, stage metrics) holding
    the recorded figures."""
    facts = json.loads(FACTS.read_text())
    for exp in facts["experiments"]:
        folder = root / exp["name"]
        (folder / "results").mkdir(parents=True)
        (folder / "exp-config.yaml").write_text(yaml.safe_dump({
            key: exp[key] for key in ("model", "tensor_parallelism", "max_model_len",
                                      "max_num_batched_tokens", "max_num_seqs")}))
        stages = sorted(exp["stages"], key=lambda s: s["index"])
        (folder / "results" / "config.yaml").write_text(yaml.safe_dump({
            "data": {"type": "shared_prefix", "shared_prefix": exp["shared_prefix"]},
            "load": {"type": exp["load_type"], "stages": [
                {"rate": s["rate"], "duration": s["duration_s"]} for s in stages]}}))
        for position, s in enumerate(stages):
            metrics = {
                "successes": {
                    "count": s["successes"],
                    "latency": {"request_latency": {"mean": s["e2e_mean_s"]},
                                "time_to_first_token": {"mean": s["ttft_mean_s"]}},
                    "throughput": {"requests_per_sec": s["requests_per_s"]},
                    "prompt_len": {"median": s["prompt_len_median"]},
                    "output_len": {"median": s["output_len_median"]}},
                "failures": {"count": s["failures"]}}
            if "failure_latency_min_s" in s:
                metrics["failures"]["request_latency"] = {"min": s["failure_latency_min_s"]}
            (folder / "results" / f"stage_{position}_lifecycle_metrics.json").write_text(
                json.dumps(metrics))
    return root


@pytest.fixture(scope="module")
def ground_truth(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_ground_truth(tmp_path_factory.mktemp("ground-truth"))


@pytest.fixture(scope="module")
def rows(ground_truth: Path):
    return validate(read_experiments(ground_truth), Latency.roofline(), max_duration_s=SHORT_S)


def test_reads_the_measurements_and_derives_the_true_itl(ground_truth: Path):
    exps = {e.name: e for e in read_experiments(ground_truth)}
    assert len(exps) == 4
    exp = exps["20260218-120914-mixtral-8x7b-v0-1-tp2-codegen"]
    assert (exp.model, exp.tp, exp.prompts, exp.workload) == (
        "mistralai/Mixtral-8x7B-v0.1", 2, 100, "codegen")
    stage = exp.stages[0]
    m = stage.measured
    # (E2E - TTFT) / (output length - 1): twice what the client reports as its ITL.
    assert m.itl_ms == pytest.approx((m.e2e_ms - m.ttft_ms) / (stage.output_len - 1))
    assert 17.0 < m.itl_ms < 19.0
    assert not stage.censored
    assert exps["20260218-160939-codellama-34b-tp2-reasoning"].stages[0].censored


def test_stage_scenario_models_the_load_as_it_ran(ground_truth: Path):
    exp = next(e for e in read_experiments(ground_truth) if "llama-2-7b" in e.name)
    stage = exp.stages[0]
    scenario = stage_scenario(exp, stage, Latency.roofline(), max_duration_s=SHORT_S)
    workload = scenario.to_dict()["workload"]
    assert len(workload["prefix_groups"]) == 100
    assert {g["length"]["value"] for g in workload["prefix_groups"]} == {stage.prompt_len - 1}
    assert workload["max_requests"] == round(stage.rate * SHORT_S)
    tenant = workload["tenants"][0]
    assert tenant["arrival"]["type"] == "poisson"
    assert tenant["output"]["value"] == stage.output_len
    assert scenario.engine.kv_blocks == 7463
    assert (scenario.engine.max_running_requests, scenario.engine.max_scheduled_tokens) == (
        128, 2048)


def test_the_report_arithmetic(rows):
    assert len(rows) == 4
    for row in rows:
        for metric in ("e2e", "itl", "ttft", "rps"):
            expected = 100 * (row.simulated[metric] - row.measured(metric)) / row.measured(metric)
            assert row.error(metric) == pytest.approx(expected)
        assert row.simulated["itl"] == pytest.approx(
            (row.simulated["e2e"] - row.simulated["ttft"]) / (row.stage.output_len - 1))
    kept = [r for r in rows if not r.stage.censored]
    assert len(kept) == 3
    summary = summarise(kept, "e2e")
    assert summary.median_abs == pytest.approx(statistics.median(abs(r.error("e2e"))
                                                                  for r in kept))
    assert summary.mean_abs == pytest.approx(statistics.fmean(abs(r.error("e2e"))
                                                               for r in kept))


def test_the_report_shows_errors_and_the_published_ones(rows):
    text = report(rows, Latency.roofline())
    mixtral = next(r for r in rows if "mixtral" in r.stage.name)
    line = next(ln for ln in text.splitlines() if ln.strip().startswith(mixtral.stage.name))
    assert f"{mixtral.error('e2e'):+.1f}%" in line
    assert "-52.2%" in line and "+13.8%" in line  # the reference's published E2E errors
    assert re.search(r"codellama-34b-tp2-reasoning/0 .* censored", text)
    assert "3 stages, 1 censored" in text
    assert f"{summarise([r for r in rows if not r.stage.censored], 'itl').median_abs:6.1f}%" \
        in text


def test_cli_runs_a_subset(ground_truth: Path):
    result = CliRunner().invoke(app, ["validate-real", str(ground_truth), "--only",
                                      "llama-2-7b-tp1-general/0"])
    assert result.exit_code == 0, result.output
    assert "20260217-231439-llama-2-7b-tp1-general/0" in result.stdout
    assert "1 stages, 0 censored" in result.stdout


@pytest.mark.parametrize("damage, message", [
    (lambda root: root / "missing", "is not a folder"),
    (lambda root: root, "holds no experiment folder"),
])
def test_wrong_folder_is_one_line_and_exit_2(tmp_path: Path, damage, message):
    result = CliRunner().invoke(app, ["validate-real", str(damage(tmp_path))])
    assert result.exit_code == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("file, text, message", [
    ("results/stage_0_lifecycle_metrics.json", "{", "is not valid JSON"),
    ("results/stage_0_lifecycle_metrics.json", "{}", "lifecycle-metrics"),
    ("exp-config.yaml", "model: [", "is not valid YAML"),
    ("exp-config.yaml", "model: m\ntensor_parallelism: 0\n", "tensor_parallelism"),
])
def test_malformed_files_are_one_line_and_exit_2(tmp_path: Path, file, text, message):
    root = write_ground_truth(tmp_path / "gt")
    folder = next(iter(sorted(root.iterdir())))
    (folder / file).write_text(text)
    result = CliRunner().invoke(app, ["validate-real", str(root)])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_censored_stages_run_with_the_clients_timeout(ground_truth: Path, rows):
    """The client gave up on requests after 300 s (its failures ended at 300.08 s): the
    stage is simulated with that client timeout, and the share completed in time is shown
    next to the measured one."""
    exp = next(e for e in read_experiments(ground_truth) if "reasoning" in e.name)
    stage = exp.stages[0]
    assert stage.measured.timeout_s == 300.0
    assert stage.measured.completed_pct == pytest.approx(100 * 4796 / 4800)
    scenario = stage_scenario(exp, stage, Latency.roofline(), max_duration_s=SHORT_S)
    assert scenario.workload.timeout_s == 300.0
    uncensored = next(e for e in read_experiments(ground_truth) if "llama-2-7b" in e.name)
    assert stage_scenario(uncensored, uncensored.stages[0], Latency.roofline(),
                          max_duration_s=SHORT_S).workload.timeout_s is None
    censored = next(r for r in rows if r.stage.censored)
    assert 0 < censored.simulated["completed"] <= 100
    text = report(rows, Latency.roofline())
    assert (f"{censored.stage.name} {censored.measured('completed'):.0f}% vs "
            f"{censored.simulated['completed']:.0f}%") in text


def test_a_stage_falls_behind_when_it_drains_long_after_the_last_arrival(ground_truth: Path):
    stage = next(e for e in read_experiments(ground_truth) if "llama-2-7b" in e.name).stages[0]
    e2e_s = stage.measured.e2e_ms / 1e3
    assert not fell_behind(stage, 600.0, e2e_s)  # drained in about one E2E: kept up
    assert fell_behind(stage, 600.0, 2 * e2e_s + 0.06 * 600)  # a backlog of 6 % of the window


def test_a_report_of_censored_stages_only_has_no_medians(rows):
    text = report([r for r in rows if r.stage.censored], Latency.roofline())
    assert "no uncensored stage was chosen" in text and "nan" not in text
