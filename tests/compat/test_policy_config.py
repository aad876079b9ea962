"""Converting the reference's PolicyBundle YAML (`--policy-config`, cluster.md §3.5)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from blis_simpy.cli import app
from blis_simpy.compat.policy_config import policy_config
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import ScenarioError
from blis_simpy.policies.admission import ADMISSION, AlwaysAdmit
from blis_simpy.policies.priority import PRIORITY
from blis_simpy.policies.routing import ROUTING, RoundRobin, Weighted
from blis_simpy.policies.scheduler import SCHEDULER

POLICIES = Path(__file__).parents[1] / "data" / "policies"
LLAMA = "meta-llama/llama-3.1-8b-instruct"
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


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return path


def error(tmp_path: Path, text: str) -> ScenarioError:
    path = write(tmp_path, text)
    with pytest.raises(ScenarioError) as err:
        policy_config(path)
    assert err.value.path.startswith(str(path))
    return err.value


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


def test_only_the_first_document_is_read(tmp_path):
    path = write(tmp_path, "scheduler: sjf\n---\nscheduler: [unclosed\n")
    assert policy_config(path)["scheduler"] == {"type": "sjf"}


@pytest.mark.parametrize("text", ["", "# only a comment\n", "\n\n"])
def test_empty_file_is_an_error(tmp_path, text):
    err = error(tmp_path, text)
    assert "EOF" in err.problem


def test_unknown_top_level_key(tmp_path):
    err = error(tmp_path, "scheduler: fcfs\nschedular: sjf\n")
    assert err.path.endswith(": schedular") and "line 2" in err.problem
    assert err.valid == "admission, routing, priority, scheduler"


@pytest.mark.parametrize("text,key", [
    ("admission:\n  policy: always-admit\n  capacity: 3\n", "admission.capacity"),
    ("routing:\n  weights: {}\n", "routing.weights"),
    ("priority:\n  name: constant\n", "priority.name"),
    ("routing:\n  scorers:\n    - {name: queue-depth, weight: 1, extra: 2}\n",
     "routing.scorers[0].extra"),
])
def test_unknown_nested_keys(tmp_path, text, key):
    err = error(tmp_path, text)
    assert err.path.endswith(f": {key}") and "unknown key" in err.problem


def test_repeated_key_is_an_error(tmp_path):
    err = error(tmp_path, "scheduler: fcfs\nscheduler: sjf\n")
    assert err.path.endswith(": scheduler") and "repeated" in err.problem


@pytest.mark.parametrize("text,key,valid", [
    ("admission: {policy: admit}\n", "admission.policy", "always-admit, reject-all, token-bucket"),
    ("routing: {policy: random}\n", "routing.policy",
     "always-busiest, least-loaded, prefix-affinity, round-robin, weighted"),
    ("priority: {policy: edf}\n", "priority.policy", "constant, inverted-slo, slo-based"),
    ("scheduler: lifo\n", "scheduler", "fcfs, priority-fcfs, reverse-priority, sjf"),
])
def test_unknown_policy_lists_valid_names(tmp_path, text, key, valid):
    err = error(tmp_path, text)
    assert err.path.endswith(f": {key}") and err.valid == valid
    assert "unknown" in err.problem


@pytest.mark.parametrize("value,problem", [
    ("-1", "must be non-negative, got -1.0"),
    (".inf", "must be a finite number, got inf"),
    (".nan", "must be a finite number, got nan"),
    ("'10'", "expected a number"),
    ("ten", "expected a number"),
    ("[1]", "expected a number"),
])
def test_bad_capacity(tmp_path, value, problem):
    err = error(tmp_path, f"admission:\n  token_bucket_capacity: {value}\n")
    assert err.path.endswith(": admission.token_bucket_capacity") and problem in err.problem


def test_bad_refill_rate(tmp_path):
    err = error(tmp_path, "admission:\n  token_bucket_refill_rate: -0.5\n")
    assert err.path.endswith(": admission.token_bucket_refill_rate")


def test_zero_capacity_is_valid_yaml_but_not_for_token_bucket(tmp_path):
    assert policy_config(write(tmp_path, "admission:\n  token_bucket_capacity: 0\n")) \
        == DEFAULTS
    err = error(tmp_path, "admission:\n  policy: token-bucket\n  token_bucket_capacity: 0\n")
    assert err.path.endswith(": admission.token_bucket_capacity") and "> 0" in err.problem


@pytest.mark.parametrize("scorers,key,problem", [
    ("[{name: cache, weight: 1}]", "routing.scorers[0].name", "unknown scorer 'cache'"),
    ("[{name: queue-depth, weight: 1}, {name: queue-depth, weight: 2}]",
     "routing.scorers[1].name", "duplicate scorer 'queue-depth'"),
    ("[{name: queue-depth}]", "routing.scorers[0].weight", "got 0.0"),
    ("[{name: queue-depth, weight: 0}]", "routing.scorers[0].weight", "got 0.0"),
    ("[{name: queue-depth, weight: .inf}]", "routing.scorers[0].weight", "got inf"),
    ("[{weight: 1}]", "routing.scorers[0].name", "unknown scorer ''"),
    ("{name: queue-depth}", "routing.scorers", "expected a list"),
])
def test_bad_scorers(tmp_path, scorers, key, problem):
    err = error(tmp_path, f"routing:\n  policy: weighted\n  scorers: {scorers}\n")
    assert err.path.endswith(f": {key}") and problem in err.problem


def test_unknown_scorer_lists_valid_names(tmp_path):
    err = error(tmp_path, "routing:\n  scorers:\n    - {name: x, weight: 1}\n")
    assert err.valid == "kv-utilization, load-balance, prefix-affinity, queue-depth"


@pytest.mark.parametrize("text", ["- admission\n", "admission: always-admit\n",
                                  "scheduler: {type: fcfs}\n"])
def test_wrong_shapes(tmp_path, text):
    assert "expected" in error(tmp_path, text).problem


def test_invalid_yaml(tmp_path):
    assert "not valid YAML at line" in error(tmp_path, "admission: [\n").problem


def test_missing_file(tmp_path):
    with pytest.raises(ScenarioError, match="cannot read"):
        policy_config(tmp_path / "nope.yaml")


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
