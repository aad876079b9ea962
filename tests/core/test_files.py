"""Special files as every input path (blis_simpy/core/files.py): a FIFO, a device, a symlink
loop, an unreadable /proc file, a folder and a huge file, named as a scenario, a trace, a
policy bundle (ours and the reference's), candidate code, a sweep file, an OpenEvolve program,
a defaults file, a workload spec, a model config, a step model's coefficients file or a
measured run (`validate-real`, `calibrate`), are each one line naming the option and the path,
at once: never a hang, a traceback or a read until memory runs out.

The matrix runs in this process under an alarm (a FIFO that blocked would fail the test, not
hang the suite); the command-line cases run the real command in a subprocess."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.files import MAX_TEXT_BYTES, MAX_TRACE_BYTES, digest, read_bytes, read_text
from tests.conftest import BASE


@contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Fail (instead of hanging) if the body blocks longer than `seconds`."""
    def expired(signum: int, frame: Any) -> None:
        raise TimeoutError(f"blocked for {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def special(kind: str, folder: Path, huge: int) -> Path:
    """A path in `folder` (or of the system) that is not a readable regular file."""
    path = folder / f"special-{kind}"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        return Path("/dev/zero")
    elif kind == "symlink-loop":
        os.symlink(folder / "special-other", path)
        os.symlink(path, folder / "special-other")
    elif kind == "unreadable-proc":
        return Path("/proc/self/mem")  # opens, then every read fails with EIO
    elif kind == "directory":
        path.mkdir()
    elif kind == "huge":  # sparse: no disk used
        with path.open("wb") as f:
            f.truncate(huge + 1)
    return path


def scenario_with_trace(trace: Path, folder: Path) -> None:
    from blis_simpy.sim.run import prepare

    path = folder / "s.yaml"
    path.write_text(yaml.safe_dump({**BASE, "workload": {"type": "trace",
                                                         "path": str(trace)}}))
    prepare(path)


def sweep_file(path: Path, folder: Path) -> None:
    from blis_simpy.search.sweepfile import read_sweep

    read_sweep(path)


def candidate_code(path: Path, folder: Path) -> None:
    from blis_simpy.search.commands import components

    components(None, [f"routing={path}"])


def openevolve_program(path: Path, folder: Path) -> None:
    from blis_simpy.search.openevolve_evaluator import BlisEvaluator

    BlisEvaluator.candidate(None, path)  # type: ignore[arg-type]  # reads, needs no state


def reference_bundle(path: Path, folder: Path) -> None:
    from blis_simpy.compat.bundle import load_bundle

    load_bundle(path)


def policy_bundle(path: Path, folder: Path) -> None:
    from blis_simpy.policies.bundle import PolicyBundle

    PolicyBundle.from_yaml(path)


def scenario_file(path: Path, folder: Path) -> None:
    from blis_simpy.config.scenario import Scenario

    Scenario.from_yaml(path)


def defaults_file(path: Path, folder: Path) -> None:
    from blis_simpy.config.catalog import Catalog

    Catalog.from_file(path, "--defaults-filepath")


def workload_spec(path: Path, folder: Path) -> None:
    from blis_simpy.compat.workload_spec import workload_spec as read

    read(path)


def model_config(path: Path, folder: Path) -> None:
    from blis_simpy.config.catalog import read_json

    try:
        read_json(str(path), "config.json")
    except ValueError as exc:  # its callers turn it into a ScenarioError at their field
        raise ScenarioError("latency.model_config", str(exc)) from None


def coefficients_file(path: Path, folder: Path) -> None:
    from blis_simpy.sim.run import prepare

    prepare({**BASE, "latency": {"type": "physical", "coefficients": str(path)}})


def measured_run(path: Path, folder: Path) -> None:
    from blis_simpy.validate.importers import Hints, read

    read(path, Hints())


READERS: dict[str, Callable[[Path, Path], None]] = {
    "scenario": scenario_file, "trace": scenario_with_trace, "policy-bundle": policy_bundle,
    "reference-bundle": reference_bundle, "candidate-code": candidate_code,
    "sweep-file": sweep_file, "openevolve-program": openevolve_program,
    "defaults": defaults_file, "workload-spec": workload_spec, "model-config": model_config,
    "coefficients": coefficients_file, "measured-run": measured_run}
KINDS = ["fifo", "dev-zero", "symlink-loop", "unreadable-proc", "directory", "huge"]
WORDS = {"fifo": "FIFO", "dev-zero": "character device", "symlink-loop": "symbolic links",
         "unreadable-proc": "Input/output error", "directory": "folder",
         "huge": "larger than"}


# A model config may be a folder holding config.json, a measured run a folder of
# inference-perf results: those cases are the missing file's.
CASES = [(kind, reader) for kind in KINDS for reader in sorted(READERS)
         if (kind, reader) not in {("directory", "model-config"), ("directory", "measured-run")}]


@pytest.mark.parametrize(("kind", "reader"), CASES)
def test_special_file_as_input_is_a_one_line_error(tmp_path, kind, reader):
    huge = MAX_TRACE_BYTES if reader == "trace" else MAX_TEXT_BYTES
    path = special(kind, tmp_path, huge)
    with deadline(20), pytest.raises(ScenarioError) as caught:
        READERS[reader](path, tmp_path)
    message = str(caught.value)
    assert "\n" not in message
    assert WORDS[kind] in message, message
    assert str(path) in message or path.name in message, message


def test_a_file_that_claims_to_be_empty_is_still_read_within_the_limit():
    """/proc files report size 0: the bound is on what is read, not on what fstat says."""
    assert read_bytes("/proc/self/status", "x", limit=1 << 20).startswith(b"Name:")
    with pytest.raises(ScenarioError, match="larger than 10 bytes"):
        read_bytes("/proc/self/status", "x", limit=10)


def test_a_digest_stops_at_the_size_a_file_states(tmp_path):
    """A run store's key digests the scenario's input files: /proc/self/pagemap states 0
    bytes and holds 256 GiB (minutes of hashing), /proc/self/mem fails when read (newcomer 20
    #3). Each is one line at once, after at most one byte; a regular file hashes whole."""
    import hashlib

    path = tmp_path / "t.csv"
    path.write_bytes(b"x" * 3_000_000)
    assert digest(path, "workload.path") == hashlib.sha256(path.read_bytes()).hexdigest()
    with deadline(5), pytest.raises(ScenarioError, match="holds more than the 0 bytes"):
        digest("/proc/self/pagemap", "workload.path", "a trace file", MAX_TRACE_BYTES)
    with deadline(5), pytest.raises(ScenarioError, match="Input/output error"):
        digest("/proc/self/mem", "workload.path", "a trace file", MAX_TRACE_BYTES)


def test_not_utf8_names_the_byte(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_bytes(b"name: ok\n\xff\n")
    with pytest.raises(ScenarioError, match=r"not UTF-8 text \(byte 0xff at offset 9\)"):
        read_text(path, "field")


def test_a_byte_order_mark_is_dropped(tmp_path):
    path = tmp_path / "x.py"
    path.write_bytes("\ufeffx = 1\n".encode())
    assert read_text(path, "--code") == "x = 1\n"


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "blis_simpy", *args], cwd=cwd, timeout=120,
                          capture_output=True, text=True)


