"""`blis-simpy sweep`: a sweep file in, the table out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from blis_simpy.cli import app
from blis_simpy.search.sweep import run_many
from tests.search.helpers import prefix_scenario


def test_sweep_writes_the_same_table_as_run_many(tmp_path: Path):
    (tmp_path / "prefix.yaml").write_text(yaml.safe_dump(prefix_scenario().to_dict()))
    (tmp_path / "tuned.yaml").write_text("id: tuned\nrouting: {type: prefix-affinity}\n")
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump({
        "scenarios": ["prefix.yaml"], "set": {"engine.kv_blocks": 250},
        "policies": {"rr": {"routing.type": "round-robin"}, "tuned": "tuned.yaml"},
        "seeds": [1, 2], "out": "table.csv"}))
    result = CliRunner().invoke(app, ["sweep", str(tmp_path / "sweep.yaml"), "--workers", "2",
                                      "--progress"])
    assert result.exit_code == 0, result.output
    assert "sweep: 4/4 runs" in result.output and "wrote" in result.output
    table = pd.read_csv(tmp_path / "table.csv", keep_default_na=False)
    expected = run_many(prefix_scenario(engine={"kv_blocks": 250}),
                        {"rr": {"routing.type": "round-robin"},
                         "tuned": {"id": "tuned", "routing.type": "prefix-affinity"}},
                        [1, 2], workers=1)
    assert list(table.policy) == list(expected.policy)
    assert list(table.fitness) == list(expected.fitness)
    assert list(table.candidate_id) == ["", "", "tuned", "tuned"]


def test_sweep_with_a_bad_policy_exits_2_naming_it(tmp_path: Path):
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump({
        "scenarios": ["quickstart"], "policies": {"bad": {"routing.type": "nope"}}}))
    result = CliRunner().invoke(app, ["sweep", str(tmp_path / "sweep.yaml")])
    assert result.exit_code == 2
    assert "sweep.yaml" in result.output and "policies.bad: routing.type" in result.output
    assert not (tmp_path / "sweep.csv").exists()


def test_gepa_evaluate_prints_score_and_feedback_as_json(tmp_path: Path):
    import json

    (tmp_path / "w.yaml").write_text(yaml.safe_dump(prefix_scenario().to_dict()))
    (tmp_path / "p.yaml").write_text("id: c1\nrouting: {type: prefix-affinity}\n")
    (tmp_path / "route.py").write_text("import os\n")
    runner = CliRunner()
    args = ["gepa-evaluate", "--workload", str(tmp_path / "w.yaml"), "--seed", "1"]
    good = runner.invoke(app, [*args, "--policy-config", str(tmp_path / "p.yaml")])
    assert good.exit_code == 0, good.output
    report = json.loads(good.stdout)
    assert report["score"] > 0 and report["runs"][0]["candidate_id"] == "c1"
    assert "Cache hit rate" in report["feedback"][0]
    hostile = runner.invoke(app, [*args, "--code", f"routing={tmp_path / 'route.py'}"])
    assert hostile.exit_code == 0, hostile.output
    report = json.loads(hostile.stdout)
    assert report["score"] == 0 and "import os" in report["feedback"][0]


def test_openevolve_evaluate_prints_metrics_and_artifacts(tmp_path: Path):
    import json

    example = Path(__file__).resolve().parents[2] / "examples" / "openevolve"
    result = CliRunner().invoke(app, [
        "openevolve-evaluate", str(example / "initial_program.py"), "--workload",
        str(example / "workload.yaml"), "--seed", "1", "--stage1"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["metrics"]["combined_score"] > 0
    assert "feedback" in report["artifacts"] and "k4_export" in report["artifacts"]


def test_evaluators_exit_2_for_a_program_or_bundle_that_is_not_there(tmp_path: Path):
    """A mistyped path is the user's error, not a candidate scoring 0 (the evaluator API still
    scores an unreadable program 0: OpenEvolve wrote it, so the search goes on)."""
    missing = tmp_path / "missing.py"
    runner = CliRunner()
    open_evolve = runner.invoke(app, ["openevolve-evaluate", str(missing), "--workload",
                                      "search-routing", "--stage1"])
    gepa = runner.invoke(app, ["gepa-evaluate", "--workload", "search-routing",
                               "--policy-config", str(tmp_path / "missing.yaml")])
    for result in (open_evolve, gepa):
        assert result.exit_code == 2, result.output
        assert "missing" in result.output and "Traceback" not in result.output
        assert "combined_score" not in result.output


def test_openevolve_evaluate_exits_2_for_an_axis_that_is_not_one(tmp_path: Path):
    """A typo in the user's own --axis is the user's error, not the candidate's score 0
    (newcomer 19 #9: it printed 'candidate rejected' and exited 0)."""
    program = tmp_path / "p.py"
    program.write_text("class Policy:\n    pass\n")
    result = CliRunner().invoke(app, ["openevolve-evaluate", str(program), "--workload",
                                      "search-routing", "--axis", "nope", "--stage1"])
    assert result.exit_code == 2, result.output
    assert "'nope' is not a policy axis" in result.output and "routing" in result.output
    assert "combined_score" not in result.output and "Traceback" not in result.output


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(
    st.sampled_from(["scenarios", "set", "policies", "seeds", "out", "bogus"]),
    st.one_of(st.none(), st.integers(-2, 2), st.text(max_size=4),
              st.lists(st.one_of(st.integers(), st.text(max_size=4)), max_size=2),
              st.dictionaries(st.text(max_size=4), st.one_of(st.integers(), st.text(max_size=3)),
                              max_size=2))))
