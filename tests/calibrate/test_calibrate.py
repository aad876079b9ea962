"""Calibration of the physical step-time model on recorded stages of the public vLLM runs
(shortened): the linear equations it fits are exact for the schedule they came from, the NNLS
is exact, the fit reports only on held-out stages and writes an entry scenarios can use."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from blis_simpy.calibrate.fit import START, Fitted, catalog_entry, fit, nnls, stage_rows
from blis_simpy.cli import app
from blis_simpy.core.errors import ScenarioError
from blis_simpy.validate.ground_truth import read_experiments
from blis_simpy.validate.harness import Latency, simulate_stage, stage_scenario

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validate"))
from test_validate_real import write_ground_truth

SHORT_S = 20.0


@pytest.fixture(scope="module")
def experiments(tmp_path_factory: pytest.TempPathFactory):
    return read_experiments(write_ground_truth(tmp_path_factory.mktemp("gt")))


def test_nnls_is_exact_on_a_small_problem():
    rng = np.random.default_rng(7)
    a, b = rng.normal(size=(12, 4)), rng.normal(size=12)
    got = nnls(a, b)
    assert np.all(got >= 0)
    cost = float(np.sum((a @ got - b) ** 2))
    for trial in itertools.product(np.linspace(0, 2, 9), repeat=4):  # no grid point is better
        assert float(np.sum((a @ np.array(trial) - b) ** 2)) >= cost - 1e-9


def test_the_fitted_equations_reproduce_the_simulation(experiments):
    """TTFT and ITL are linear in the coefficients for a given schedule: the equations of a
    simulated stage, evaluated at the coefficients it ran with, give its simulated means."""
    exp = next(e for e in experiments if "llama-2-70b" in e.name)
    stage = exp.stages[0]
    rows = stage_rows(exp, stage, START, 42, SHORT_S)
    simulated = simulate_stage(exp, stage, START.latency, 42, SHORT_S)
    beta = np.array(START.beta)
    assert rows.kept_up
    assert START.a0 + rows.ttft @ beta == pytest.approx(simulated["ttft"] * 1e3, rel=0.02)
    assert rows.itl @ beta == pytest.approx(simulated["itl"] * 1e3, rel=0.02)


def test_fit_then_report_on_held_out_stages(experiments, tmp_path: Path):
    fitted_on = [(e, s) for e in experiments if e.workload in ("general", "codegen")
                 for s in e.stages]
    model = fit(fitted_on, max_duration_s=SHORT_S)
    assert model.a0 >= 0 and all(b >= 0 for b in model.beta) and len(model.beta) == 6
    for exp, stage in fitted_on:  # the fit reaches its own stages (a loose, in-sample check)
        sim = simulate_stage(exp, stage, model.latency, 42, SHORT_S)
        assert abs(sim["itl"] / stage.measured.itl_ms - 1) < 0.25
    entry = tmp_path / "entry.yaml"
    entry.write_text(catalog_entry(model, ["general", "codegen"], "recorded stages"))
    latency = Latency.from_file(entry)
    assert latency.section["type"] == "physical"
    held = next(e for e in experiments if e.workload == "roleplay")
    scenario = stage_scenario(held, held.stages[0], latency, max_duration_s=SHORT_S)
    assert list(scenario.latency.beta or ()) == pytest.approx(list(model.beta), rel=1e-5)


def test_catalog_entry_runs_through_validate_real(experiments, tmp_path: Path):
    entry = tmp_path / "entry.yaml"
    entry.write_text(catalog_entry(Fitted(20000.0, (800.0, 1.05, 0.0, 1.1, 25.0, 33.0)),
                                   ["general"], "test"))
    root = experiments[0].folder.parent
    result = CliRunner().invoke(app, ["validate-real", str(root), "--catalog", str(entry),
                                      "--only", "llama-2-70b-tp4-roleplay/0"])
    assert result.exit_code == 0, result.output
    assert "(catalog entry.yaml)" in result.stdout


@pytest.mark.parametrize("args, message", [
    (["--fit", "chat"], "unknown workload"),
    (["--fit", "general,codegen,roleplay,reasoning"], "leaves no experiment out"),
])
def test_calibrate_rejects_fits_without_held_out_stages(experiments, tmp_path: Path, args,
                                                        message):
    root = experiments[0].folder.parent
    result = CliRunner().invoke(app, ["calibrate", str(root), "--out",
                                      str(tmp_path / "x.yaml"), *args])
    assert result.exit_code == 2
    assert message in result.stderr and not (tmp_path / "x.yaml").exists()


def test_a_bad_catalog_file_is_one_line_and_exit_2(experiments, tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("latency: {type: physical, beta: [1, 2]}\n")
    root = experiments[0].folder.parent
    result = CliRunner().invoke(app, ["validate-real", str(root), "--catalog", str(bad)])
    assert result.exit_code == 2
    assert "beta" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_censored_stages_are_never_fitted(experiments):
    censored = [(e, s) for e in experiments for s in e.stages if s.censored]
    assert censored
    with pytest.raises(ScenarioError, match="no uncensored stage"):
        fit(censored, max_duration_s=SHORT_S)


def test_the_bandwidth_prior_alone_gives_the_physics():
    """With no stage to say otherwise, the weights and KV-read coefficients are 1 / 0.85 (the
    achievable HBM share) and every other term 0; data moves them from there."""
    from blis_simpy.calibrate.fit import BANDWIDTH_PRIOR, bandwidth_prior

    rows, rhs = bandwidth_prior(7)
    solution = nnls(rows, rhs)
    expected = np.zeros(7)
    for term, value in BANDWIDTH_PRIOR.items():
        expected[1 + term] = value
    assert solution == pytest.approx(expected)
    assert BANDWIDTH_PRIOR[3] == pytest.approx(1 / 0.85)
