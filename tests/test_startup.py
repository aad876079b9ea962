"""Start-up stays small: `blis-simpy run` imports what the run needs and nothing more (no search
layer or process pool, no pandas, no plotting, no importers, compat writers only in compat
mode), `--help` needs no numpy, and the public API still resolves its names on first use.

Each check runs in a fresh interpreter, since this test process has loaded everything.
(docs/performance.md: Start-up.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# a real command line, then the interpreter's loaded modules and BLAS setting as JSON
RUN_CLI = """
import gc, json, os, sys
from blis_simpy.cli import main
collections, in_loop = [], []  # collections outside the event loop; collecting inside it?
gc.callbacks.append(lambda phase, info: phase == "start" and not in_loop
                    and collections.append(info["generation"]))
if sys.argv[2] == "run":  # (other commands need not load the simulator)
    import blis_simpy.sim.build as build
    from contextlib import contextmanager
    sparse = build.sparse_collection
    @contextmanager
    def watched():
        with sparse():
            in_loop.append(gc.isenabled())
            yield
    build.sparse_collection = watched
collections.clear()  # from here on: `main`
out, sys.argv = sys.argv[1], ["blis-simpy", *sys.argv[2:]]
try:
    main()
except SystemExit as exc:
    assert exc.code in (0, None), exc.code
with open(out, "w") as f:
    json.dump({"modules": sorted(sys.modules), "blas": os.environ.get("OPENBLAS_NUM_THREADS"),
               "frozen": gc.get_freeze_count(), "collecting": gc.isenabled(),
               "collections": collections, "in_loop": in_loop}, f)
"""

# loaded by no `blis-simpy run`, native or compat
NEVER = ("pandas", "matplotlib", "pyarrow", "rich", "pydantic", "concurrent.futures.process",
         "multiprocessing", "blis_simpy.search.sweep", "blis_simpy.search.paired",
         "blis_simpy.search.code", "blis_simpy.report", "blis_simpy.validate",
         "blis_simpy.calibrate", "blis_simpy.compat.convert", "blis_simpy.compat.policy_config",
         "blis_simpy.compat.workload_spec", "blis_simpy.workload.imported",
         "blis_simpy.metrics.trace.perfetto")
COMPAT_WRITERS = ("blis_simpy.compat.results", "blis_simpy.compat.gojson")
# loaded only by a scenario that uses them: a deployment section (its config classes, the
# autoscaler, actuation, P/D), decision-tree policies, a tenants or trace workload's sources;
# and never numpy.ma (np.percentile's)
UNUSED = ("blis_simpy.config.deployment", "blis_simpy.config.pd", "blis_simpy.config.replicas",
          "blis_simpy.sim.deploy", "blis_simpy.cluster.autoscaler", "blis_simpy.cluster.actuation",
          "blis_simpy.cluster.pd", "blis_simpy.policies.autoscale", "blis_simpy.metrics.scaling",
          "blis_simpy.policies.tree", "blis_simpy.workload.tenants",
          "blis_simpy.workload.arrivals", "blis_simpy.workload.trace",
          "blis_simpy.workload.trace_csv", "blis_simpy.workload.trace_file", "numpy.ma")


def cli_session(tmp_path: Path, *args: str, blas: str | None = None) -> dict:
    """The command line run in a fresh interpreter; `blas`: OPENBLAS_NUM_THREADS as the user
    set it (None: not set)."""
    report = tmp_path / "modules.json"
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if blas is not None:
        env["OPENBLAS_NUM_THREADS"] = blas
    proc = subprocess.run([sys.executable, "-c", RUN_CLI, str(report), *args],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(report.read_text())


def loaded(modules: list[str], prefix: str) -> list[str]:
    return [m for m in modules if m == prefix or m.startswith(prefix + ".")]


def test_native_run_loads_no_search_pandas_plotting_or_compat_writers(tmp_path):
    session = cli_session(tmp_path, "run", "quickstart", "--set", "workload.num_requests=10",
                          "--out", str(tmp_path / "o"), "--quiet")
    modules = session["modules"]
    assert "blis_simpy.sim.run" in modules and "numpy" in modules  # it did run
    for name in (*NEVER, *COMPAT_WRITERS, *UNUSED):
        assert not loaded(modules, name), f"`blis-simpy run` imported {name}"
    assert (tmp_path / "o" / "summary.json").is_file()


def test_compat_run_loads_its_writers_and_nothing_else_extra(tmp_path):
    scenario = Path(__file__).resolve().parents[1] / "blis_simpy/scenarios/bench/1k-1inst.yaml"
    session = cli_session(tmp_path, "run", str(scenario), "--set", "workload.num_requests=10",
                          "--out", str(tmp_path / "o"), "--quiet")
    modules = session["modules"]
    for name in (*NEVER, *UNUSED):
        assert not loaded(modules, name), f"`blis-simpy run` (compat) imported {name}"
    assert set(COMPAT_WRITERS) <= set(modules)
    assert (tmp_path / "o" / "results.json").is_file()


def test_a_deployment_or_a_decision_tree_loads_what_it_uses(tmp_path):
    session = cli_session(tmp_path, "run", "autoscale-spike", "--set", "workload.max_requests=20",
                          "--set", "policies.admission.type=decision-tree", "--set",
                          "policies.admission.params={tree: {action: admit}}",
                          "--out", str(tmp_path / "o"), "--quiet")
    modules = session["modules"]
    for name in ("blis_simpy.config.deployment", "blis_simpy.sim.deploy",
                 "blis_simpy.cluster.autoscaler", "blis_simpy.policies.tree"):
        assert loaded(modules, name), name


def test_command_line_keeps_blas_to_one_thread_unless_told(tmp_path):
    assert cli_session(tmp_path, "--help")["blas"] == "1"
    assert cli_session(tmp_path, "--help", blas="3")["blas"] == "3"


def test_command_line_spares_the_collections_at_exit(tmp_path):
    """What exists when `main` returns is frozen: the interpreter's final collections skip it."""
    session = cli_session(tmp_path, "run", "quickstart", "--set", "workload.num_requests=10",
                          "--out", str(tmp_path / "o"), "--quiet")
    assert session["frozen"] > 10_000