def one_line_exit_2(done: subprocess.CompletedProcess[str], path: Path) -> None:
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert path.name in done.stderr and "FIFO" in done.stderr, done.stderr
    assert done.stdout == ""


def test_fifo_as_scenario_exits_2_at_once_in_a_subprocess(tmp_path):
    fifo = special("fifo", tmp_path, 0)
    one_line_exit_2(cli("run", str(fifo), "--out", "out", cwd=tmp_path), fifo)
    assert not (tmp_path / "out").exists()


def test_fifo_as_trace_exits_2_at_once_in_a_subprocess(tmp_path):
    fifo = special("fifo", tmp_path, 0)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**BASE, "workload": {"type": "trace",
                                                         "path": fifo.name}}))
    one_line_exit_2(cli("run", str(path), "--out", "out", cwd=tmp_path), fifo)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("trace", ["/proc/self/mem", "/proc/self/pagemap"])
@pytest.mark.parametrize("command", [["sweep", "sweep.yaml"],
                                     ["gepa-evaluate", "--workload", "s.yaml"]])
def test_an_unreadable_trace_in_a_search_exits_2_in_one_line_at_once(tmp_path, trace,
                                                                      command):
    """A search keys its runs by the trace's content before the trace is replayed: that read
    gave a traceback (/proc/self/mem) or hashed 256 GiB for minutes (/proc/self/pagemap),
    where `run` refused each in one line (newcomer 20 #3). It is the user's scenario: never
    a candidate's zero."""
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({**BASE, "workload": {"type": "trace",
                                                                          "path": trace}}))
    (tmp_path / "sweep.yaml").write_text("scenarios: [s.yaml]\npolicies: {rr: "
                                         "{routing.type: round-robin}}\nseeds: [1]\n")
    done = subprocess.run([sys.executable, "-m", "blis_simpy", *command], cwd=tmp_path,
                          timeout=60, capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    words = "holds more than the 0 bytes" if "pagemap" in trace else "Input/output error"
    assert "workload.path: " in done.stderr and words in done.stderr, done.stderr
    assert done.stdout == "" and not (tmp_path / "sweep.csv").exists()


def test_fifo_as_policy_config_exits_2_at_once_in_a_subprocess(tmp_path):
    fifo = special("fifo", tmp_path, 0)
    one_line_exit_2(cli("run", "quickstart", "--policy-config", str(fifo), "--out", "out",
                        cwd=tmp_path), fifo)


def test_fifo_as_candidate_code_exits_2_at_once_in_a_subprocess(tmp_path):
    fifo = special("fifo", tmp_path, 0)
    one_line_exit_2(cli("gepa-evaluate", "--workload", "quickstart", "--code",
                        f"routing={fifo}", cwd=tmp_path), fifo)


def test_fifo_as_sweep_file_exits_2_at_once_in_a_subprocess(tmp_path):
    fifo = special("fifo", tmp_path, 0)
    one_line_exit_2(cli("sweep", str(fifo), cwd=tmp_path), fifo)


def test_fifo_as_measured_run_exits_2_at_once_in_a_subprocess(tmp_path):
    """validate-real and calibrate read the user's benchmark output before any simulation."""
    fifo = special("fifo", tmp_path, 0)
    one_line_exit_2(cli("validate-real", str(fifo), cwd=tmp_path), fifo)
    one_line_exit_2(cli("calibrate", str(fifo), "--alone", "--out", "c.json", cwd=tmp_path),
                    fifo)
    assert not (tmp_path / "c.json").exists()


def test_fifo_as_coefficients_file_exits_2_at_once_in_a_subprocess(tmp_path):
    fifo = special("fifo", tmp_path, 0)
    one_line_exit_2(cli("run", "quickstart", "--set", f"latency.coefficients={fifo}",
                        "--out", "out", cwd=tmp_path), fifo)
    assert not (tmp_path / "out").exists()


# --- writers: a file written whole or not at all, never over a device ---------------------------

def device_or_fifo(folder: Path) -> Path:
    """A character device (a private /dev/null, as root) or else a FIFO: a path that must
    never be replaced by a regular file."""
    path = folder / "sink"
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        os.mkfifo(path)
    return path


def still_special(path: Path) -> bool:
    return not stat.S_ISREG(os.stat(path).st_mode)


def test_device_as_workload_sample_out_is_refused_not_replaced(tmp_path):
    """As root, `workload sample --out /dev/null` replaced the device with the trace."""
    from typer.testing import CliRunner

    from blis_simpy.cli import app

    sink = device_or_fifo(tmp_path)
    with deadline(60):
        done = CliRunner().invoke(app, ["workload", "sample", "quickstart", "--out", str(sink)])
    assert done.exit_code == 2 and "not a regular file" in done.stderr, done.output
    assert still_special(sink)


def test_device_as_sweep_table_is_refused_even_with_force(tmp_path):
    from typer.testing import CliRunner

    from blis_simpy.cli import app

    sink = device_or_fifo(tmp_path)
    table = sink.rename(tmp_path / "sink.csv")
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump({
        "scenarios": ["quickstart"], "set": {"workload.num_requests": 5}, "seeds": [1]}))
    with deadline(60):
        done = CliRunner().invoke(app, ["sweep", str(tmp_path / "sweep.yaml"), "--out",
                                        str(table), "--force"])
    assert done.exit_code == 2 and "not a regular file" in done.output, done.output
    assert still_special(table)


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    from blis_simpy.core.files import replacing

    path = tmp_path / "t.csv"
    path.write_text("old\n")
    with pytest.raises(ScenarioError, match="No space left"), \
            replacing(path, "--out", force=True) as temp:
        temp.write_text("half")
        raise OSError(28, "No space left on device")
    assert path.read_text() == "old\n" and sorted(tmp_path.iterdir()) == [path]


def test_sigterm_while_a_sample_is_written_leaves_no_partial_file(tmp_path):
    slow = ("import sys, time, blis_simpy.workload.export as e\n"
            "real = e.trace_line\n"
            "def line(*a):\n"
            "    time.sleep(0.01)\n"
            "    return real(*a)\n"
            "e.trace_line = line\n"
            "from blis_simpy.cli import main\n"
            "main()\n")
    out = tmp_path / "trace.csv"
    run = subprocess.Popen([sys.executable, "-c", slow, "workload", "sample", "quickstart",
                            "--out", str(out)], cwd=tmp_path, stderr=subprocess.PIPE)
    end = time.monotonic() + 120
    while not any(p.name.endswith(".tmp") and p.stat().st_size for p in tmp_path.iterdir()):
        assert time.monotonic() < end and run.poll() is None, "never started writing"
        time.sleep(0.05)
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=60)
    assert run.returncode == -signal.SIGTERM, err
    assert list(tmp_path.iterdir()) == []
