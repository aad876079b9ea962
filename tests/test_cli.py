"""The command line: `run`, `validate`, `convert blis-command`, exit codes and files written."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from blis_simpy.cli import app
from blis_simpy.config.resolve import resolve
from blis_simpy.config.scenario import Scenario
from tests.conftest import BASE, merge, write_trace

ROOT = Path(__file__).resolve().parents[1]
RUNNER = CliRunner()
NATIVE_FILES = {"summary.json", "scenario.yaml", "requests.csv", "steps.csv", "metrics.json",
                "evaluation.json", "anomalies.csv", "instances.csv", "preemptions.csv"}
SMALL = {"workload": {"num_requests": 20}, "outputs": {"tables": "csv"}}


def write_scenario(folder: Path, name: str = "s.yaml", **changes: Any) -> Path:
    path = folder / name
    path.write_text(yaml.safe_dump(merge(merge(BASE, SMALL), changes), sort_keys=False))
    return path


def cli(*args: Any):
    return RUNNER.invoke(app, [str(a) for a in args])


def assert_clean_usage_error(result, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    assert "error:" in result.stderr
    for needle in needles:
        assert needle in result.stderr
    assert "Traceback" not in result.output
    assert result.stdout == ""


# --- run ----------------------------------------------------------------------------------------


def test_run_prints_summary_json_and_writes_results_folder(tmp_path):
    out = tmp_path / "out"
    result = cli("run", write_scenario(tmp_path), "--out", out, "--quiet")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["completed_requests"] == 20
    assert {p.name for p in out.iterdir()} == NATIVE_FILES
    assert json.loads((out / "summary.json").read_text()) == summary


def test_run_requests_csv_has_one_row_per_request(tmp_path):
    out = tmp_path / "out"
    cli("run", write_scenario(tmp_path), "--out", out, "--quiet")
    lines = (out / "requests.csv").read_text().splitlines()
    assert lines[0].startswith("id,arrival_s")
    assert len(lines) == 1 + 20


def test_run_reports_where_it_wrote_on_stderr(tmp_path):
    out = tmp_path / "out"
    result = cli("run", write_scenario(tmp_path), "--out", out)
    assert result.exit_code == 0
    assert f"wrote {out}" in result.stderr


def test_run_without_out_uses_outputs_dir(tmp_path):
    target = tmp_path / "from-scenario"
    result = cli("run", write_scenario(tmp_path, outputs={"dir": str(target)}), "--quiet")
    assert result.exit_code == 0, result.output
    assert {p.name for p in target.iterdir()} == NATIVE_FILES


def test_run_seed_option_changes_workload_and_is_recorded(tmp_path):
    path = write_scenario(tmp_path)
    cli("run", path, "--out", tmp_path / "a", "--seed", 1, "--quiet")
    cli("run", path, "--out", tmp_path / "b", "--seed", 2, "--quiet")
    a = (tmp_path / "a" / "requests.csv").read_text()
    b = (tmp_path / "b" / "requests.csv").read_text()
    assert a != b
    assert Scenario.from_yaml(tmp_path / "b" / "scenario.yaml").seed == 2


def test_run_compat_scenario_also_writes_reference_outputs(tmp_path):
    path = write_scenario(tmp_path, compat="blis")
    out = tmp_path / "out"
    result = cli("run", path, "--out", out, "--quiet")
    assert result.exit_code == 0, result.output
    assert {p.name for p in out.iterdir()} == NATIVE_FILES | {"results.json", "blis_stdout.txt"}
    assert isinstance(json.loads((out / "results.json").read_text()), dict)
    assert (out / "blis_stdout.txt").read_text().strip()


def test_saved_scenario_yaml_reloads_to_the_resolved_scenario(tmp_path):
    path = write_scenario(tmp_path)
    out = tmp_path / "out"
    cli("run", path, "--out", out, "--seed", 9, "--quiet")
    saved = Scenario.from_yaml(out / "scenario.yaml")
    assert saved == dataclasses.replace(resolve(Scenario.from_yaml(path)), seed=9)
    assert saved.workload.arrival == "poisson"


def test_saved_trace_scenario_yaml_reloads_equal(tmp_path):
    trace = write_trace(tmp_path / "t.csv", [(0.0, [1, 2, 3], 4), (0.01, [5, 6], 2)])
    path = tmp_path / "s.yaml"
    data = merge(BASE, {"outputs": {"tables": "csv"}})
    data["workload"] = {"type": "trace", "path": trace.name}
    path.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    result = cli("run", path, "--out", out, "--quiet")
    assert result.exit_code == 0, result.output
    assert Scenario.from_yaml(out / "scenario.yaml") == resolve(Scenario.from_yaml(path))


def test_run_bad_scenario_exits_2_naming_path_and_writes_nothing(tmp_path):
    path = write_scenario(tmp_path, engine={"kv_blokcs": 5})
    out = tmp_path / "out"
    result = cli("run", path, "--out", out)
    assert_clean_usage_error(result, "engine.kv_blokcs", "kv_blocks")
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [path]


def test_run_resolve_error_exits_2_and_writes_nothing(tmp_path):
    path = write_scenario(tmp_path, model={"gpu": "B200"}, latency={"alpha": None, "beta": None})
    out = tmp_path / "out"
    assert_clean_usage_error(cli("run", path, "--out", out), "B200", "H100")
    assert not out.exists()


def test_run_missing_trace_exits_2_and_writes_nothing(tmp_path):
    path = tmp_path / "s.yaml"
    data = merge(BASE, {})
    data["workload"] = {"type": "trace", "path": "missing.csv"}
    path.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    assert_clean_usage_error(cli("run", path, "--out", out), "workload.path", "missing.csv")
    assert not out.exists()


def test_run_nonexistent_scenario_file_exits_2(tmp_path):
    result = cli("run", tmp_path / "nope.yaml", "--out", tmp_path / "out")
    assert_clean_usage_error(result, "nope.yaml")
    assert not (tmp_path / "out").exists()


def test_run_as_module_in_subprocess(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "blis_simpy", "run", str(write_scenario(tmp_path)),
         "--out", str(out), "--quiet"],
        capture_output=True, text=True, cwd=tmp_path, timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["completed_requests"] == 20
    assert {p.name for p in out.iterdir()} == NATIVE_FILES


def test_bad_scenario_in_subprocess_exits_2_without_traceback(tmp_path):
    path = write_scenario(tmp_path, compat="foo")
    proc = subprocess.run(
        [sys.executable, "-m", "blis_simpy", "run", str(path), "--out", str(tmp_path / "o")],
        capture_output=True, text=True, cwd=tmp_path, timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: {path}: compat:")
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
    assert not (tmp_path / "o").exists()


# --- validate -----------------------------------------------------------------------------------


def test_validate_ok(tmp_path):
    path = write_scenario(tmp_path)
    result = cli("validate", path)
    assert result.exit_code == 0, result.output
    assert result.stdout == f"{path}: ok\n"
    assert list(tmp_path.iterdir()) == [path]


def test_validate_bundled_quickstart_ok():
    assert cli("validate", ROOT / "scenarios" / "quickstart.yaml").exit_code == 0


def test_validate_bad_scenario_exits_2_naming_path(tmp_path):
    result = cli("validate", write_scenario(tmp_path, workload={"rate_per_s": 0}))
    assert_clean_usage_error(result, "workload.rate_per_s", "> 0")


def test_validate_reports_yaml_syntax_line(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("version: 1\nmodel:\n  name: x\n   gpu: H100\n")
    assert_clean_usage_error(cli("validate", path), "line 4")


def test_validate_nonexistent_file_exits_2(tmp_path):
    assert_clean_usage_error(cli("validate", tmp_path / "nope.yaml"), "nope.yaml")


def test_validate_catches_missing_trace_file(tmp_path):
    path = tmp_path / "s.yaml"
    data = merge(BASE, {})
    data["workload"] = {"type": "trace", "path": "missing.csv"}
    path.write_text(yaml.safe_dump(data))
    result = cli("validate", path)
    assert result.exit_code == 2
    assert "workload.path" in result.stderr


# --- convert blis-command -----------------------------------------------------------------------

CONVERT = ["convert", "blis-command", "--", "run", "--model", "meta-llama/llama-3.1-8b-instruct"]


def test_convert_blis_command_prints_loadable_compat_yaml():
    result = cli(*CONVERT, "--rate", "5", "--num-requests", "20")
    assert result.exit_code == 0, result.output
    sc = Scenario.from_yaml_text(result.stdout)
    assert sc.compat == "blis"
    assert sc.model.name == "meta-llama/llama-3.1-8b-instruct"
    assert sc.workload.rate_per_s == 5.0 and sc.workload.num_requests == 20
    assert sc.workload.arrival == "constant"


def test_converted_yaml_runs(tmp_path):
    converted = cli(*CONVERT, "--rate", "5", "--num-requests", "5", "--tp", "1")
    path = tmp_path / "c.yaml"
    path.write_text(converted.stdout)
    out = tmp_path / "out"
    result = cli("run", path, "--out", out, "--quiet")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["completed_requests"] == 5
    assert (out / "results.json").exists()


def test_convert_unknown_flag_exits_2_naming_it():
    result = cli(*CONVERT, "--bogus-flag", "3")
    assert_clean_usage_error(result, "--bogus-flag", "--rate")


def test_convert_bad_value_exits_2_naming_flag():
    assert_clean_usage_error(cli(*CONVERT, "--rate", "fast"), "--rate", "'fast'")


def test_run_refuses_an_output_path_that_is_a_file(tmp_path):
    scenario_file = write_scenario(tmp_path)
    blocker = tmp_path / "taken"
    blocker.write_text("keep me")
    assert_clean_usage_error(cli("run", scenario_file, "--out", blocker, "--quiet"), "--out")
    assert blocker.read_text() == "keep me"


def test_run_refuses_an_option_given_as_the_output_folder(tmp_path, monkeypatch):
    """`run --out --set s.yaml` (the folder's name forgotten, say an empty shell variable)
    once wrote a folder named `--set`."""
    scenario_file = write_scenario(tmp_path)
    monkeypatch.chdir(tmp_path)
    result = cli("run", "--quiet", "--out", "--set", scenario_file)
    assert_clean_usage_error(result, "--out", "looks like an option")
    assert not (tmp_path / "--set").exists()
    assert cli("run", scenario_file, "--out", tmp_path / "--set", "--quiet").exit_code == 0
    assert (tmp_path / "--set" / "summary.json").is_file()


# --- outputs (robustness defect 5) --------------------------------------------------------------


def folder_state(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())} if path.is_dir() else {}


def test_reused_output_folder_is_refused_without_force(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "stale.csv").write_text("from an earlier run")
    result = cli("run", write_scenario(tmp_path), "--out", out, "--quiet")
    assert_clean_usage_error(result, "--out", "already holds files", "--force")
    assert "force=True" not in result.output  # the API's spelling, not this user's
    assert folder_state(out) == {"stale.csv": b"from an earlier run"}


def earlier_run(out: Path, **files: str) -> Path:
    """A folder that looks like an earlier run's output (it has a summary.json)."""
    out.mkdir()
    (out / "summary.json").write_text("{}")
    for name, text in files.items():
        (out / name).write_text(text)
    return out


def test_force_replaces_the_output_folder_whole(tmp_path):
    out = earlier_run(tmp_path / "out", **{"stale.csv": "from an earlier run"})
    result = cli("run", write_scenario(tmp_path), "--out", out, "--quiet", "--force")
    assert result.exit_code == 0, result.output
    assert {p.name for p in out.iterdir()} == NATIVE_FILES
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]


