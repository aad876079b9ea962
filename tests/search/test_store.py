"""The run store: every finished run on disk at once, keyed by content; a sweep started again
skips what is done, and gives the same table."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from blis_simpy.core.errors import ScenarioError
from blis_simpy.search import store as store_module
from blis_simpy.search import sweep
from blis_simpy.search.store import RunStore, normalised, run_key
from blis_simpy.search.sweep import run_many
from tests.search.helpers import prefix_scenario

POLICIES = {"rr": {"routing.type": "round-robin"},
            "ll": {"routing.type": "least-loaded"}}


def counting(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every run actually simulated (workers=1 runs them in this process)."""
    ran: list[str] = []
    real = sweep.evaluate

    def evaluate(task: sweep.Task) -> dict:
        ran.append(f"{task.policy_name}/{task.seed}")
        return real(task)

    monkeypatch.setattr(sweep, "evaluate", evaluate)
    return ran


def test_key_changes_with_scenario_seed_code_files_and_simulator(tmp_path, monkeypatch):
    from blis_simpy.config.scenario import Scenario

    scenario = prefix_scenario()
    base = run_key(scenario, 1)
    assert run_key(scenario, 1) == base
    assert run_key(scenario, 2) != base
    assert run_key(prefix_scenario(name="other"), 1) != base
    assert run_key(scenario, 1, ("routing", "Policy", "src", "")) != base
    trace = tmp_path / "t.csv"
    trace.write_text("a")
    with_file = Scenario.from_dict({**scenario.to_dict(),
                                    "workload": {"type": "trace", "path": str(trace)}})
    before = run_key(with_file, 1)
    time.sleep(0.01)
    trace.write_text("b")  # same path, other content
    assert run_key(with_file, 1) != before
    monkeypatch.setattr(store_module, "simulator_version", lambda: "0.0.0+other")
    assert run_key(scenario, 1) != base


TREE = """\
routing:
  type: decision-tree
  params:
    tree:
      if: {signal: request.tenant, op: "==", value: %s}
      then: {scorer: prefix-affinity, weight: 2}
      else: {scorer: load-balance}
"""


def test_a_candidates_text_naming_a_file_never_opens_it(tmp_path):
    """newcomer 20 #3: the key read every string of the scenario that named a file, a
    candidate's decision-tree text too: `/proc/self/mem` raised OSError out of the evaluator
    (`/proc/self/pagemap` read 256 GiB), and any other file was read on its behalf. Only the
    fields that name input files are read now: the candidate scores, and its key does not
    follow the file it names."""
    named = tmp_path / "secret.txt"
    named.write_text("one")
    candidates = {"mem": yaml.safe_load(TREE % "/proc/self/mem"),
                  "file": yaml.safe_load(TREE % named)}
    table = run_many(prefix_scenario(), candidates, [1], workers=1)
    assert list(table.error) == ["", ""] and (table.fitness > 0).all()
    before = sweep.plan({"s": prefix_scenario()}, {"file": candidates["file"]}, [1],
                        sweep.Limits())[0].key
    named.write_text("two")
    assert sweep.plan({"s": prefix_scenario()}, {"file": candidates["file"]}, [1],
                      sweep.Limits())[0].key == before


def test_a_recalibrated_coefficients_file_is_run_again_not_served_stale(tmp_path):
    """newcomer 18: `latency.coefficients` named a file outside the keys then read; its content
    must key the run, or a sweep after `calibrate` reports the old step model's numbers."""
    import json

    from blis_simpy.config.scenario import Scenario

    bundled = Path(store_module.__file__).resolve().parents[1] / "data" / "step_models"
    fitted = json.loads((bundled / "vllm.json").read_text())
    coefficients = tmp_path / "mine.json"
    coefficients.write_text(json.dumps(fitted))
    data = prefix_scenario().to_dict()
    data["latency"] = {"type": "physical", "coefficients": str(coefficients)}
    scenario = Scenario.from_dict(data)
    runs = tmp_path / "runs.sqlite"
    first = run_many(scenario, POLICIES, [1], workers=1, store=runs)
    fitted["coefficients"] = {k: v * 3 if isinstance(v, float) else v
                              for k, v in fitted["coefficients"].items()}
    coefficients.write_text(json.dumps(fitted))
    again = run_many(scenario, POLICIES, [1], workers=1, store=runs)
    fresh = run_many(scenario, POLICIES, [1], workers=1)
    assert list(again.ttft_mean_ms) == list(fresh.ttft_mean_ms)
    assert (again.ttft_mean_ms > first.ttft_mean_ms).all()


