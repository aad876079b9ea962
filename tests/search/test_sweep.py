"""run_many: one row per run, the same rows whatever runs them, paired workloads."""

from __future__ import annotations

import math
import warnings
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import pandas as pd
import pytest

from blis_simpy.core.errors import ScenarioError
from blis_simpy.search.sweep import ID_COLUMNS, run_many
from blis_simpy.sim.run import run
from tests.search.helpers import prefix_scenario

POLICIES = {"rr": {"routing.type": "round-robin"},
            "prefix": {"routing": {"type": "prefix-affinity"}, "id": "cand-1"}}
SEEDS = [1, 2]


@pytest.fixture(scope="module")
def serial() -> pd.DataFrame:
    return run_many(prefix_scenario(), POLICIES, SEEDS, workers=1)


def test_one_row_per_run_with_ids_metrics_and_fitness(serial):
    assert len(serial) == 4
    assert list(serial.columns[:len(ID_COLUMNS)]) == list(ID_COLUMNS)
    assert list(zip(serial.policy, serial.seed, strict=True)) == [
        ("rr", 1), ("rr", 2), ("prefix", 1), ("prefix", 2)]
    assert list(serial.candidate_id) == ["", "", "cand-1", "cand-1"]
    for column in ("ttft_mean_ms", "cache_hit_rate", "slo_attainment", "objective.mean_ttft",
                   "preemption_count", "warnings"):
        assert column in serial.columns
    assert (serial.error == "").all() and (serial.fitness > 0).all()


def test_rows_identical_for_any_executor_and_worker_count(serial):
    pd.testing.assert_frame_equal(run_many(prefix_scenario(), POLICIES, SEEDS, workers=2),
                                  serial)
    with ProcessPoolExecutor(1) as pool:
        pd.testing.assert_frame_equal(
            run_many(prefix_scenario(), POLICIES, SEEDS, executor=pool), serial)
    with ThreadPoolExecutor(3) as pool:
        pd.testing.assert_frame_equal(
            run_many(prefix_scenario(), POLICIES, SEEDS, executor=pool), serial)


def test_rows_equal_a_plain_run(serial):
    result = run(prefix_scenario(), seed=2, overrides={"policies.routing.type": "round-robin"})
    row = serial[(serial.policy == "rr") & (serial.seed == 2)].iloc[0]
    assert row.fitness == result.evaluation.fitness
    assert row.ttft_p99_ms == result.summary["ttft_p99_ms"]


def test_common_random_numbers_same_workload_for_every_policy():
    """Policies change where requests go, never which requests arrive."""
    def workload(routing: str):
        requests = run(prefix_scenario(), seed=5,
                       overrides={"policies.routing.type": routing}).requests
        return requests[["id", "arrival_s", "input_tokens", "output_tokens", "tenant"]]

    pd.testing.assert_frame_equal(workload("round-robin"), workload("prefix-affinity"))


def test_progress_counts_every_run():
    seen: list[tuple[int, int]] = []
    run_many(prefix_scenario(), {"rr": None}, [1, 2], workers=1,
             progress=lambda done, total: seen.append((done, total)))
    assert seen == [(0, 2), (1, 2), (2, 2)]  # (first: what the store held, before any run)


def test_bad_candidate_fails_before_any_run_naming_it():
    with pytest.raises(ScenarioError, match=r"policies\['broken'\].*routing.*unknown"):
        run_many(prefix_scenario(), {"broken": {"routing.type": "no-such"}}, [1])
    with pytest.raises(ScenarioError, match="seeds"):
        run_many(prefix_scenario(), None, ["one"])


def test_policy_failing_mid_run_gives_zero_row_and_the_sweep_goes_on():
    """The user's own policy (`module:Class`, named in their scenario: a candidate may not
    import one, tests/search/test_candidate_imports.py)."""
    table = run_many({"crash": prefix_scenario(
        policies={"routing": {"type": "tests.search.helpers:Crashing"}}),
        "rr": prefix_scenario()}, None, [1], workers=1)
    crash, ok = table.iloc[0], table.iloc[1]
    assert crash.fitness == 0.0 and "scripted failure" in crash.error
    assert "ZeroDivisionError" in crash.error
    assert ok.error == "" and ok.fitness > 0


def test_dask_local_cluster_sweep_equals_the_serial_rows(serial):
    """The documented way to use many machines: a Dask client's executor."""
    from dask.distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        table = run_many(prefix_scenario(), POLICIES, SEEDS, executor=client.get_executor())
    pd.testing.assert_frame_equal(table, serial)


def test_run_many_is_part_of_the_package_api():
    import blis_simpy
    from blis_simpy.search.paired import compare_policies

    assert blis_simpy.run_many is run_many
    assert blis_simpy.compare_policies is compare_policies


