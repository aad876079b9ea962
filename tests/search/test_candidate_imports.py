"""Escape tests: a candidate naming a `module:Class` policy type would import that module into
the evaluating process, outside the sandbox code candidates run in. Every way a candidate
comes in (a bundle or flat candidate, GEPA's adapter and command, OpenEvolve's evaluator, a
sweep file, a bundle built by hand, a code candidate's bundle) refuses it with one line naming
the axis and the value, and the planted module is never imported. A scenario the user writes
may still name their own `module:Class` (the control below shows the plant works)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from blis_simpy.cli import app
from blis_simpy.core.errors import ScenarioError
from blis_simpy.policies.bundle import BUNDLE_AXES, BundleMeta, PolicyBundle
from blis_simpy.search.code import CodePolicy, candidate_policy
from blis_simpy.search.sweep import run_many
from tests.search.helpers import prefix_scenario

PLANTED = "planted_policy"
TYPE = f"{PLANTED}:Planted"
ROUTE = (Path(__file__).parent / "prefix_owner_policy.py").read_text()


@pytest.fixture
def marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A module on the path that writes a marker file the moment anything imports it."""
    (tmp_path / "plant").mkdir()
    marker = tmp_path / "imported"
    (tmp_path / "plant" / f"{PLANTED}.py").write_text(
        "from pathlib import Path\n"
        "from blis_simpy.policies.routing import RoundRobin\n"
        f"Path({str(marker)!r}).write_text('imported')\n"
        "class Planted(RoundRobin):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path / "plant"))
    monkeypatch.delitem(sys.modules, PLANTED, raising=False)
    yield marker
    sys.modules.pop(PLANTED, None)


def assert_refused(text: str, axis: str = "routing") -> None:
    line = next(line for line in text.splitlines() if TYPE in line)
    assert f"{axis}.type" in line and "may not import" in line
    assert "sandboxed code path" in line


def assert_not_imported(marker: Path) -> None:
    assert not marker.exists() and PLANTED not in sys.modules


def test_escape_control_the_users_own_scenario_imports_its_module(marker: Path):
    """The plant works: a scenario the user wrote names their own code, and it runs."""
    table = run_many(prefix_scenario(policies={"routing": {"type": TYPE}}), None, [1],
                     workers=1)
    assert marker.read_text() == "imported" and table.error[0] == ""


@pytest.mark.parametrize("axis", BUNDLE_AXES)
@pytest.mark.parametrize("form", ["nested", "flat"])
def test_escape_bundle_type_on_every_axis_is_refused(marker: Path, axis: str, form: str):
    data = {axis: {"type": TYPE}} if form == "nested" else {f"{axis}.type": TYPE}
    with pytest.raises(ScenarioError) as err:
        PolicyBundle.from_dict(data)
    assert_refused(str(err.value), axis)
    assert_not_imported(marker)


def test_escape_flat_candidate_in_run_many_is_refused(marker: Path):
    for candidate in ({"routing.type": TYPE}, {"routing": {"type": TYPE, "params": {}}},
                      {"admission.type": TYPE, "routing.weights.prefix-affinity": 2.0}):
        axis = next(iter(candidate)).split(".")[0]
        with pytest.raises(ScenarioError, match=r"policies\['c'\]") as err:
            run_many(prefix_scenario(), {"c": candidate}, [1], workers=1)
        assert_refused(str(err.value), axis)
    assert_not_imported(marker)


def test_escape_bundle_built_by_hand_is_refused(marker: Path):
    """A `PolicyBundle` object skips the parser; the sweep validates it again."""
    named = PolicyBundle(BundleMeta(), {"routing": {"type": TYPE}})
    implied = PolicyBundle(BundleMeta(), {"routing": {"params": {}}}, {"routing": TYPE})
    with_code = CodePolicy("admission", "class Policy(AdmissionPolicy):\n    pass\n",
                           bundle=named)
    for candidate in (named, implied, with_code):
        with pytest.raises(ScenarioError) as err:
            run_many(prefix_scenario(), {"c": candidate}, [1], workers=1)
        assert_refused(str(err.value))
    assert_not_imported(marker)


def test_escape_code_candidates_bundle_component_is_refused(marker: Path):
    for candidate, axis in (({"bundle": f"routing: {{type: '{TYPE}'}}"}, "routing"),
                            ({"routing": ROUTE, "bundle": f"admission: {{type: '{TYPE}'}}"},
                             "admission")):
        with pytest.raises(ScenarioError) as err:
            candidate_policy(candidate)
        assert str(err.value).startswith("bundle: ")
        assert_refused(str(err.value), axis)
    assert_not_imported(marker)


def test_escape_gepa_adapter_scores_zero_saying_why(marker: Path):
    from blis_simpy.search.gepa_adapter import BlisAdapter

    bundle = yaml.safe_dump({"routing": {"type": TYPE}})
    result = BlisAdapter(workers=1).evaluate([prefix_scenario()], {"bundle": bundle},
                                             capture_traces=True)
    assert result.scores == [0.0] and result.trajectories is not None
    assert_refused(result.trajectories[0]["error"])
    assert_not_imported(marker)


def test_escape_openevolve_evaluator_bundle_program_scores_zero_saying_why(
        marker: Path, tmp_path: Path):
    from blis_simpy.search.openevolve_evaluator import BlisEvaluator

    program = tmp_path / "program.yaml"
    program.write_text(f"routing: {{type: '{TYPE}'}}\n")
    result = BlisEvaluator([prefix_scenario()], seeds=[1]).evaluate(str(program))
    assert result.metrics["combined_score"] == 0.0
    assert_refused(result.artifacts["error"])
    assert_not_imported(marker)


def test_escape_gepa_evaluate_policy_config_scores_zero_saying_why(marker: Path,
                                                                    tmp_path: Path):
    (tmp_path / "w.yaml").write_text(yaml.safe_dump(prefix_scenario().to_dict()))
    (tmp_path / "p.yaml").write_text(f"routing: {{type: '{TYPE}'}}\n")
    result = CliRunner().invoke(app, ["gepa-evaluate", "--workload", str(tmp_path / "w.yaml"),
                                      "--seed", "1", "--policy-config",
                                      str(tmp_path / "p.yaml")])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["score"] == 0.0
    assert_refused(report["runs"][0]["error"])
    assert_not_imported(marker)


@pytest.mark.parametrize("inline", [True, False])
def test_escape_sweep_file_policy_exits_2_with_one_line(marker: Path, tmp_path: Path,
                                                        inline: bool):
    (tmp_path / "p.yaml").write_text(f"routing: {{type: '{TYPE}'}}\n")
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump({
        "scenarios": ["quickstart"],
        "policies": {"c": {"routing.type": TYPE} if inline else "p.yaml"}}))
    result = CliRunner().invoke(app, ["sweep", str(tmp_path / "sweep.yaml")])
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1
    assert_refused(result.output)
    assert not (tmp_path / "sweep.csv").exists()
    assert_not_imported(marker)


def test_escape_run_policy_config_exits_2_with_one_line(marker: Path, tmp_path: Path):
    """`run --policy-config` takes a bundle too: a search's winner, so a candidate."""
    (tmp_path / "p.yaml").write_text(f"routing: {{type: '{TYPE}'}}\n")
    result = CliRunner().invoke(app, ["run", "quickstart", "--policy-config",
                                      str(tmp_path / "p.yaml"), "--out",
                                      str(tmp_path / "out")])
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1
    assert_refused(result.output)
    assert not (tmp_path / "out").exists()
    assert_not_imported(marker)


def test_candidate_cannot_resize_the_kv_tiers():
    """The kv_tiers axis is the offload policy; the tiers' sizes are the scenario's hardware,
    which a candidate changing would score a different cluster."""
    for data in ({"kv_tiers.cpu_blocks": 999_999},
                 {"kv_tiers": {"params": {"storage_blocks": 10}}}):
        with pytest.raises(ScenarioError, match=r"kv_tiers\.params.*unknown key"):
            PolicyBundle.from_dict(data)
    assert PolicyBundle.from_dict({"kv_tiers.threshold": 0.5}).axes["kv_tiers"] == {
        "params": {"threshold": 0.5}}