def test_force_keeps_the_old_folder_when_writing_fails(tmp_path, monkeypatch):
    from blis_simpy.sim import result as result_module

    out = earlier_run(tmp_path / "out", **{"old.csv": "keep me"})

    def broken(frame, path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(result_module, "write_table", broken)
    result = cli("run", write_scenario(tmp_path), "--out", out, "--quiet", "--force")
    assert_clean_usage_error(result, "No space left on device")
    assert folder_state(out) == {"old.csv": b"keep me", "summary.json": b"{}"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "s.yaml"]


def test_staging_left_by_a_killed_run_is_removed_by_the_next_run(tmp_path):
    """SIGKILL gives a run no chance to clean up: its staging folder (named after its process
    id) stays beside the target, its lock gone with the process. The next claim of that
    target removes it; another target's staging folder, and anything not named like one, are
    left alone (a live run's staging of the same target refuses the claim:
    tests/sim/test_output.py)."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    orphan = tmp_path / f".out.staging-{dead}-0badf00d"
    (orphan / "requests.csv").parent.mkdir()
    (orphan / "requests.csv").write_text("half")
    busy = tmp_path / f".other.staging-{os.getpid()}-12345678"
    busy.mkdir()
    mine = tmp_path / ".out.staging-notes"
    mine.mkdir()
    result = cli("run", write_scenario(tmp_path), "--out", tmp_path / "out", "--quiet")
    assert result.exit_code == 0, result.output
    assert not orphan.exists() and busy.exists() and mine.exists()
    assert (tmp_path / "out" / "summary.json").is_file()


def test_out_on_another_file_system_is_staged_there(tmp_path, monkeypatch):
    """EXDEV: a rename across file systems fails; the files are staged beside the target, so
    the final rename never crosses one (simulated: any rename between folders fails)."""
    real = os.rename

    def same_folder_only(src, dst):
        if Path(src).parent != Path(dst).parent:
            raise OSError(18, "Invalid cross-device link")
        real(src, dst)

    monkeypatch.setattr(os, "rename", same_folder_only)
    monkeypatch.setattr(os, "replace", same_folder_only)
    out = tmp_path / "mnt" / "other" / "run1"
    result = cli("run", write_scenario(tmp_path), "--out", out, "--quiet")
    assert result.exit_code == 0, result.output
    assert {p.name for p in out.iterdir()} == NATIVE_FILES


def test_force_does_not_replace_a_folder_that_is_not_a_run(tmp_path):
    """--force replaces the folder whole: never a home or project folder given by mistake."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.txt").write_text("mine")
    result = cli("run", write_scenario(tmp_path), "--out", project, "--force")
    assert_clean_usage_error(result, "--out", "no summary.json", "not an earlier run's")
    assert folder_state(project) == {"notes.txt": b"mine"}


