"""The `policies:` section (compat/policy_config.py): a PolicyBundle converted alone
(`--policy-config`, `convert policy-config`), and the policy flags of `blis run` with their
precedence over the bundle (cluster.md §3)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from blis_simpy.cli import app
from blis_simpy.compat.bundle import SCORER_NAMES
from blis_simpy.compat.convert import blis_command
from blis_simpy.compat.policy_config import policy_config
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import ScenarioError
from blis_simpy.policies.admission import ADMISSION, AlwaysAdmit
from blis_simpy.policies.priority import PRIORITY
from blis_simpy.policies.routing import ROUTING, RoundRobin, Weighted
from blis_simpy.policies.scheduler import SCHEDULER
from tests.compat.helpers import BASE, COEFFS, LLAMA, bundle, convert, error, policies, write

POLICIES = Path(__file__).parents[1] / "data" / "policies"
DEFAULTS = {"admission": {"type": "always-admit"}, "priority": {"type": "constant"},
            "routing": {"type": "round-robin"}, "scheduler": {"type": "fcfs"}}


def with_routing(routing: dict) -> dict:
    return {**DEFAULTS, "routing": routing}


EXAMPLES = {
    "policy-config.yaml": DEFAULTS,
    "weighted-routing.yaml": with_routing({"type": "weighted", "params": {"scorers": {
        "prefix-affinity": 3.0, "queue-depth": 2.0, "kv-utilization": 2.0}}}),
    "epp-precise-prefix.yaml": with_routing({"type": "weighted", "params": {"scorers": {
        "prefix-affinity": 2.0, "kv-utilization": 1.0, "queue-depth": 1.0}}}),
    "epp-estimate-prefix.yaml": with_routing({"type": "weighted", "params": {"scorers": {
        "prefix-affinity": 1.0, "load-balance": 1.0}}}),
}


def load(policies: dict) -> Scenario:
    return Scenario.from_dict({"version": 1, "model": {"name": LLAMA}, "compat": "blis",
                               "cluster": {"instances": 2}, "policies": policies})


@pytest.mark.parametrize("name", EXAMPLES)
def test_reference_examples_convert_load_and_build(name):
    policies = policy_config(POLICIES / name)
    assert policies == EXAMPLES[name]
    assert list(policies["routing"].get("params", {}).get("scorers", {})) == list(
        EXAMPLES[name]["routing"].get("params", {}).get("scorers", {}))  # order kept
    config = load(policies).policies
    assert isinstance(ADMISSION.create(config.admission, "policies.admission"), AlwaysAdmit)
    PRIORITY.create(config.priority, "policies.priority")
    SCHEDULER.create(config.scheduler, "policies.scheduler")
    routing = ROUTING.create(config.routing, "policies.routing")
    assert isinstance(routing, Weighted if name != "policy-config.yaml" else RoundRobin)
    if isinstance(routing, Weighted):
        weights = EXAMPLES[name]["routing"]["params"]["scorers"].values()
        assert [w for _, _, w in routing.scorers] == [w / sum(weights) for w in weights]


def test_full_bundle(tmp_path):
    path = write(tmp_path, """
admission:
  policy: token-bucket
  token_bucket_capacity: 1e3
  token_bucket_refill_rate: 0x10
routing:
  policy: prefix-affinity
priority:
  policy: inverted-slo
