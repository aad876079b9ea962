"""Calibration of the physical step model: the linear equations it fits are exact for the
schedule they came from, the NNLS is exact, a coefficient is identified only by data that
exercises it, censored stages are never fitted, and the coefficients it writes are what a
scenario then runs with."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from blis_simpy.calibrate.coefficients import coefficient_set, write_sets
from blis_simpy.calibrate.fit import (
    PRIORS,
    as_stage_vector,
    columns,
    fit,
    gpu_key,
    nnls,
    prior_coefficients,
    solve,
    stage_fit,
)
from blis_simpy.cli import app
from blis_simpy.config import step_models
from blis_simpy.core.errors import ScenarioError
from blis_simpy.sim.run import run
from blis_simpy.validate.harness import Latency, reduce, stage_scenario
from tests.validate.helpers import SAMPLE, stages, write_ground_truth


def test_nnls_is_exact_on_a_small_problem():
    rng = np.random.default_rng(7)
    a, b = rng.normal(size=(12, 4)), rng.normal(size=12)
    got = nnls(a, b)
    assert np.all(got >= 0)
    cost = float(np.sum((a @ got - b) ** 2))
    for trial in itertools.product(np.linspace(0, 2, 9), repeat=4):  # no grid point is better
        assert float(np.sum((a @ np.array(trial) - b) ** 2)) >= cost - 1e-9


def test_the_priors_alone_give_the_physics():
    weights = np.array([w for _, w in PRIORS.values()])
    assert nnls(np.diag(weights), weights) == pytest.approx(np.ones(len(weights)))


def test_a_gpu_whose_data_miss_a_term_takes_it_from_the_gpus_whose_data_have_it():
    """The kernels are the same server code on every GPU: a multiplier the data pin on one
    GPU (GEMMs 1.5x slower than the microbenchmark rate on the A100) moves the same
    multiplier of a GPU whose data never exercise it off its prior, and the other way round
    nothing moves a term no GPU's data exercise."""
    cols = columns(["vllm"], ["A100-SXM", "H100"])
    gemm_a100, gemm_h100 = cols.index("gemm@A100-SXM"), cols.index("gemm@H100")
    data = np.zeros((20, len(cols)))
    data[:, gemm_a100] = 1.0  # twenty equations: gemm@A100-SXM = 1.5
    got = solve(data, np.full(20, 1.5), cols)
    assert got[gemm_a100] == pytest.approx(1.5, rel=0.02)
    assert 1.2 < got[gemm_h100] < 1.5  # between its prior (1.0) and the A100's
    assert got[cols.index("link@H100")] == pytest.approx(1.0)
    assert got[cols.index("vllm.step_us")] == pytest.approx(1.0)


@pytest.mark.parametrize("set_name, name", [
    ("datacrunch-h200-sglang", "online-2rps"),  # uncached prompts, medians, the API queue
    ("inference-sim-training", "llama-2-70b-tp4-roleplay/0"),  # cycled prompts, TP 4, means
])
def test_the_equations_reproduce_the_simulation(set_name, name):
    """Every latency is linear in the coefficients for a given schedule: a simulated stage's
    equations, evaluated at the coefficients it ran with, give its simulated statistics."""
    stage = next(s for s in stages(set_name) if s.name == name)
    c = prior_coefficients()
    fitted = stage_fit(stage, c, max_requests=200)
    values = {metric: form.value(as_stage_vector(c)) / 1e3
              for metric, form, _ in fitted.equations}
    sim = reduce(stage, run(_with(stage, c)))
    for metric, value in values.items():
        compared = {"e2e": "e2e", "ttft": "ttft"}.get(metric)
        if compared is None:
            continue
        statistic = "mean" if stage.measured.stat(metric, "mean") else "median"
        assert value == pytest.approx(sim[f"{metric}:{statistic}"], rel=0.02), metric


def _with(stage, c):
    """The stage's scenario run with coefficients `c` (through a file, as a user would)."""
    import tempfile

    folder = Path(tempfile.mkdtemp())
    path = folder / "c.json"
    path.write_text(json.dumps({"family": stage.server, "coefficients": c.as_dict()}))
    return stage_scenario(stage, Latency.coefficients(path), max_requests=200)


def test_a_burst_stages_duration_equation_is_its_busy_time():
    stage = next(s for s in stages("gpustack-performance-lab") if "a100-sxm-burst-2000" in s.name)
    fitted = stage_fit(stage, prior_coefficients(), max_requests=100)
    (metric, form, target), = fitted.equations
    assert metric == "duration" and target == pytest.approx(100 / stage.measured.requests_per_s
                                                            * 1e6)
    sim = reduce(stage, run(_with(stage, prior_coefficients())))
    assert form.value(as_stage_vector(prior_coefficients())) / 1e6 == pytest.approx(
        100 / sim["requests_per_s"], rel=0.02)


@pytest.fixture(scope="module")
def cached_fit():
    """Cycled prompts on H100 only: decode-bound stages."""
    return fit(stages(names=SAMPLE), max_requests=200, rounds=2)


