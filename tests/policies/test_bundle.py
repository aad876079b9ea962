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
    base = scenario(**changes)
    return load(base, overrides=bundle.overrides(base)).to_dict()["policies"]


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


SEED_F1 = """\
# policies.yaml
admission:
  type: "token-bucket"
  params:
    bucket_size: 1000
    refill_rate: 100  # tokens/sec
    per_tenant: true

priority:
  type: "slo-based"
  params:
    realtime_score: 100
    batch_score: 10
    default_score: 50

routing:
  type: "weighted-scoring"
  params:
    cache_affinity_weight: 0.6
    load_balance_weight: 0.3
    queue_depth_weight: 0.1
    prefix_match_bonus: 0.5

scheduler:
  type: "priority-fcfs"
  params:
    respect_priority: true
    preemption_enabled: true
    preemption_policy: "lowest-priority"

autoscale:
  type: "threshold"
  params:
    scale_up_threshold: 0.8    # utilization
    scale_down_threshold: 0.3
    cooldown_seconds: 60
"""
# Seed F.4's example candidate, as written.
SEED_F4 = {
    "routing.cache_affinity_weight": 0.7,
    "routing.load_balance_weight": 0.2,
    "routing.queue_depth_weight": 0.1,
    "admission.bucket_size": 500,
    "autoscale.scale_up_threshold": 0.75,
}


def test_seed_f1_bundle_as_written_loads_and_runs(tmp_path: Path):
    """Every key of the seed's example bundle means something here: it loads, lands in a
    scenario with an autoscaler, and runs."""
    path = tmp_path / "policies.yaml"
    path.write_text(SEED_F1)
    bundle = PolicyBundle.from_yaml(path)
    assert bundle.axes["routing"]["params"]["prefix_match_bonus"] == 0.5
    assert bundle.axes["autoscale"]["params"] == {"up": 0.8, "down": 0.3, "cooldown_s": 60}
    search = blis_simpy.run_many("search-autoscale", {"f1": bundle}, [1], workers=1)
    assert search.error.tolist() == [""] and search.completed_requests[0] > 0
    policies = load("search-autoscale", overrides=bundle.overrides(load("search-autoscale")))
    assert policies.policies.scheduler.type == "priority-fcfs"
    assert policies.deployment.autoscaler.policy.params["cooldown_s"] == 60


def test_seed_f4_candidate_as_written_runs_with_the_templates_its_names_belong_to():
    """Flat F.1 names without a type mean their template (bucket_size: token-bucket), so the
    F.4 candidate runs on a scenario whose own templates differ, and its bad values fail when
    it is read, not mid-search."""
    bundle = PolicyBundle.from_dict(SEED_F4)
    assert bundle.implied == {"routing": "weighted", "admission": "token-bucket",
                              "autoscale": "threshold"}
    scenario = load("search-autoscale")
    changes = bundle.overrides(scenario)
    assert changes["policies.admission"] == {"type": "token-bucket",
                                             "params": {"capacity": 500}}
    table = blis_simpy.run_many(scenario, {"f4": SEED_F4}, [1], workers=1)
    assert table.error.tolist() == [""]
    with pytest.raises(ScenarioError, match=r"autoscale.params.up"):
        PolicyBundle.from_dict({**SEED_F4, "autoscale.scale_up_threshold": -1})


def test_params_of_the_scenarios_own_template_merge_with_its_other_params():
    base = {"policies": {"admission": {"type": "token-bucket",
                                       "params": {"refill_per_s": 7.0}}}}
    policies = applied(PolicyBundle.from_dict({"admission.bucket_size": 500}), **base)
    assert policies["admission"] == {"type": "token-bucket",
                                     "params": {"refill_per_s": 7.0, "capacity": 500}}


@pytest.mark.parametrize(("data", "where", "says"), [
    ({"scheduler.preemption_enabled": False}, "scheduler.preemption_enabled",
     "preempts whenever the KV cache is full"),
    ({"scheduler": {"type": "fcfs", "params": {"respect_priority": True}}},
     "scheduler.respect_priority", "type priority-fcfs does that"),
    ({"routing.respect_priority": True}, "routing.respect_priority", "a scheduler setting"),
    ({"admission.bucket_size": 5, "admission.cache_affinity_weight": 1},
     "admission.params.cache_affinity_weight", "unknown key"),
    ({"routing.cache_affinity_weight": 1, "routing.type": "round-robin"},
     "routing.params.scorers", ""),
])
def test_f1_settings_without_meaning_here_name_the_key_and_the_nearest(data, where, says):
    with pytest.raises(ScenarioError) as err:
        PolicyBundle.from_dict(data)
    assert err.value.path.startswith(where) and says in str(err.value)


def test_f1_statements_that_hold_are_accepted_and_imply_the_template():
    bundle = PolicyBundle.from_dict({"scheduler.respect_priority": True,
                                     "scheduler.preemption_enabled": True})
    assert bundle.implied == {"scheduler": "priority-fcfs"}
    assert applied(bundle)["scheduler"]["type"] == "priority-fcfs"
    assert "respect_priority" not in str(bundle.to_dict())


def test_axes_a_scenario_lacks_are_refused_naming_the_axis():
    for data, axis in (({"autoscale.type": "threshold"}, "autoscale"),
                       ({"pd.type": "never"}, "pd"),
                       ({"kv_tiers.type": "mirror"}, "kv_tiers")):
        with pytest.raises(ScenarioError, match=f"^{axis}: this scenario has no"):
            PolicyBundle.from_dict(data).overrides(scenario())


def test_a_params_only_axis_the_scenarios_template_does_not_take_names_who_does():
    with pytest.raises(ScenarioError, match=r"admission.capacity.*token-bucket"):
        blis_simpy.run_many(scenario(), {"c": {"admission.capacity": 5}}, [1], workers=1)


def test_a_misspelt_key_no_template_takes_names_the_nearest():
    """Finalcheck 20: `routing.typo` was told to "name the routing type that does: none
    does"."""
    with pytest.raises(ScenarioError, match=r"routing.typo.*did you mean routing.type\?"):
        blis_simpy.run_many(scenario(), {"c": {"routing.typo": "round-robin"}}, [1], workers=1)


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


def test_issue_35_templates_and_scorers_are_built_ins_a_candidate_may_name():
    """The gateway's shedding templates and the real-cache scorers are registry templates, not
    module:Class code: a candidate bundle names them and runs (with the F.1 bonus beside them,
    which keeps the shadow model the real-cache scorers alone would not need)."""
    candidate = {
        "admission": {"type": "tier-shed", "params": {"threshold": 4}},
        "routing": {"type": "weighted", "params": {
            "scorers": {"precise-prefix-cache": 2, "no-hit-lru": 1, "active-requests": 1},
            "prefix_match_bonus": 0.5}},
    }
    bundle = PolicyBundle.from_dict(candidate)
    assert bundle.axes["admission"]["type"] == "tier-shed"
    base = load("flow-control-shedding", overrides={"workload.duration_s": 1})
    table = blis_simpy.run_many(base, {"issue-35": candidate}, [1], workers=1)
    assert table.error.tolist() == [""] and table.completed_requests[0] > 0