def test_force_does_not_replace_the_current_folder(tmp_path, monkeypatch):
    out = earlier_run(tmp_path / "out")
    monkeypatch.chdir(out)
    result = cli("run", write_scenario(tmp_path), "--out", ".", "--force")
    assert_clean_usage_error(result, "--out", "holds the current folder")
    assert folder_state(out) == {"summary.json": b"{}"}


def test_out_symlink_to_another_file_system_keeps_the_link(tmp_path):
    """`--out` a link to a folder on another file system (/dev/shm, a tmpfs, where there is
    one): the files are staged and land where the link points, and the link stays. (The
    link used to be renamed aside and left behind, and the files written beside it.)"""
    shm = Path("/dev/shm")
    elsewhere = Path(tempfile.mkdtemp(dir=shm if shm.is_dir() else tmp_path))
    try:
        link = tmp_path / "out"
        link.symlink_to(elsewhere, target_is_directory=True)
        result = cli("run", write_scenario(tmp_path), "--out", link, "--quiet")
        assert result.exit_code == 0, result.output
        assert link.is_symlink() and link.resolve() == elsewhere.resolve()
        assert {p.name for p in elsewhere.iterdir()} == NATIVE_FILES
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "s.yaml"]
        assert not list(elsewhere.parent.glob(f".{elsewhere.name}.*"))
    finally:
        shutil.rmtree(elsewhere, ignore_errors=True)