def test_no_seeds_is_refused_not_an_empty_table():
    """newcomer 17's #8: `seeds=[]` returned a table without columns and no word."""
    with pytest.raises(ScenarioError, match="seeds: empty"):
        run_many("quickstart", {"x": {}}, seeds=[])


def test_a_pooled_sweep_prepares_each_workload_once_before_its_workers_fork(monkeypatch, serial):
    """Issue 30 item 6: the seed's requests are drawn and hashed once, in the caller, and the
    forked workers inherit them (the rows are the same as ever)."""
    import multiprocessing

    from blis_simpy.search import sweep
    from blis_simpy.workload.prepared import WorkloadCache

    method = multiprocessing.get_start_method(allow_none=True)
    if (method or multiprocessing.get_all_start_methods()[0]) != "fork":
        pytest.skip("workers inherit the caller's memory only when they fork")
    cache = WorkloadCache()
    monkeypatch.setattr(sweep, "WORKLOADS", cache)
    pd.testing.assert_frame_equal(run_many(prefix_scenario(), POLICIES, SEEDS, workers=2),
                                  serial)
    assert len(cache.kept) == len(SEEDS)  # one per seed: every policy shares it



def test_an_evaluation_never_imports_pandas():
    """Issue 30 item 6: a sweep's workers are forked before the caller imports pandas (for
    the table, while they run) and never import it themselves: the row, its feedback text
    included, is computed from the run's columns."""
    import subprocess
    import sys

    code = """if True:
        import sys
        from blis_simpy.search.contain import Limits
        from blis_simpy.search.sweep import evaluate, plan
        from blis_simpy.sim.run import load
        scenario = load("quickstart", overrides={"cluster.instances": 2,
                                                 "workload.num_requests": 50})
        candidate = {"routing.type": "weighted", "routing.weights.queue-depth": 1.0}
        rows = [evaluate(task) for task in plan({"q": scenario}, {"c": candidate}, [3],
                                                Limits())]
        assert all(not row["error"] and "## Outcome" in row["feedback"] for row in rows)
        print(sorted(m for m in sys.modules if m.split(".")[0] == "pandas"))
    """
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"


def test_a_repeated_seed_is_refused_naming_it():
    """newcomer 19's #4: `seeds=[1, 2, 3] * 3` ran each seed three times (deterministic
    copies) and compare_policies counted nine pairs, turning an interval across zero into a
    'significant' one."""
    with pytest.raises(ScenarioError, match=r"seeds: 1, 3 repeated: runs are deterministic"):
        run_many("quickstart", {"x": {}}, seeds=[1, 2, 3, 1, 3, 1])


def test_compare_policies_refuses_a_table_holding_a_run_twice(serial):
    """Two concatenated sweep tables with overlapping seeds: the copies are no samples."""
    from blis_simpy.search.paired import compare_policies

    twice = pd.concat([serial, serial[serial.seed == 1]], ignore_index=True)
    with pytest.raises(ScenarioError, match=r"table: scenario prefix, policy rr, seed 1 is "
                       r"there 2 times \(2 such\)"):
        compare_policies(twice, "rr")


def test_seeds_of_a_pinned_workload_are_one_sample_not_several():
    """newcomer 19's #4: a scenario pinning `seeds.workload` draws the same requests for
    every seed; compare_policies reported a zero-width interval 'over 4 seeds'. The seeds
    sharing a workload_id are one sample: no interval from copies, and a warning says so."""
    from blis_simpy.search.paired import compare_policies

    table = run_many(prefix_scenario(seeds={"workload": 5}), POLICIES, [1, 2, 3], workers=1)
    assert table.workload_id.nunique() == 1
    with pytest.warns(UserWarning, match=r"counted once.*prefix prefix: 3 seeds, 1 distinct"):
        warnings.filterwarnings("ignore", message=".*measured from t=0")
        compared = compare_policies(table, "rr")
    row = compared[compared.metric == "fitness"].iloc[0]
    assert (row.seeds, row.workloads) == (3, 1)
    assert math.isnan(row.ci_low) and math.isnan(row.ci_high)
    fitness = table.groupby("policy").fitness.first()
    assert row.mean_diff == pytest.approx(fitness["prefix"] - fitness["rr"])


def test_distinct_workloads_keep_one_sample_per_seed(serial):
    from blis_simpy.search.paired import compare_policies

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        warnings.filterwarnings("ignore", message=".*measured from t=0")
        compared = compare_policies(serial, "rr")
    assert (compared.seeds == 2).all() and (compared.workloads == 2).all()
    assert compared.ci_low.notna().all()
