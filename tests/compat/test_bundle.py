"""Reading the reference's PolicyBundle YAML as strictly as its yaml.v3 decoding with
KnownFields and Validate (compat/bundle.py, cluster.md §3.5)."""

from __future__ import annotations

import pytest

from blis_simpy.compat.bundle import SCORER_NAMES
from blis_simpy.compat.policy_config import policy_config
from blis_simpy.core.errors import ScenarioError
from tests.compat.helpers import error, write


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
    ("admission: {policy: admit}\n", "admission.policy",
     "always-admit, gaie-legacy, reject-all, tier-shed, token-bucket"),
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
    assert err.valid == ", ".join(SCORER_NAMES)


@pytest.mark.parametrize("text", ["- admission\n", "admission: always-admit\n",
                                  "scheduler: {type: fcfs}\n"])
def test_wrong_shapes(tmp_path, text):
    assert "expected" in error(tmp_path, text).problem


def test_invalid_yaml(tmp_path):
    assert "not valid YAML at line" in error(tmp_path, "admission: [\n").problem


def test_missing_file(tmp_path):
    with pytest.raises(ScenarioError, match="cannot read"):
        policy_config(tmp_path / "nope.yaml")