def test_out_mount_point_is_replaced_in_place(tmp_path, monkeypatch):
    """A mount point cannot be renamed (EBUSY, which used to come after the whole run): its
    files are staged inside it and swapped in, the old ones kept until every new one is
    written."""
    from blis_simpy.sim import output
    from blis_simpy.sim import result as result_module

    out = earlier_run(tmp_path / "volume", **{"stale.csv": "old"})
    monkeypatch.setattr(output, "mount_point", lambda folder: folder == out.resolve())
    real_rename, real_write = os.rename, result_module.write_table

    def busy_mount(src, dst):
        if Path(src) == out.resolve():
            raise OSError(16, "Device or resource busy")
        real_rename(src, dst)

    def disk_full(frame, path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "rename", busy_mount)
    monkeypatch.setattr(result_module, "write_table", disk_full)
    failed = cli("run", write_scenario(tmp_path), "--out", out, "--force")
    assert_clean_usage_error(failed, "No space left on device")
    assert folder_state(out) == {"stale.csv": b"old", "summary.json": b"{}"}
    monkeypatch.setattr(result_module, "write_table", real_write)
    result = cli("run", write_scenario(tmp_path), "--out", out, "--quiet", "--force")
    assert result.exit_code == 0, result.output
    assert {p.name for p in out.iterdir()} == NATIVE_FILES