def test_a_run_collects_garbage_in_its_event_loop_only(tmp_path):
    """Imports, the scenario, the build and the writing run with collection off; the event
    loop collects (at a gen-0 threshold of 50,000, sim/build.py: sparse_collection)."""
    session = cli_session(tmp_path, "run", "quickstart", "--set", "workload.num_requests=10",
                          "--out", str(tmp_path / "o"), "--quiet")
    assert session["in_loop"] == [True]
    assert session["collections"] == []
    assert not session["collecting"]


def test_other_commands_collect_garbage_as_usual(tmp_path):
    session = cli_session(tmp_path, "scenarios")
    assert session["collecting"]


def test_help_and_package_import_load_no_numpy(tmp_path):
    """numpy must load after `main` starts, or the BLAS setting above comes too late."""
    modules = cli_session(tmp_path, "--help")["modules"]
    others = [n for n in NEVER if n != "rich"]  # typer formats help with rich
    for name in ("numpy", "simpy", "blis_simpy.config.scenario", "blis_simpy.sim", *others):
        assert not loaded(modules, name), f"`blis-simpy --help` imported {name}"


@pytest.mark.parametrize("name", ["run", "run_many", "compare_policies", "Scenario",
                                  "ScenarioError", "InvariantError", "Recorder", "Result"])
def test_public_names_resolve_on_first_use(name):
    code = (f"import sys, blis_simpy\n"
            f"assert 'numpy' not in sys.modules\n"
            f"from blis_simpy import {name}\n"
            f"import blis_simpy.api\n"
            f"assert getattr(blis_simpy, {name!r}) is {name}\n"
            f"assert {name!r} in dir(blis_simpy)\n"
            f"if {name!r} in blis_simpy.api.__all__:\n"
            f"    assert getattr(blis_simpy.api, {name!r}) is {name}\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_unknown_names_still_raise_attribute_error():
    import blis_simpy
    import blis_simpy.api

    for module in (blis_simpy, blis_simpy.api):
        with pytest.raises(AttributeError, match="no_such_name"):
            module.no_such_name  # noqa: B018


def test_command_signatures_need_no_evaluation():
    """typer reads every command's signature on each start; string annotations (a `from
    __future__ import annotations` in cli.py or search/commands.py) cost ~10 ms of eval each
    time."""
    import inspect

    from blis_simpy.cli import app

    def commands(typer_app):
        yield from (c.callback for c in typer_app.registered_commands)
        for group in typer_app.registered_groups:
            yield from commands(group.typer_instance)

    callbacks = [c for c in commands(app) if c is not None]
    assert len(callbacks) > 15
    for callback in callbacks:
        strings = [k for k, v in inspect.get_annotations(callback).items() if isinstance(v, str)]
        assert not strings, f"{callback.__qualname__}: {strings} are strings"