scheduler: reverse-priority
""")
    policies = policy_config(path)
    assert policies == {
        "admission": {"type": "token-bucket", "params": {"capacity": 1000.0,
                                                         "refill_per_s": 16.0,
                                                         "cost": "tokens"}},
        "priority": {"type": "inverted-slo"}, "routing": {"type": "prefix-affinity"},
        "scheduler": {"type": "reverse-priority"}}
    bucket = ADMISSION.create(load(policies).policies.admission, "policies.admission")
    assert (bucket.params.capacity, bucket.params.refill_per_s) == (1000.0, 16.0)


def test_token_bucket_without_parameters_uses_reference_defaults(tmp_path):
    policies = policy_config(write(tmp_path, "admission:\n  policy: token-bucket\n"))
    assert policies["admission"]["params"] == {"capacity": 10000.0, "refill_per_s": 1000.0,
                                               "cost": "tokens"}


@pytest.mark.parametrize("text", ["---\n", "admission:\n", "admission: {policy: ''}\n",
                                  "routing: {scorers: []}\nscheduler: ~\n"])
def test_null_and_empty_values_mean_unset(tmp_path, text):
    assert policy_config(write(tmp_path, text)) == DEFAULTS


def test_weighted_without_scorers_gets_default_profile(tmp_path):
    policies = policy_config(write(tmp_path, "routing:\n  policy: weighted\n  scorers: []\n"))
    assert list(policies["routing"]["params"]["scorers"].items()) == [
        ("prefix-affinity", 3.0), ("queue-depth", 2.0), ("kv-utilization", 2.0)]


def test_scorers_of_a_non_weighted_router_are_validated_but_unused(tmp_path):
    text = "routing:\n  policy: least-loaded\n  scorers:\n    - {name: load-balance, weight: 1}\n"
    assert policy_config(write(tmp_path, text))["routing"] == {"type": "least-loaded"}
    bad = "routing:\n  policy: least-loaded\n  scorers:\n    - {name: nope, weight: 1}\n"
    assert error(tmp_path, bad).problem == "unknown scorer 'nope'"


def test_zero_capacity_is_valid_yaml_but_not_for_token_bucket(tmp_path):
    assert policy_config(write(tmp_path, "admission:\n  token_bucket_capacity: 0\n")) \
        == DEFAULTS
    err = error(tmp_path, "admission:\n  policy: token-bucket\n  token_bucket_capacity: 0\n")
    assert err.path.endswith(": admission.token_bucket_capacity") and "> 0" in err.problem


# ---------------------------------------------------------------- policy flags

def test_token_bucket_takes_the_reference_defaults():
    _, scenario = convert(*BASE, *COEFFS[:2], "--admission-policy", "token-bucket")
    assert policies(scenario)["admission"] == ("token-bucket", {
        "capacity": 10000.0, "refill_per_s": 1000.0, "cost": "tokens"})


def test_token_bucket_flags_map_to_params_and_build():
    from blis_simpy.policies.admission import ADMISSION, TokenBucket

    _, scenario = convert(*BASE, *COEFFS[:2], "--admission-policy", "token-bucket",
                          "--token-bucket-capacity", "500", "--token-bucket-refill-rate", "2.5")
    policy = ADMISSION.create(scenario.policies.admission, "policies.admission")
    assert isinstance(policy, TokenBucket)
    assert (policy.params.capacity, policy.params.refill_per_s, policy.params.cost,
            policy.params.per_tenant) == (500.0, 2.5, "tokens", False)


def test_bucket_flags_are_ignored_without_token_bucket():
    data, _ = convert(*BASE, *COEFFS[:2], "--token-bucket-capacity", "0")
    assert data["policies"]["admission"] == {"type": "always-admit"}


@pytest.mark.parametrize("name", ["always-admit", "reject-all", ""])
def test_admission_policy_names(name):
    _, scenario = convert(*BASE, *COEFFS[:2], "--admission-policy", name)
    assert scenario.policies.admission.type == (name or "always-admit")


@pytest.mark.parametrize("name", ["round-robin", "least-loaded", "prefix-affinity",
                                  "always-busiest", ""])
def test_routing_policy_names(name):
    from blis_simpy.policies.routing import ROUTING

    _, scenario = convert(*BASE, *COEFFS[:2], "--routing-policy", name, "--num-instances", "2")
    assert scenario.policies.routing.type == (name or "round-robin")
    assert scenario.policies.routing.params == {}
    ROUTING.create(scenario.policies.routing, "policies.routing")


@pytest.mark.parametrize("name", ["constant", "slo-based", "inverted-slo", ""])
def test_priority_policy_names(name):
    from blis_simpy.policies.priority import PRIORITY

    _, scenario = convert(*BASE, *COEFFS[:2], "--priority-policy", name)
    assert scenario.policies.priority.type == (name or "constant")
    PRIORITY.create(scenario.policies.priority, "policies.priority")


@pytest.mark.parametrize("name", ["fcfs", "priority-fcfs", "sjf", "reverse-priority", ""])
def test_scheduler_names(name):
    from blis_simpy.policies.scheduler import SCHEDULER

    _, scenario = convert(*BASE, *COEFFS[:2], "--scheduler", name)
    assert scenario.policies.scheduler.type == (name or "fcfs")
    assert SCHEDULER.create(scenario.policies.scheduler, "policies.scheduler").params.preemption \
        == "lifo"


def test_weighted_without_scorers_gets_the_reference_default_profile():
    data, scenario = convert(*BASE, *COEFFS[:2], "--routing-policy", "weighted")
    scorers = data["policies"]["routing"]["params"]["scorers"]
    assert list(scorers.items()) == [("prefix-affinity", 3.0), ("queue-depth", 2.0),
                                     ("kv-utilization", 2.0)]
    assert scenario.policies.routing.params == {"scorers": scorers}


def test_routing_scorers_are_parsed_trimmed_and_keep_their_order():
    from blis_simpy.policies.routing import ROUTING, Weighted

    data, scenario = convert(*BASE, *COEFFS[:2], "--routing-policy", "weighted",
                             "--num-instances", "2", "--routing-scorers",
                             " load-balance : 1 , queue-depth:0.5,kv-utilization:2e0 ")
    assert list(data["policies"]["routing"]["params"]["scorers"].items()) == [
        ("load-balance", 1.0), ("queue-depth", 0.5), ("kv-utilization", 2.0)]
    policy = ROUTING.create(scenario.policies.routing, "policies.routing")
    assert isinstance(policy, Weighted)
    assert [w for _, _, w in policy.scorers] == [1 / 3.5, 0.5 / 3.5, 2 / 3.5]


def test_routing_scorers_without_weighted_are_ignored_unparsed():
    data, _ = convert(*BASE, *COEFFS[:2], "--routing-scorers", "bogus")
    assert data["policies"]["routing"] == {"type": "round-robin"}


SCORER_ERRORS = {
    "missing colon": ("queue-depth", "invalid scorer config 'queue-depth'"),
    "empty item": ("queue-depth:1,", "invalid scorer config ''"),
    "blank": (" ", "invalid scorer config ''"),
    "unknown name": ("cache:1", "unknown scorer 'cache'"),
    "duplicate": ("queue-depth:1, queue-depth :2", "duplicate scorer 'queue-depth'"),
    "weight zero": ("queue-depth:0", "finite positive number, got 0.0"),
    "weight negative": ("queue-depth:-1", "finite positive number, got -1.0"),
    "weight inf": ("queue-depth:Inf", "finite positive number, got inf"),
    "weight nan": ("queue-depth:NaN", "finite positive number, got nan"),
    "weight text": ("queue-depth:high", "invalid weight for scorer 'queue-depth'"),
    "weight empty": ("queue-depth:", "invalid weight for scorer 'queue-depth'"),
}


@pytest.mark.parametrize("text,message", SCORER_ERRORS.values(), ids=SCORER_ERRORS.keys())
def test_routing_scorer_errors(text, message):
    with pytest.raises(ScenarioError) as err:
        blis_command(["run", *BASE, *COEFFS[:2], "--routing-policy", "weighted",
                      "--routing-scorers", text])
    assert err.value.path == "--routing-scorers" and message in str(err.value)


def test_unknown_scorer_lists_the_valid_names():
    with pytest.raises(ScenarioError) as err:
        blis_command(["run", *BASE, *COEFFS[:2], "--routing-policy", "weighted",
                      "--routing-scorers", "x:1"])
    assert err.value.valid == ", ".join(SCORER_NAMES)


def test_unknown_policy_names_list_every_valid_name():
    with pytest.raises(ScenarioError) as err:
        blis_command(["run", *BASE, *COEFFS[:2], "--scheduler", "edf"])
    assert err.value.valid == "fcfs, priority-fcfs, reverse-priority, sjf"


# ---------------------------------------------------------------- --policy-config precedence

def test_policy_config_fills_unset_flags(tmp_path):
    path = bundle(tmp_path, """