def test_unwritable_out_fails_before_the_run(tmp_path, monkeypatch):
    from blis_simpy.sim import run as sim_run

    def must_not_run(*args, **kwargs):
        raise AssertionError("the simulation ran before the output folder was checked")

    monkeypatch.setattr(sim_run, "simulate", must_not_run)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    result = cli("run", write_scenario(tmp_path), "--out", blocker / "run" / "deep", "--quiet")
    assert_clean_usage_error(result, "--out", f"{blocker} is a file, not a folder")
    result = cli("run", write_scenario(tmp_path), "--out", blocker, "--quiet")
    assert_clean_usage_error(result, "--out", "not a folder")


def test_scenario_name_cannot_leave_the_output_folder(tmp_path):
    for name in ("../x", "/tmp/x", "a/b", ".hidden", ""):
        path = tmp_path / "s.yaml"
        path.write_text(yaml.safe_dump(merge(merge(BASE, SMALL), {"name": name})))
        result = cli("run", path, "--quiet")
        assert_clean_usage_error(result, "name", "letters, digits")
    assert not (tmp_path / "x").exists()


def test_default_output_name_is_the_file_stem(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = merge(BASE, SMALL)
    del data["name"]
    path = tmp_path / "my capacity plan.yaml"
    path.write_text(yaml.safe_dump(data))
    result = cli("run", path, "--quiet")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "my-capacity-plan" / "summary.json").is_file()


