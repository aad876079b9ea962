"""Output folders under faults (blis_simpy/sim/output.py, the CLI's signal handling): SIGTERM and
SIGHUP end a run as Ctrl-C does (nothing half-written stays), two runs cannot take the same
new folder, bind mounts and read-only mounts are found before the run, a symlink loop is one
line. The process-level cases run the real command in a subprocess."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import yaml

from blis_simpy.core.errors import ScenarioError
from blis_simpy.sim import output
from blis_simpy.sim.output import OutputFolder, mount_points
from tests.conftest import BASE, merge

# Runs of ~17 and ~5 CPU seconds: a signal sent once the run has claimed its folder arrives
# long before the end even on a busy machine (20,000 requests, 1.7 s, once did not).
LONG = {"workload": {"num_requests": 200_000, "rate_per_s": 2000}, "outputs": {"tables": "csv"}}
MEDIUM = {"workload": {"num_requests": 60_000, "rate_per_s": 2000},
          "outputs": {"tables": "csv"}}
SHORT = {"workload": {"num_requests": 20}, "outputs": {"tables": "csv"}}
# The command, with simulate() replaced: the run must fail before it would start.
NO_RUN = ("import sys, blis_simpy.sim.run as r\n"
          "def boom(*a, **k): raise SystemExit('the simulation ran before the check')\n"
          "r.simulate = boom\n"
          "from blis_simpy.cli import main\n"
          "sys.argv[0] = 'blis-simpy'\n"
          "main()\n")


def write_scenario(folder: Path, changes: dict) -> Path:
    path = folder / "s.yaml"
    path.write_text(yaml.safe_dump(merge(BASE, changes)))
    return path


def command(*args: object) -> list[str]:
    return [sys.executable, "-m", "blis_simpy", *map(str, args)]


def stagings(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".staging-" in p.name)


def wait_for(check, seconds: float = 60.0) -> None:
    end = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["sigterm", "sighup"])
def test_sigterm_during_a_run_leaves_no_staging_folder_like_sigint(tmp_path, sig):
    out = tmp_path / "out"
    run = subprocess.Popen(command("run", write_scenario(tmp_path, LONG), "--out", out,
                                   "--quiet"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for(lambda: stagings(tmp_path))  # claimed: the simulation is running
    run.send_signal(sig)
    _, err = run.communicate(timeout=120)
    assert run.returncode == -sig, err  # ended by the signal, after cleaning up
    assert b"Traceback" not in err
    assert not out.exists() and stagings(tmp_path) == []


# The command with the signal's KeyboardInterrupt lost during the run, as Python loses one
# raised inside a finaliser or a dict lookup's __eq__ (the CI saw such a run finish and put its
# folder in place, then end by the signal).
SWALLOWED = ("import os, signal, sys, time, blis_simpy.sim.run as r\n"
             "real = r.simulate\n"
             "def lossy(*a, **k):\n"
             "    try:\n"
             "        os.kill(os.getpid(), signal.SIGTERM)\n"
             "        time.sleep(5)\n"
             "    except KeyboardInterrupt:\n"
             "        pass\n"
             "    return real(*a, **k)\n"
             "r.simulate = lossy\n"
             "from blis_simpy.cli import main\n"
             "sys.argv[0] = 'blis-simpy'\n"
             "main()\n")


def test_a_signal_whose_interrupt_was_lost_still_leaves_no_output_folder(tmp_path):
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-c", SWALLOWED, "run", write_scenario(tmp_path, SHORT),
                          "--out", out, "--quiet"], capture_output=True, timeout=120)
    assert run.returncode == -signal.SIGTERM, run.stderr
    assert not out.exists() and stagings(tmp_path) == []


def test_sigterm_while_files_are_written_leaves_no_partial_files(tmp_path):
    """Killed between one table and the next: the half-written folder goes too."""
    slow_writer = ("import sys, time, blis_simpy.sim.result as m\n"
                   "real = m.write_table\n"
                   "def slow(frame, path):\n"
                   "    real(frame, path)\n"
                   "    time.sleep(5)\n"
                   "m.write_table = slow\n") + NO_RUN.split("r.simulate = boom\n")[1]
    out = tmp_path / "out"
    run = subprocess.Popen([sys.executable, "-c", slow_writer, "run",
                            str(write_scenario(tmp_path, SHORT)), "--out", str(out), "--quiet"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for(lambda: any(p.suffix == ".csv" for s in stagings(tmp_path)
                         for p in (tmp_path / s).iterdir()))
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=60)
    assert run.returncode == -signal.SIGTERM, err
    assert not out.exists() and stagings(tmp_path) == []


def test_two_runs_on_the_same_new_out_cannot_both_take_it(tmp_path):
    """Both used to succeed, the later deleting the earlier's output without --force."""
    scenario, out = write_scenario(tmp_path, MEDIUM), tmp_path / "out"
    first = subprocess.Popen(command("run", scenario, "--out", out, "--quiet"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: stagings(tmp_path))
    second = subprocess.run(command("run", scenario, "--out", out, "--quiet"),
                            capture_output=True, text=True, timeout=120)
    assert second.returncode == 2 and second.stdout == ""
    assert f"another run (process {first.pid}) is writing {out}" in second.stderr
    assert second.stderr.count("\n") == 1
    first_out, first_err = first.communicate(timeout=600)
    assert first.returncode == 0, first_err
    assert (out / "summary.json").read_text() == first_out  # the first run's, whole


def test_a_claimed_out_is_refused_to_another_claim_in_the_same_process(tmp_path):
    """Threads of one process (threaded API runs) hold their claims apart too."""
    out = tmp_path / "out"
    first = OutputFolder(out)
    errors: list[BaseException] = []

    def claim() -> None:
        try:
            OutputFolder(out)
        except ScenarioError as exc:
            errors.append(exc)

    thread = threading.Thread(target=claim)
    thread.start()
    thread.join()
    assert len(errors) == 1 and "is writing" in str(errors[0])
    first.commit(lambda folder, fmt: (folder / "summary.json").write_text("{}"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    with pytest.raises(ScenarioError, match="already holds files") as refused:
        OutputFolder(out)  # released: now refused only for holding a run
    assert "force=True" in str(refused.value) and "--force" not in str(refused.value)


def test_staging_of_a_killed_run_is_not_a_claim(tmp_path):
    """A staging folder nobody holds a lock on (its run was SIGKILLed) is removed by the
    next claim, even if its process id has been reused by a living process."""
    orphan = tmp_path / f".out.staging-{os.getpid()}-0badf00d"
    orphan.mkdir()
    (orphan / "requests.csv").write_text("half")
    folder = OutputFolder(tmp_path / "out")
    assert not orphan.exists()
    folder.discard()


def test_a_folder_filled_during_the_run_is_not_replaced(tmp_path):
    """Something other than a run (runs are refused) filled the claimed new folder: it is
    left alone and this run's files are kept beside it."""
    out = tmp_path / "out"
    folder = OutputFolder(out)
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ScenarioError, match="was filled by something else") as err:
        folder.commit(lambda staging, fmt: (staging / "summary.json").write_text("{}"))
    assert (out / "notes.txt").read_text() == "mine"
    kept = Path(str(err.value).rpartition("files are in ")[2])
    assert (kept / "summary.json").read_text() == "{}"


def test_out_symlink_loop_is_a_one_line_error(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    for out in (tmp_path / "a", tmp_path / "a" / "run"):
        done = subprocess.run([sys.executable, "-c", NO_RUN, "run",
                               str(write_scenario(tmp_path, SHORT)), "--out", str(out)],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and "symlink loop" in done.stderr


def test_out_with_a_name_too_long_is_a_one_line_error(tmp_path):
    for out in (tmp_path / ("a" * 300), tmp_path.joinpath(*["a"] * 2100)):
        done = subprocess.run([sys.executable, "-c", NO_RUN, "run",
                               str(write_scenario(tmp_path, SHORT)), "--out", str(out)],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and "too long" in done.stderr


def test_out_of_a_wrong_type_through_the_api_names_the_argument():
    with pytest.raises(ScenarioError, match=r"^out_dir: expected a folder path, got 5"):
        OutputFolder(5)  # type: ignore[arg-type]


def test_mount_points_are_read_with_their_escapes(tmp_path, monkeypatch):
    table = tmp_path / "mountinfo"
    table.write_text("36 35 98:0 /mnt1 /mnt/my\\040disk rw,noatime master:1 - ext3 /dev/root rw\n"
                     "37 35 98:0 / / rw - ext4 /dev/sda1 rw\n")
    monkeypatch.setattr(output, "MOUNTINFO", str(table))
    assert mount_points() == {"/mnt/my disk", "/"}


def in_mount_namespace(script: str) -> subprocess.CompletedProcess[str]:
    """`script` (sh) as root of a new user and mount namespace: bind mounts without
    privileges, gone when it ends."""
    return subprocess.run(["unshare", "--mount", "--map-root-user", "sh", "-ec", script],
                          capture_output=True, text=True, timeout=300)


def can_bind_mount() -> bool:
    if shutil.which("unshare") is None:
        return False
    with tempfile.TemporaryDirectory() as folder:
        return in_mount_namespace(f"mount --bind {folder} {folder}").returncode == 0


needs_mounts = pytest.mark.skipif(not can_bind_mount(),
                                  reason="no unprivileged mount namespaces on this machine")


@needs_mounts
def test_bind_mount_on_the_same_file_system_is_filled_in_place(tmp_path):
    """os.path.ismount cannot see it (same device): the run used to end in EBUSY."""
    (tmp_path / "src").mkdir()
    (tmp_path / "mnt").mkdir()
    scenario = write_scenario(tmp_path, SHORT)
    done = in_mount_namespace(
        f"mount --bind {tmp_path / 'src'} {tmp_path / 'mnt'}\n"
        f"{' '.join(command('run', scenario, '--out', tmp_path / 'mnt', '--quiet'))}\n")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "src" / "summary.json").is_file()
    assert stagings(tmp_path / "src") == []


@needs_mounts
def test_read_only_bind_mount_is_refused_before_the_run(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "mnt").mkdir()
    scenario = write_scenario(tmp_path, SHORT)
    run = shlex.join([sys.executable, "-c", NO_RUN, "run", str(scenario), "--out",
                      str(tmp_path / "mnt")])
    done = in_mount_namespace(
        f"mount --bind {tmp_path / 'src'} {tmp_path / 'mnt'}\n"
        f"mount -o remount,bind,ro {tmp_path / 'mnt'}\n"
        f"{run} || echo status=$?\n")
    assert "status=2" in done.stdout, done.stderr
    assert done.stderr.count("\n") == 1 and "Read-only file system" in done.stderr
    assert list((tmp_path / "src").iterdir()) == []