def test_rows_round_trip_exactly(tmp_path):
    row = {"a": 1, "b": 0.1 + 0.2, "c": float("nan"), "d": None, "e": "x", "f": True,
           "g": -float("inf")}
    runs = RunStore(tmp_path / "s.sqlite")
    runs.put("k", normalised(row))
    back = runs.get(["k", "missing"])
    assert list(back) == ["k"]
    got = back["k"]
    assert got["b"] == row["b"] and got["c"] != got["c"] and got["g"] == -float("inf")
    assert [type(got[k]) for k in "abdef"] == [int, float, type(None), str, bool]


@pytest.mark.parametrize("content", [b"not a database at all" * 100, None])
def test_a_file_that_is_not_a_store_is_refused_before_any_run(tmp_path, content):
    path = tmp_path / "s.sqlite"
    if content is None:  # an SQLite file of someone else's
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE people (name TEXT)")
    else:
        path.write_bytes(content)
    with pytest.raises(ScenarioError, match="not a run store"):
        run_many(prefix_scenario(), POLICIES, [1], workers=1, store=path)
    with pytest.raises(ScenarioError, match="is a directory"):
        RunStore(tmp_path)


def test_a_fifo_as_the_store_is_refused_at_once(tmp_path):
    """A FIFO would block SQLite's open forever (the hostile-input class of special files)."""
    fifo = tmp_path / "s.sqlite"
    os.mkfifo(fifo)
    with pytest.raises(ScenarioError, match="not a regular file") as caught:
        run_many(prefix_scenario(), POLICIES, [1], workers=1, store=fifo)
    assert "\n" not in str(caught.value)


def test_second_sweep_is_served_from_the_store_with_the_same_table(tmp_path, monkeypatch):
    ran = counting(monkeypatch)
    path = tmp_path / "runs.sqlite"
    first = run_many(prefix_scenario(), POLICIES, [1, 2], workers=1, store=path)
    assert sorted(ran) == ["ll/1", "ll/2", "rr/1", "rr/2"]
    ran.clear()
    again = run_many(prefix_scenario(), POLICIES, [1, 2], workers=1, store=path)
    assert ran == []
    pd.testing.assert_frame_equal(again, first)
    # one more seed: only its runs are new
    run_many(prefix_scenario(), POLICIES, [1, 2, 3], workers=1, store=path)
    assert sorted(ran) == ["ll/3", "rr/3"]


def test_a_candidate_given_twice_is_run_once(monkeypatch):
    ran = counting(monkeypatch)
    table = run_many(prefix_scenario(), {"a": {"routing.type": "least-loaded"},
                                         "b": {"routing": {"type": "least-loaded"}}},
                     [1], workers=1)
    assert len(ran) == 1
    assert table.loc[0].drop("policy").equals(table.loc[1].drop("policy"))


def test_stored_and_fresh_tables_are_identical_whatever_runs_them(tmp_path):
    fresh = run_many(prefix_scenario(), POLICIES, [1, 2], workers=2)
    stored = run_many(prefix_scenario(), POLICIES, [1, 2], workers=1,
                      store=tmp_path / "runs.sqlite")
    pd.testing.assert_frame_equal(stored, fresh)


SWEEP = """\
scenarios: [scenario.yaml]
policies:
  rr: {routing.type: round-robin}
  ll: {routing.type: least-loaded}
  pa: {routing.type: prefix-affinity}
seeds: [1, 2, 3, 4, 5, 6]
out: table.csv
"""


def write_sweep(folder: Path) -> Path:
    folder.mkdir()
    (folder / "scenario.yaml").write_text(prefix_scenario(name="s").to_yaml())
    (folder / "sweep.yaml").write_text(SWEEP)
    return folder / "sweep.yaml"


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "blis_simpy", *args]


def stored(path: Path) -> int:
    if not path.exists():
        return 0
    try:
        with sqlite3.connect(path, timeout=30) as db:
            return int(db.execute("SELECT count(*) FROM runs").fetchone()[0])
    except sqlite3.OperationalError:  # the tables are not made yet
        return 0