def test_parquet_without_pyarrow_fails_before_the_run(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow -> ImportError
    out = tmp_path / "out"
    result = cli("run", write_scenario(tmp_path, outputs={"tables": "parquet"}), "--out", out,
                 "--quiet")
    assert_clean_usage_error(result, "outputs.tables", "pyarrow", "pip install")
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


def test_result_save_refuses_a_used_folder_through_the_api(tmp_path):
    import blis_simpy
    from blis_simpy.core.errors import ScenarioError

    result = blis_simpy.run(Scenario.from_yaml(write_scenario(tmp_path)))
    result.save(tmp_path / "o", "csv")
    try:
        result.save(tmp_path / "o", "csv")
    except ScenarioError as exc:
        assert exc.path == "out_dir"
    else:
        raise AssertionError("a second save into a used folder was accepted")
    assert len(result.save(tmp_path / "o", "csv", force=True)) == len(NATIVE_FILES)


# --- progress -----------------------------------------------------------------------------------


def test_progress_shows_finished_requests_events_and_phases(tmp_path):
    out = tmp_path / "out"
    result = cli("run", write_scenario(tmp_path), "--out", out, "--progress")
    assert result.exit_code == 0, result.output
    err = result.stderr
    assert "[done] 20 of 20 requests finished" in err
    assert "events/s" in err
    assert f"wrote {out}" in err  # (the live [write] line is drawn on a terminal only)
    assert json.loads(result.stdout)["completed_requests"] == 20


def test_progress_to_a_non_terminal_prints_periodic_lines(capsys):
    """newcomer 16's #15: with stderr on a file, --progress printed only the closing [done]
    line, so a hung run showed nothing in its log; getting-started.md says --progress always.
    A line is printed at once and then at most every StatusLine.EVERY_S seconds."""
    from blis_simpy.cli import ProgressBar
    from blis_simpy.core.status import StatusLine
    from blis_simpy.sim.build import RunProgress

    bar = ProgressBar(total=100, arrivals_end_us=None, horizon_us=None, forced=True)
    try:
        for finished in (10, 20, 30):
            bar(RunProgress(now_us=5_000_000, arrived=60, finished=finished, events=1000,
                            wall_s=2.0))
    finally:
        bar.close()
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["[run] 10/100 requests finished (60 arrived), sim 5.0 s, 500 events/s, "
                     "ETA 18 s"]  # at once, then not again within EVERY_S
    assert StatusLine.EVERY_S == 10.0


def test_a_status_line_on_a_non_terminal_is_printed_every_so_often(capsys):
    from blis_simpy.core.status import StatusLine

    for every, printed in ((0.0, ["line 0", "line 1", "line 2"]), (3600.0, ["line 0"])):
        status = StatusLine(every_s=every)
        try:
            for i in range(3):
                status.show(f"line {i}", i, 3)
        finally:
            status.close()
        assert capsys.readouterr().err.splitlines() == printed


def test_observe_counts_what_it_will_send():
    """Its total was the scenario's whole plan (500) while --duration 5 sent 61."""
    import asyncio

    from blis_simpy.observe.run import Planned, drive

    seen: list[tuple[int, int]] = []

    async def main() -> None:
        from blis_simpy.observe import run as observe_run

        async def answer(*args, **kwargs):
            from blis_simpy.observe.client import Timing

            return Timing(sent=0.0, first_token=0.0, done=0.0, output_tokens=1)

        original = observe_run.complete
        observe_run.complete = answer
        try:
            planned = [Planned(at=0.01 * i, prompt=[1], output_tokens=1) for i in range(50)]
            await drive(None, "m", planned, 4, 0.1, progress=lambda d, t: seen.append((d, t)))
        finally:
            observe_run.complete = original

    asyncio.run(main())
    assert seen and {total for _, total in seen} == {10}


def test_progress_bar_reports_drain_and_eta():
    from blis_simpy.cli import ProgressBar
    from blis_simpy.sim.build import RunProgress

    bar = ProgressBar(total=100, arrivals_end_us=None, horizon_us=None, forced=True)
    running = bar.line(RunProgress(now_us=5_000_000, arrived=60, finished=25, events=1000,
                                   wall_s=2.0))
    assert running.startswith("[run] 25/100 requests finished (60 arrived)")
    assert "500 events/s" in running and "ETA 6 s" in running
    draining = bar.line(RunProgress(9_000_000, 100, 80, 4000, 4.0))
    assert draining.startswith("[drain] all arrived; 80/100")
    window = ProgressBar(total=None, arrivals_end_us=10_000_000, horizon_us=None, forced=True)
    assert "ETA 3 s" in window.line(RunProgress(2_500_000, 7, 5, 100, 1.0))


def test_quiet_prints_only_the_summary(tmp_path):
    result = cli("run", write_scenario(tmp_path), "--out", tmp_path / "o", "--quiet")
    assert result.exit_code == 0
    assert result.stderr == ""


# --- the scenario library, from anywhere --------------------------------------------------------


def test_library_scenario_runs_by_name_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = cli("run", "sanity", "--quiet", "--set", "workload.max_requests=5")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "sanity" / "summary.json").is_file()


def test_an_existing_path_wins_over_a_library_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = merge(BASE, merge(SMALL, {"name": "mine"}))
    (tmp_path / "sanity").write_text(yaml.safe_dump(data))
    result = cli("run", "sanity", "--quiet")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "mine").is_dir()