def test_fuzzed_sweep_files_fail_with_a_scenario_error(tmp_path: Path, data):
    """Whatever the sweep file holds, it is read or refused with a ScenarioError."""
    from blis_simpy.core.errors import ScenarioError
    from blis_simpy.search.sweepfile import read_sweep

    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data))
    try:
        read_sweep(path)
    except ScenarioError as exc:
        assert str(exc)


def test_sweep_says_how_many_of_a_pairs_runs_were_saturated(tmp_path: Path):
    """newcomer 16's #13: the console gave a mean fitness per pair with no word that every
    run behind it was saturated."""
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump({
        "scenarios": ["quickstart"],
        "set": {"workload.num_requests": 200, "workload.rate_per_s": 200},
        "policies": {"rr": {"routing.type": "round-robin"}}, "seeds": [1, 2]}))
    result = CliRunner().invoke(app, ["sweep", str(tmp_path / "sweep.yaml"), "--out",
                                      str(tmp_path / "t.csv")])
    assert result.exit_code == 0, result.output
    assert "  (2 of 2 runs saturated)\n" in result.output  # (scaled by what it sustained)


def test_sweep_checks_its_table_before_any_run(tmp_path: Path):
    """A format it cannot write, a folder, or a table that exists (without --force) stops
    the sweep before its first run, never after all of them."""
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump({
        "scenarios": ["quickstart"], "set": {"workload.num_requests": 5},
        "policies": {"rr": {"routing.type": "round-robin"}}, "seeds": [1]}))
    (tmp_path / "old.csv").write_text("kept\n")
    (tmp_path / "folder.csv").mkdir()
    for out, message in (("t.txt", "unknown table format '.txt'"), ("folder.csv", "directory"),
                         ("old.csv", "exists")):
        result = CliRunner().invoke(app, ["sweep", str(tmp_path / "sweep.yaml"), "--out",
                                          str(tmp_path / out)])
        assert result.exit_code == 2 and message in result.output, result.output
        assert "runs" not in result.output
    assert (tmp_path / "old.csv").read_text() == "kept\n"
    result = CliRunner().invoke(app, ["sweep", str(tmp_path / "sweep.yaml"), "--out",
                                      str(tmp_path / "old.csv"), "--force"])
    assert result.exit_code == 0, result.output
    # no weights: scored against the scenario's own policies, which round-robin is
    assert "quickstart  rr  mean fitness 1\n" in result.output


@pytest.mark.parametrize("seeds", [["99999999999999999999999"], ["3", "3"]])
def test_a_bad_search_seed_is_the_users_error_in_one_line(tmp_path: Path, seeds: list[str]):
    """newcomer 20 #7: `gepa-evaluate --seed 99999999999999999999999` printed the candidate
    scored 0 (exit 0); the seed is the user's input, refused as other bad options are."""
    (tmp_path / "p.yaml").write_text("routing: {type: least-loaded}\n")
    flags = [item for seed in seeds for item in ("--seed", seed)]
    for command in (["gepa-evaluate", "--policy-config", "p.yaml"],
                    ["openevolve-evaluate", "p.yaml", "--stage1"]):
        done = subprocess.run([sys.executable, "-m", "blis_simpy", *command, "--workload",
                               "quickstart", *flags], cwd=tmp_path, timeout=120,
                              capture_output=True, text=True)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
        assert "seed" in done.stderr and done.stdout == ""
