"""Bad search inputs, generated: policy bundles (`run --policy-config`), flat candidates and
sweep files (`sweep`). Every one exits 2 with one line naming what was wrong, no traceback,
and writes nothing (no table, no run store, no output folder)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from blis_simpy.cli import app
from tests.conftest import BASE, merge

RUNNER = CliRunner()
FUZZ = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.too_slow,
                                       HealthCheck.function_scoped_fixture])
AXES = ["admission", "priority", "routing", "scheduler", "autoscale", "pd", "kv_tiers"]
NAMES = ["type", "params", "capacity", "bucket_size", "weights.prefix-affinity",
         "cache_affinity_weight", "prefix_match_bonus", "respect_priority",
         "preemption_enabled", "preemption_policy", "scale_up_threshold", "threshold",
         "eviction", "quotas", "nosuch"]
VALUES = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=True),
                   st.sampled_from(["round-robin", "weighted-scoring", "token-bucket",
                                    "mirror", "never", "lifo", "nosuch", "", "a:b"]),
                   st.lists(st.integers(), max_size=2),
                   st.dictionaries(st.sampled_from(["batch", "x", "queue-depth"]),
                                   st.integers(-2, 2), max_size=2))
FLAT = st.dictionaries(st.builds(lambda a, n: f"{a}.{n}", st.sampled_from(AXES),
                                 st.sampled_from(NAMES)), VALUES, min_size=1, max_size=3)
NESTED = st.dictionaries(st.sampled_from([*AXES, "id", "generation", "bogus"]),
                         st.one_of(VALUES, st.dictionaries(st.sampled_from(["type", "params"]),
                                                           VALUES, max_size=2)),
                         min_size=1, max_size=3)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b"/"
            for p in sorted(folder.rglob("*"))}


def refused(folder: Path, args: list[str]) -> bool:
    """Run the command; a refusal must be exit 2 with one line and nothing written. Returns
    whether it was refused (a generated input may be valid)."""
    before = snapshot(folder)
    result = RUNNER.invoke(app, args, env={"COLUMNS": "200"})
    if result.exit_code == 0:
        return False
    assert result.exit_code == 2, (args, result.output)
    assert "Traceback" not in result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, \
        result.stderr
    assert snapshot(folder) == before
    return True


def scenario_file(folder: Path) -> Path:
    path = folder / "s.yaml"
    path.write_text(yaml.safe_dump(merge(BASE, {"workload": {"num_requests": 4}})))
    return path


@FUZZ
@given(st.one_of(FLAT, NESTED, VALUES))
def test_fuzzed_policy_bundles_exit_2_with_one_line(tmp_path_factory, data: Any):
    folder = tmp_path_factory.mktemp("bundle")
    scenario = scenario_file(folder)
    bundle = folder / "bundle.yaml"
    bundle.write_text(yaml.safe_dump(data))
    refused(folder, ["run", str(scenario), "--policy-config", str(bundle),
                     "--out", str(folder / "out"), "--quiet"])


def sweep_args(folder: Path, sweep: Any) -> list[str]:
    path = folder / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return ["sweep", str(path), "--workers", "1", "--quiet"]


@FUZZ
@given(FLAT)
def test_fuzzed_flat_candidates_exit_2_with_one_line(tmp_path_factory, candidate):
    folder = tmp_path_factory.mktemp("flat")
    scenario_file(folder)
    refused(folder, sweep_args(folder, {"scenarios": ["s.yaml"], "seeds": [1],
                                        "policies": {"c": candidate}, "out": "t.csv"}))


SWEEP_KEYS = st.sampled_from(["scenarios", "policies", "seeds", "set", "out", "store", "x"])
SWEEP_VALUES = st.one_of(
    VALUES, st.just(["s.yaml"]), st.just(["nosuch"]), st.just(["quickstart", "quickstart"]),
    st.just({"a": {"routing.type": "nosuch"}}), st.just({"a": "missing-bundle.yaml"}),
    st.just(["1", 2]), st.just({"cluster.instances": 0}), st.just("t.txt"),
    st.just("sub/dir/"), st.just("store.sqlite"))


@FUZZ
@given(st.one_of(st.dictionaries(SWEEP_KEYS, SWEEP_VALUES, max_size=4), VALUES))
def test_fuzzed_sweep_files_exit_2_with_one_line(tmp_path_factory, sweep):
    folder = tmp_path_factory.mktemp("sweep")
    scenario_file(folder)
    (folder / "store.sqlite").write_text("not a store")
    refused(folder, sweep_args(folder, sweep))


def test_a_bad_store_file_is_refused_before_any_run(tmp_path: Path):
    scenario_file(tmp_path)
    (tmp_path / "t.runs.sqlite").write_bytes(b"\x00" * 200)
    assert refused(tmp_path, sweep_args(tmp_path, {"scenarios": ["s.yaml"], "seeds": [1],
                                                   "out": "t.csv"}))
