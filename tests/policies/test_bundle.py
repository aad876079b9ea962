"""Policy bundles: every axis in one file, metadata, the flat candidate form, seed F.1 names,
and scenario < bundle < --set."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import blis_simpy
from blis_simpy.cli import app
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import ScenarioError
from blis_simpy.policies.bundle import AXES, PolicyBundle
from blis_simpy.sim.run import load
from tests.conftest import scenario

BUNDLE = {
    "id": "cand-7", "generation": 2, "parent_id": "cand-3",
    "mutations": ["routing.weights.prefix-affinity 2 -> 3"],
    "admission": {"type": "token-bucket", "params": {"capacity": 500.0}},
    "priority": {"type": "slo-based", "params": {"default_score": 1.0}},
    "routing": {"type": "weighted", "params": {"scorers": {"prefix-affinity": 3.0}}},
    "scheduler": {"type": "priority-fcfs", "params": {"preemption": "lowest-priority"}},
}


def applied(bundle: PolicyBundle, **changes) -> dict:
    return load(scenario(**changes), overrides=bundle.overrides()).to_dict()["policies"]


def test_every_axis_and_the_metadata():
    bundle = PolicyBundle.from_dict(BUNDLE)
    assert (bundle.meta.id, bundle.meta.generation, bundle.meta.parent_id) == (
        "cand-7", 2, "cand-3")
    assert set(bundle.axes) == set(AXES)
    policies = applied(bundle)
    for axis in AXES:
        assert policies[axis]["type"] == BUNDLE[axis]["type"]
    assert policies["routing"]["params"]["scorers"] == {"prefix-affinity": 3.0}
    assert bundle.to_dict() == BUNDLE


def test_flat_candidate_form_means_the_same_as_the_nested_one():
    flat = PolicyBundle.from_dict({
        "routing.type": "weighted", "routing.weights.prefix-affinity": 3.0,
        "routing.weights.queue-depth": 1.0, "admission.type": "token-bucket",
        "admission.params.capacity": 500.0, "admission.refill_per_s": 50.0})
    nested = PolicyBundle.from_dict({
        "routing": {"type": "weighted",
                    "params": {"scorers": {"prefix-affinity": 3.0, "queue-depth": 1.0}}},
        "admission": {"type": "token-bucket",
                      "params": {"capacity": 500.0, "refill_per_s": 50.0}}})
    assert flat.axes == nested.axes


def test_seed_f1_names_are_translated():
    f1 = PolicyBundle.from_dict({
        "admission": {"type": "token-bucket",
                      "params": {"bucket_size": 1000, "refill_rate": 100, "per_tenant": True}},
        "priority": {"type": "slo-based",
                     "params": {"realtime_score": 100, "batch_score": 10, "default_score": 50}},
        "routing": {"type": "weighted-scoring",
                    "params": {"cache_affinity_weight": 0.6, "load_balance_weight": 0.3,
                               "queue_depth_weight": 0.1}},
        "scheduler": {"type": "priority-fcfs", "params": {"preemption_policy": "lifo"}}})
    assert f1.axes["admission"]["params"] == {"capacity": 1000, "refill_per_s": 100,
                                              "per_tenant": True}
    assert f1.axes["priority"]["params"]["class_scores"] == {"realtime": 100, "batch": 10}
    assert f1.axes["routing"] == {"type": "weighted", "params": {"scorers": {
        "prefix-affinity": 0.6, "load-balance": 0.3, "queue-depth": 0.1}}}
    assert f1.axes["scheduler"]["params"] == {"preemption": "lifo"}


def test_f1_name_without_counterpart_says_what_to_use():
    with pytest.raises(ScenarioError, match=r"prefix_match_bonus.*counterpart.*prefix-affinity"):
        PolicyBundle.from_dict({"routing.prefix_match_bonus": 0.5})


def test_params_only_axis_keeps_the_scenarios_template():
    base = {"policies": {"routing": {"type": "weighted",
                                     "params": {"scorers": {"queue-depth": 2.0}}}}}
    policies = applied(PolicyBundle.from_dict({"routing.weights.prefix-affinity": 1.0}), **base)
    assert policies["routing"]["type"] == "weighted"
    assert policies["routing"]["params"]["scorers"] == {"queue-depth": 2.0,
                                                        "prefix-affinity": 1.0}


@pytest.mark.parametrize(("data", "where"), [
    ({"routing.type": "nope"}, "routing.type"),
    ({"routing": {"type": "weighted", "params": {"scorers": {"bogus": 1.0}}}},
     "routing.params.scorers.bogus"),
    ({"autoscale.type": "no-such-scaler"}, "autoscale.type"),
    ({"generation": -1}, "generation"),
    ({"routing": 3}, "routing"),
    ([1, 2], ""),
])
def test_bad_bundle_names_the_key(data, where):
    with pytest.raises(ScenarioError) as err:
        PolicyBundle.from_dict(data)
    assert err.value.path == where


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(
    st.sampled_from(["routing.type", "routing.weights.prefix-affinity", "admission.capacity",
                     "scheduler.preemption", "id", "generation", "priority", "mutations",
                     "routing.params"]),
    st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=True),
              st.text(max_size=5), st.lists(st.integers(), max_size=2),
              st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))))
def test_fuzzed_bundles_load_or_fail_with_a_scenario_error(data):
    """No input makes the loader crash with anything but a ScenarioError naming a key."""
    try:
        PolicyBundle.from_dict(data)
    except ScenarioError as exc:
        assert str(exc)


def test_cli_scenario_then_bundle_then_set(tmp_path: Path):
    scenario_file = tmp_path / "s.yaml"
    scenario_file.write_text(yaml.safe_dump(scenario(
        cluster={"instances": 2}, policies={"routing": {"type": "least-loaded"}}).to_dict()))
    bundle_file = tmp_path / "b.yaml"
    bundle_file.write_text(yaml.safe_dump({"routing": {"type": "prefix-affinity"},
                                           "scheduler": {"type": "sjf"}}))
    runner = CliRunner()
    out = tmp_path / "out"
    result = runner.invoke(app, ["run", str(scenario_file), "--policy-config", str(bundle_file),
                                 "--set", "policies.scheduler.type=fcfs", "--out", str(out),
                                 "--quiet"])
    assert result.exit_code == 0, result.output
    policies = yaml.safe_load((out / "scenario.yaml").read_text())["policies"]
    assert policies["routing"]["type"] == "prefix-affinity"  # the bundle beats the scenario
    assert policies["scheduler"]["type"] == "fcfs"  # --set beats the bundle


def test_cli_bad_bundle_names_its_file(tmp_path: Path):
    bundle_file = tmp_path / "b.yaml"
    bundle_file.write_text("routing: {type: nope}\n")
    result = CliRunner().invoke(app, ["run", "quickstart", "--policy-config", str(bundle_file),
                                      "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert "b.yaml" in result.output and "routing.type" in result.output


def test_cli_params_only_bundle_axis_without_a_scenario_policy_blames_the_bundle(
        tmp_path: Path):
    bundle_file = tmp_path / "b.yaml"
    bundle_file.write_text("admission: {params: {rate: 5}}\n")
    result = CliRunner().invoke(app, ["run", "quickstart", "--policy-config", str(bundle_file),
                                      "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert f"{bundle_file}: admission.type: is required" in result.output
    assert "names no admission policy" in result.output
    assert not (tmp_path / "o").exists()


def test_a_bundle_carries_the_autoscale_axis_into_the_deployment_section():
    """The autoscaler's policy is the fifth axis of a bundle; it lands in the scenario's
    deployment section, and a bad parameter fails when the bundle is read."""
    bundle = PolicyBundle.from_dict({"id": "scaler", "autoscale": {
        "type": "threshold", "params": {"signal": "queue_depth", "up": 8, "down": 2}}})
    diurnal = Path(blis_simpy.__file__).parent / "scenarios" / "autoscale-diurnal.yaml"
    scenario = Scenario.from_yaml(diurnal, None, bundle.overrides())
    assert scenario.deployment is not None and scenario.deployment.autoscaler is not None
    policy = scenario.deployment.autoscaler.policy
    assert policy.type == "threshold" and policy.params["signal"] == "queue_depth"
    assert bundle.to_dict()["autoscale"]["params"]["up"] == 8