def test_resume_after_a_kill_mid_sweep_gives_the_same_table(tmp_path):
    """The done-when condition: kill -9 a sweep with some runs stored, start it again, and the
    table equals the one an uninterrupted sweep writes, byte for byte; the runs done before the
    kill are not run again."""
    whole = write_sweep(tmp_path / "whole")
    subprocess.run(cli("sweep", str(whole), "--workers", "1", "--quiet"), check=True)
    expected = (tmp_path / "whole" / "table.csv").read_bytes()

    killed = write_sweep(tmp_path / "killed")
    runs = tmp_path / "killed" / "table.runs.sqlite"
    proc = subprocess.Popen(cli("sweep", str(killed), "--workers", "1", "--quiet"))
    deadline = time.monotonic() + 300
    while stored(runs) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done = stored(runs)
    assert 3 <= done < 18, "the kill came too late to test a resume"
    assert not (tmp_path / "killed" / "table.csv").exists()

    # the live line is drawn on a terminal only (core/status.py): FORCE_COLOR makes rich draw it
    resumed = subprocess.run(cli("sweep", str(killed), "--workers", "2", "--progress"),
                             check=True, capture_output=True, text=True,
                             env={**os.environ, "FORCE_COLOR": "1"})
    assert (tmp_path / "killed" / "table.csv").read_bytes() == expected
    # the progress counts from the runs already done, never from 0
    counts = [int(n) for n in re.findall(r"sweep: (\d+)/18 runs", resumed.stderr)]
    assert counts and min(counts) >= done, resumed.stderr
    # and says how many came from the store, its rate counting only the runs done now
    assert f"({done} from the store)" in resumed.stderr, resumed.stderr


def test_a_trace_edited_in_the_same_session_is_read_again_and_stored_under_its_content(
        tmp_path):
    """newcomer 20 #5: the prepared workloads were kept by the trace's path, so a trace edited
    in the same process replayed the old requests, and the stale row went into the store under
    the edited trace's key (a later process was served it). They are kept by its content now."""
    from tests.conftest import trace_run_scenario, write_trace

    trace = tmp_path / "t.csv"
    write_trace(trace, [(i * 0.1, [1, 2, 3, 4], 4) for i in range(12)])
    scenario = trace_run_scenario(trace)
    runs = tmp_path / "runs.sqlite"
    assert run_many(scenario, POLICIES, [1], workers=1, store=runs).injected_requests[0] == 12
    write_trace(trace, [(i * 0.1, [1, 2, 3, 4], 4) for i in range(5)])
    again = run_many(scenario, POLICIES, [1], workers=1, store=runs)
    assert list(again.injected_requests) == [5, 5]
    sweep.WORKLOADS.kept.clear()  # as a new process
    assert list(run_many(scenario, POLICIES, [1], workers=1, store=runs).injected_requests) \
        == [5, 5]


def test_a_code_candidates_row_is_kept_per_limits(tmp_path, monkeypatch):
    """newcomer 20 #6: what a candidate can allocate changes what it does, but the key left
    out the limits, so a row scored under 64 MiB was served to an evaluator with the default
    limits. A template's runs do not depend on them and stay shared."""
    from blis_simpy.search.code import CodePolicy
    from blis_simpy.search.contain import Limits

    ran = counting(monkeypatch)
    code = CodePolicy("routing", ROUTE_FIRST)
    runs = tmp_path / "runs.sqlite"
    candidates = {"code": code, "rr": {"routing.type": "round-robin"}}
    run_many(prefix_scenario(), candidates, [1], workers=1, store=runs,
             limits=Limits(memory_mb=64))
    ran.clear()
    run_many(prefix_scenario(), candidates, [1], workers=1, store=runs)
    assert ran == ["code/1"]
    ran.clear()
    run_many(prefix_scenario(), candidates, [1], workers=1, store=runs,
             limits=Limits(memory_mb=64))
    assert ran == []


ROUTE_FIRST = """\
class Policy(RoutingPolicy):
    def route(self, req, priority, snapshots, state, clock):
        return RoutingDecision(snapshots[0].id, "first", tuple(0.0 for _ in snapshots))
"""