def test_unknown_library_name_lists_the_library_closest_first(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = cli("run", "quickstar")
    assert_clean_usage_error(result, "neither a file nor a library scenario", "valid: quickstart")


def test_scenarios_lists_the_shipped_library_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = cli("scenarios")
    assert result.exit_code == 0, result.output
    names = [line.split()[0] for line in result.stdout.splitlines()]
    assert "quickstart" in names and "trace-mooncake" in names


# --- traces -------------------------------------------------------------------------------------


def test_run_trace_level_and_formats_write_the_trace_files(tmp_path):
    out = tmp_path / "out"
    result = cli("run", write_scenario(tmp_path, cluster={"instances": 2}), "--out", out,
                 "--quiet", "--trace-level", "decisions", "--trace-format", "jsonl",
                 "--trace-format", "perfetto")
    assert result.exit_code == 0, result.output
    assert {p.name for p in out.iterdir()} == NATIVE_FILES | {"decisions.csv",
                                                              "decisions.jsonl", "trace.json"}
    saved = yaml.safe_load((out / "scenario.yaml").read_text())
    assert saved["cluster"]["trace_level"] == "decisions"
    assert saved["outputs"]["trace_formats"] == ["jsonl", "perfetto"]


def test_run_bad_trace_level_exits_2_naming_the_field(tmp_path):
    result = cli("run", write_scenario(tmp_path), "--out", tmp_path / "o", "--trace-level",
                 "verbose")
    assert_clean_usage_error(result, "cluster.trace_level", "'none' | 'decisions' | 'full'")
    assert not (tmp_path / "o").exists()


def test_summarize_prints_the_runs_summary_text(tmp_path):
    out = tmp_path / "out"
    cli("run", write_scenario(tmp_path, cluster={"instances": 2}), "--out", out, "--quiet",
        "--trace-level", "decisions")
    result = cli("summarize", out, "--strategy", "counterfactual", "--max-tokens", "300")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("## Outcome\n")
    assert "## Counterfactual Analysis" in result.stdout and len(result.stdout) <= 1200


@pytest.mark.parametrize(("args", "needle"), [
    (["--strategy", "vibes"], "--strategy"),
    (["--max-tokens", "5"], "--max-tokens"),
])
def test_summarize_bad_options_exit_2(tmp_path, args, needle):
    out = tmp_path / "out"
    cli("run", write_scenario(tmp_path), "--out", out, "--quiet")
    assert_clean_usage_error(cli("summarize", out, *args), needle)


def test_summarize_a_folder_that_is_not_a_run_exits_2(tmp_path):
    assert_clean_usage_error(cli("summarize", tmp_path), "no summary.json")


# --- newcomer 16's cosmetic items (#18) ---------------------------------------------------------


def test_workload_sample_out_dash_writes_the_trace_to_stdout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = cli("workload", "sample", "quickstart", "--out", "-", "--set",
                 "workload.num_requests=3")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("arrival_time,request_id,model,")
    assert len(result.stdout.splitlines()) == 4 and "wrote stdout (3 requests)" in result.stderr
    assert not (tmp_path / "-").exists()


def test_scenarios_lists_whole_first_sentences():
    result = cli("scenarios")
    assert result.exit_code == 0, result.output
    line = next(x for x in result.stdout.splitlines() if x.startswith("autoscale-diurnal "))
    assert "(so a simulated hour is 12.5 s)" in line and line.endswith(".")


def test_a_code_file_with_a_nul_byte_is_refused_in_words(tmp_path):
    code = tmp_path / "nul.py"
    code.write_bytes(b"x = 1\0\n")
    result = cli("gepa-evaluate", "--workload", "quickstart", "--code", f"routing={code}")
    assert result.exit_code == 2
    assert "a NUL byte at character 5: not Python source text" in result.stderr
    assert "line None" not in result.output


@pytest.mark.parametrize(("text", "needle"), [
    ("%YAML 1.1\n---\nversion: 1\n", "%YAML 1.1: the document asks for YAML 1.1 rules"),
    ("version: 1\n~: 3\n", "(the document): key ~ (null) is not a name"),
    ("version: 1\n7: 3\n", "key int 7 is not a name"),
])
def test_a_yaml_1_1_directive_and_a_key_that_is_no_name_are_refused_in_words(tmp_path, text,
                                                                              needle):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    result = cli("run", path, "--quiet")
    assert result.exit_code == 2 and needle in result.stderr, result.output


def test_a_seed_given_by_seed_and_by_set_differently_is_refused(tmp_path):
    """`--seed 7 --set seed=9` ran seed 7 and said nothing (newcomer 19 #10c)."""
    result = cli("run", "quickstart", "--seed", 7, "--set", "seed=9", "--out",
                 tmp_path / "out")
    assert result.exit_code == 2, result.output
    assert "--seed: given twice, 7 and 9" in result.output
    assert not (tmp_path / "out").exists()