admission: {policy: token-bucket, token_bucket_capacity: 64, token_bucket_refill_rate: 8}
routing: {policy: least-loaded}
priority: {policy: slo-based}
scheduler: priority-fcfs
""")
    _, scenario = convert(*BASE, *COEFFS[:2], "--policy-config", str(path))
    assert policies(scenario) == {
        "admission": ("token-bucket", {"capacity": 64.0, "refill_per_s": 8.0, "cost": "tokens"}),
        "priority": ("slo-based", {}), "routing": ("least-loaded", {}),
        "scheduler": ("priority-fcfs", {})}


def test_explicit_flags_beat_the_policy_config_even_at_their_defaults(tmp_path):
    path = bundle(tmp_path, """
admission: {policy: token-bucket, token_bucket_capacity: 64, token_bucket_refill_rate: 8}
routing: {policy: least-loaded}
priority: {policy: slo-based}
scheduler: priority-fcfs
""")
    _, scenario = convert(*BASE, *COEFFS[:2], "--policy-config", str(path),
                          "--token-bucket-capacity", "10000", "--routing-policy", "round-robin",
                          "--priority-policy", "inverted-slo", "--scheduler", "fcfs")
    assert policies(scenario) == {
        "admission": ("token-bucket", {"capacity": 10000.0, "refill_per_s": 8.0,
                                       "cost": "tokens"}),
        "priority": ("inverted-slo", {}), "routing": ("round-robin", {}),
        "scheduler": ("fcfs", {})}


def test_explicit_empty_flag_means_its_default_not_the_bundle(tmp_path):
    path = bundle(tmp_path, "admission: {policy: reject-all}\n")
    _, scenario = convert(*BASE, *COEFFS[:2], "--policy-config", str(path),
                          "--admission-policy", "")
    assert scenario.policies.admission.type == "always-admit"


def test_unset_bundle_keys_keep_flag_defaults(tmp_path):
    path = bundle(tmp_path, "routing:\n  policy: weighted\n")
    data, scenario = convert(*BASE, *COEFFS[:2], "--policy-config", str(path))
    assert policies(scenario)["admission"] == ("always-admit", {})
    assert policies(scenario)["scheduler"] == ("fcfs", {})
    # no scorers in the bundle or on the command line: the reference's default profile
    assert data["policies"]["routing"]["params"]["scorers"] == {
        "prefix-affinity": 3.0, "queue-depth": 2.0, "kv-utilization": 2.0}


def test_bundle_scorers_apply_when_weighted_and_no_routing_scorers():
    _, scenario = convert(*BASE, *COEFFS[:2], "--policy-config",
                          str(POLICIES / "epp-estimate-prefix.yaml"))
    assert scenario.policies.routing.params == {
        "scorers": {"prefix-affinity": 1.0, "load-balance": 1.0}}


def test_routing_scorers_flag_beats_bundle_scorers():
    _, scenario = convert(*BASE, *COEFFS[:2], "--policy-config",
                          str(POLICIES / "epp-estimate-prefix.yaml"),
                          "--routing-scorers", "queue-depth:1")
    assert scenario.policies.routing.params == {"scorers": {"queue-depth": 1.0}}


def test_empty_routing_scorers_flag_still_uses_bundle_scorers():
    _, scenario = convert(*BASE, *COEFFS[:2], "--policy-config",
                          str(POLICIES / "epp-precise-prefix.yaml"), "--routing-scorers=")
    assert list(scenario.policies.routing.params["scorers"]) == [
        "prefix-affinity", "kv-utilization", "queue-depth"]


def test_bundle_scorers_are_dropped_when_the_flag_picks_another_router():
    data, _ = convert(*BASE, *COEFFS[:2], "--policy-config",
                      str(POLICIES / "weighted-routing.yaml"), "--routing-policy", "least-loaded")
    assert data["policies"]["routing"] == {"type": "least-loaded"}


def test_flag_weighted_with_bundle_scorers_for_another_router(tmp_path):
    path = bundle(tmp_path, "routing:\n  policy: round-robin\n  scorers:\n"
                  "    - {name: load-balance, weight: 4}\n")
    _, scenario = convert(*BASE, *COEFFS[:2], "--policy-config", str(path),
                          "--routing-policy", "weighted")
    assert scenario.policies.routing.params == {"scorers": {"load-balance": 4.0}}


def test_policy_config_path_is_relative_to_cwd(tmp_path):
    bundle(tmp_path, "scheduler: sjf\n", "rel.yaml")
    _, scenario = convert(*BASE, *COEFFS[:2], "--policy-config", "rel.yaml", cwd=tmp_path)
    assert scenario.policies.scheduler.type == "sjf"


def test_bucket_values_from_the_bundle_are_checked_where_they_come_from(tmp_path):
    path = bundle(tmp_path, "admission:\n  policy: token-bucket\n  token_bucket_capacity: 0\n")
    with pytest.raises(ScenarioError) as err:
        blis_command(["run", *BASE, *COEFFS[:2], "--policy-config", str(path)])
    assert err.value.path == f"--policy-config {path}: admission.token_bucket_capacity"
    # a capacity of 0 is valid YAML for the reference; it only fails with token-bucket
    _, scenario = convert(*BASE, *COEFFS[:2], "--policy-config", str(path),
                          "--admission-policy", "always-admit")
    assert scenario.policies.admission.type == "always-admit"
    # and a flag can repair it
    _, scenario = convert(*BASE, *COEFFS[:2], "--policy-config", str(path),
                          "--token-bucket-capacity", "7")
    assert scenario.policies.admission.params["capacity"] == 7.0


def test_bad_policy_config_names_flag_file_and_key(tmp_path):
    path = bundle(tmp_path, "routing:\n  policy: random\n")
    with pytest.raises(ScenarioError) as err:
        blis_command(["run", *BASE, *COEFFS[:2], "--policy-config", str(path)])
    assert err.value.path == f"--policy-config {path}: routing.policy"
    assert "round-robin" in err.value.valid


def test_invalid_bundle_fails_even_when_flags_override_it(tmp_path):
    path = bundle(tmp_path, "scheduler: lifo\n")
    with pytest.raises(ScenarioError, match="unknown scheduler 'lifo'"):
        blis_command(["run", *BASE, *COEFFS[:2], "--policy-config", str(path),
                      "--scheduler", "fcfs"])


def test_missing_policy_config_file(tmp_path):
    with pytest.raises(ScenarioError, match="cannot read") as err:
        blis_command(["run", *BASE, *COEFFS[:2], "--policy-config", "nope.yaml"],
                     cwd=tmp_path)
    assert err.value.path == "--policy-config nope.yaml"


# ---------------------------------------------------------------- command line

RUNNER = CliRunner()


@pytest.mark.parametrize("name", EXAMPLES)
def test_cli_prints_loadable_policies_yaml(name):
    result = RUNNER.invoke(app, ["convert", "policy-config", str(POLICIES / name)])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("# Converted from the reference BLIS policy config")
    data = yaml.safe_load(result.stdout)
    assert list(data) == ["policies"] and data["policies"] == EXAMPLES[name]
    config = load(data["policies"]).policies
    ROUTING.create(config.routing, "policies.routing")


def test_cli_bad_input_exits_2_with_one_error_line(tmp_path):
    path = write(tmp_path, "routing:\n  policy: random\n")
    result = RUNNER.invoke(app, ["convert", "policy-config", str(path)])
    assert result.exit_code == 2 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert "routing.policy" in lines[0] and "round-robin" in lines[0]
    assert "Traceback" not in result.output