def test_a_term_the_data_do_not_exercise_is_not_identified(cached_fit):
    assert cached_fit.gpus == ["H100"] and cached_fit.families == ["vllm"]
    assert cached_fit.identified("weights@H100")  # every decode step reads the weights
    assert not cached_fit.identified("link@H100")  # decode tokens hardly load the links
    assert not cached_fit.identified("vllm.api_output_token_us")
    for col in cached_fit.columns:  # what the data left alone stays near its prior
        if not cached_fit.identified(col):
            prior = PRIORS[col.partition("@")[0].rpartition(".")[2]][0]
            assert cached_fit.values[col] == pytest.approx(prior, rel=0.5), col
    assert "inference-sim-training:codellama-34b-tp2-reasoning/0" not in cached_fit.stages


def test_censored_stages_are_never_fitted():
    censored = [s for s in stages() if s.censored]
    assert censored
    with pytest.raises(ScenarioError, match="no uncensored stage"):
        fit(censored, max_requests=50, rounds=1)


def test_the_written_set_is_what_a_scenario_runs_with(cached_fit, tmp_path: Path):
    path, = write_sets(cached_fit, tmp_path / "mine.json", "test fit")
    loaded = step_models.load(str(path))
    assert loaded.family == "vllm"
    on_h100 = loaded.for_gpu("H100")
    assert on_h100.weights == pytest.approx(cached_fit.values["weights@H100"], rel=1e-4)
    assert on_h100.step_us == pytest.approx(cached_fit.values["vllm.step_us"], rel=1e-4)
    data = json.loads(path.read_text())
    assert set(data["fit"]["identified"]) | set(data["fit"]["not_identified"]) == {
        c for c in cached_fit.columns}
    elsewhere = loaded.for_gpu("A100-SXM")  # no data there: the identified mean or the prior
    assert elsewhere.link == PRIORS["link"][0]
    assert gpu_key("h100") == "H100"
    assert coefficient_set(cached_fit, "sglang", "x")["coefficients"]["step_us"] == \
        PRIORS["step_us"][0]  # a family the data never ran: its priors


def test_calibrate_cli_writes_coefficients_and_reports_held_out_stages(tmp_path: Path):
    root = write_ground_truth(tmp_path / "gt", SAMPLE[:3])
    out = tmp_path / "mine.json"
    result = CliRunner().invoke(app, [
        "calibrate", str(root), "--alone", "--out", str(out), "--requests", "150",
        "--rounds", "1", "--hold-out", "roleplay", "--gpu", "H100"])
    assert result.exit_code == 0, result.output
    assert out.exists() and "identified" in result.stdout
    assert "llama-2-70b-tp4-roleplay/0" in result.stdout.split("identified")[-1]
    validated = CliRunner().invoke(app, ["validate-real", "--coefficients", str(out),
                                         "--only", "llama-2-7b-tp1-general/0",
                                         "--requests", "100"])
    assert validated.exit_code == 0, validated.output
    assert "coefficients mine.json" in validated.stdout


@pytest.mark.parametrize("args, message", [
    (["--alone"], "nothing to fit"),
    (["--hold-out", "no-such-stage", "--requests", "10"], "matches no stage"),
])
def test_calibrate_rejects_what_it_cannot_fit(tmp_path: Path, args, message):
    result = CliRunner().invoke(app, ["calibrate", "--out", str(tmp_path / "x.json"), *args])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and not (tmp_path / "x.json").exists()


def test_calibrate_warns_of_a_fitted_term_no_gpu_can_have():
    """newcomer 16's #14: an ITL of 2.3 ms fitted weights@H100 0.2635, weight reads 3.8x
    faster than HBM allows, with no warning."""
    from types import SimpleNamespace

    from blis_simpy.calibrate.coefficients import impossible
    from blis_simpy.config.hardware import bundled_gpu

    h100 = bundled_gpu("H100")
    assert h100 is not None
    values = {"weights@H100": 0.2635, "kv_reads@H100": 1.1, "gemm@H100": 0.1,
              "link@H100": 0.5 * h100.link_efficiency}
    fitted = SimpleNamespace(gpus=["H100"], values=values,
                             identified=lambda column: column != "gemm@H100")
    warnings = impossible(fitted)  # gemm is below its floor but the data did not identify it
    assert [w.split()[0] for w in warnings] == ["weights@H100", "link@H100"]
    assert "faster than its memory bandwidth" in warnings[0]
    assert f"({h100.hbm_efficiency / 0.2635:.2g}x its peak)" in warnings[0]
    assert impossible(SimpleNamespace(gpus=["H100"], values={"weights@H100": 1.0},
                                      identified=lambda column: True)) == []


def test_validate_real_says_when_its_figures_are_in_sample():
    """The bundled coefficients were fitted on the bundled sets: their errors there are
    in-sample, and the output says so."""
    result = CliRunner().invoke(app, ["validate-real", "--only",
                                      "datacrunch-h200-sglang:online-1rps", "--requests", "20"])
    assert result.exit_code == 0, result.output
    assert "in-sample: 1 of 1 stages were fitted by these coefficients" in result.stdout
