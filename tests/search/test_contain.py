"""The sandbox's life: refused, never bypassed, where it cannot start; one warm template per
evaluating process, restarted if it dies, gone with its process; evaluations in threads and
in pool workers never cross; its limits checked when they are made. (When the evaluator is
killed: test_sandbox_lifetime.py.)"""

from __future__ import annotations

import dataclasses
import errno
import math
import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from blis_simpy.cli import app
from blis_simpy.core.errors import ScenarioError
from blis_simpy.search import jail
from blis_simpy.search.code import CodePolicy
from blis_simpy.search.contain import (
    MAX_LIMIT_S,
    MAX_MEMORY_MB,
    SHARED,
    Limits,
    SandboxUnavailable,
    sandbox,
)
from blis_simpy.search.gepa_adapter import BlisAdapter
from blis_simpy.search.sweep import run_many
from tests.search.helpers import prefix_scenario, processes_with
from tests.search.test_code import LEAST_LOADED

CODE = CodePolicy("routing", LEAST_LOADED, id="code")


@pytest.fixture
def no_bwrap(monkeypatch):
    """A machine without bubblewrap (the shared template forgotten before and after)."""
    SHARED.forget()
    monkeypatch.setattr(jail, "bwrap", lambda: None)
    yield
    SHARED.forget()


@pytest.fixture
def broken_bwrap(monkeypatch, tmp_path):
    """A bwrap that cannot create namespaces, as on a kernel that forbids them."""
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\n"
                    "exit 1\n")
    fake.chmod(0o755)
    SHARED.forget()
    monkeypatch.setattr(jail, "bwrap", lambda: str(fake))
    yield
    SHARED.forget()


def test_without_bwrap_code_candidates_are_refused_in_one_line(no_bwrap):
    with pytest.raises(SandboxUnavailable) as refused:
        run_many(prefix_scenario(), {"code": CODE}, [1], workers=1)
    message = str(refused.value)
    assert "\n" not in message
    assert "bubblewrap (bwrap) is not installed" in message and "apt-get install" in message
    # no code, no sandbox needed; code the static check refuses needs none either
    table = run_many(prefix_scenario(), {"rr": {"routing.type": "round-robin"},
                                         "bad": CodePolicy("routing", "import os\n")}, [1],
                     workers=1)
    assert table.fitness[0] > 0 and "import os" in table.error[1]


def test_a_bwrap_that_cannot_start_is_refused_with_its_reason(broken_bwrap):
    before = children()
    with pytest.raises(SandboxUnavailable, match="No permissions to create new namespace"):
        run_many(prefix_scenario(), {"code": CODE}, [1], workers=1)
    assert children() <= before  # (the check's process reaped)


def test_the_search_entry_points_refuse_rather_than_score_zero(no_bwrap, tmp_path: Path):
    """gepa-evaluate and openevolve-evaluate exit 2 with one line; the GEPA adapter raises:
    a search must not go on with every code candidate at 0."""
    workload = tmp_path / "w.yaml"
    workload.write_text(yaml.safe_dump(prefix_scenario().to_dict()))
    program = tmp_path / "route.py"
    program.write_text(LEAST_LOADED)
    runner = CliRunner()
    for args in (["gepa-evaluate", "--workload", str(workload), "--code", f"routing={program}"],
                 ["openevolve-evaluate", str(program), "--workload", str(workload)]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: sandbox: code candidates run "
                                                       "only in the sandbox")
        assert result.stdout == ""
    with pytest.raises(SandboxUnavailable):
        BlisAdapter(workers=1).evaluate([prefix_scenario()], {"routing": LEAST_LOADED})


def test_a_sweep_on_a_pool_checks_the_sandbox_without_starting_a_template_here():
    """The caller only checks that the sandbox can start (bwrap, one interpreter that exits):
    its pool workers evaluate, each with its own template, so none is started here."""
    SHARED.forget()
    before = sandbox_processes()
    try:
        table = run_many(prefix_scenario(), {"a": CODE, "b": CODE}, [1, 2], workers=2)
        assert list(table.error) == [""] * 4 and SHARED.current is None
        run_many(prefix_scenario(), {"a": CODE}, [1], workers=1)  # evaluated here: started
        assert SHARED.current is not None and SHARED.current.alive()
    finally:
        SHARED.forget()
    deadline = time.monotonic() + 10  # (the workers' templates end with the pool)
    while sandbox_processes() != before and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_sweep_refused_while_it_is_planned_leaves_no_sandbox_check_running():
    """The check that the sandbox can start runs while the runs are planned: a candidate
    refused there (after the check started) ends the check, and nothing is left behind."""
    SHARED.forget()
    before = children()
    with pytest.raises(ScenarioError, match="no autoscaler"):
        run_many(prefix_scenario(), {"a": CODE, "bad": {"autoscale.scale_up_threshold": 0.5}},
                 [1], workers=1)
    assert children() <= before


def children() -> set[str]:
    """This process's child processes."""
    return {pid for task in Path("/proc/self/task").iterdir()
            for pid in (task / "children").read_text().split()}


def test_the_sandbox_starts_at_its_layout_and_this_thread_keeps_its_own():
    """bubblewrap is started without address-space randomisation, so the template does not
    start a second interpreter to turn it off; the flag was the starting thread's for the
    moment only."""
    own = Path("/proc/thread-self/personality").read_text()
    SHARED.forget()
    try:
        started = sandbox()
        flags = int(Path(f"/proc/{started.process.pid}/personality").read_text(), 16)
        assert flags & jail.ADDR_NO_RANDOMIZE
        assert Path("/proc/thread-self/personality").read_text() == own
        assert not int(own, 16) & jail.ADDR_NO_RANDOMIZE
    finally:
        SHARED.forget()


def sandbox_processes() -> set[int]:
    """Every process running this checkout's sandbox template or a candidate."""
    return processes_with("blis_simpy.search.cell")


def test_pool_workers_templates_end_with_the_pool():
    """A worker's template reads the end of its control socket when the worker exits, and the
    kernel ends its PID namespace: nothing of the sandbox outlives the sweep's pool."""
    sandbox()
    before = sandbox_processes()
    table = run_many(prefix_scenario(), {"a": CODE, "b": CODE}, [1, 2], workers=2)
    assert list(table.error) == [""] * 4
    deadline = time.monotonic() + 10
    while sandbox_processes() != before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox_processes() == before


def descendants(root: int) -> set[int]:
    """The processes below `root` (by their parent ids): this test's own sandbox only, never
    another run's on the same machine."""
    parents = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        parents[int(pid)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


@pytest.mark.parametrize("which", [min, max], ids=["template", "its zygote"])
def test_a_template_killed_from_outside_is_started_again(which):
    """The template (the sandbox's first process) or its zygote (forked from it after)."""
    first = sandbox()
    os.kill(which(sandbox_processes() & descendants(first.process.pid)), signal.SIGKILL)
    row = run_many(prefix_scenario(), {"code": CODE}, [1], workers=1).iloc[0]
    assert row.error == "" and sandbox() is not first


def test_evaluations_in_threads_never_cross():
    """Each thread's stand-ins talk to its own candidate process (a context variable), so a
    thread pool gives the serial rows."""
    policies = {"code": CODE, "other": CodePolicy("routing", LEAST_LOADED.replace(
        "min(loads)", "max(loads)"), id="other")}
    serial = run_many(prefix_scenario(), policies, [1, 2, 3], workers=1)
    with ThreadPoolExecutor(4) as pool:
        threaded = run_many(prefix_scenario(), policies, [1, 2, 3], executor=pool)
    pd.testing.assert_frame_equal(threaded, serial)


FIRST = LEAST_LOADED + """

class First(RoutingPolicy):
    def route(self, req, priority, snapshots, state, clock):
        return RoutingDecision(snapshots[0].id, "first", tuple(1.0 for _ in snapshots))
"""


def test_one_source_with_two_entry_points_scores_alike_in_threads():
    """Each candidate's stand-in module is its own (axis, entry point and source): two entry
    points of one source, evaluated at once in a thread pool, scored one of them 0 ("defines
    no 'First'")."""
    policies = {"least": CodePolicy("routing", FIRST, id="least"),
                "first": CodePolicy("routing", FIRST, entry="First", id="first")}
    serial = run_many(prefix_scenario(), policies, [1, 2, 3], workers=1)
    assert list(serial.error) == [""] * 6 and serial.fitness[0] != serial.fitness[3]
    with ThreadPoolExecutor(4) as pool:
        threaded = run_many(prefix_scenario(), policies, [1, 2, 3], executor=pool)
    pd.testing.assert_frame_equal(threaded, serial)


def test_stand_in_modules_open_at_once_never_share_a_class():
    """The same source as two entry points, or as one entry point on two axes, while both
    are open: each module holds its own stand-in, of its own axis."""
    from blis_simpy.search.remote import MODULES, RemoteAdmission, RemoteRouting

    codes = [CodePolicy("routing", FIRST), CodePolicy("routing", FIRST, entry="First"),
             CodePolicy("admission", FIRST)]
    assert len({code.module_name for code in codes}) == 3
    for code in codes:
        MODULES.add(code)
    try:
        for code, base in zip(codes, (RemoteRouting, RemoteRouting, RemoteAdmission),
                              strict=True):
            assert issubclass(getattr(sys.modules[code.module_name], code.entry), base)
    finally:
        for code in codes:
            MODULES.discard(code)
    assert not any(code.module_name in sys.modules for code in codes)


@pytest.mark.parametrize("given, message", [
    ({"wall_s": "5"}, "limits.wall_s: expected float, got str '5'"),
    ({"wall_s": math.inf}, "limits.wall_s: must be a finite number, got inf"),
    ({"cpu_s": math.nan}, "limits.cpu_s: must be a finite number, got nan"),
    ({"wall_s": -1}, "limits.wall_s: must be > 0, got -1.0"),
    ({"cpu_s": 0}, "limits.cpu_s: must be > 0, got 0.0"),
    ({"wall_s": 1e9}, f"limits.wall_s: must be <= {MAX_LIMIT_S}, got 1000000000.0"),
    ({"memory_mb": 8}, "limits.memory_mb: must be >= 16, got 8"),
    ({"memory_mb": 2**40}, f"limits.memory_mb: must be <= {MAX_MEMORY_MB}, got {2**40}"),
    ({"memory_mb": 512.5}, "limits.memory_mb: expected int, got float 512.5"),
    ({"memory_mb": True}, "limits.memory_mb: expected int, got bool True"),
    ({"cpu_s": None}, "limits.cpu_s: expected float, got null"),
])
def test_bad_limits_are_refused_when_made_naming_the_field_and_the_value(given, message):
    """Before, a string raised TypeError in the middle of an evaluation, inf an OverflowError,
    and nan or -1 scored every candidate 0."""
    with pytest.raises(ScenarioError) as refused:
        Limits(**given)
    assert str(refused.value) == message
    with pytest.raises(ScenarioError, match=message.split(":")[0]):
        dataclasses.replace(Limits(), **given)


def test_limits_take_numpy_numbers_as_the_python_numbers_they_hold():
    limits = Limits(cpu_s=np.float32(2.5), wall_s=np.int64(5), memory_mb=np.int64(512))
    assert limits == Limits(cpu_s=2.5, wall_s=5.0, memory_mb=512)
    assert [type(v) for v in (limits.cpu_s, limits.wall_s, limits.memory_mb)] == \
        [float, float, int]
    assert Limits(memory_mb=512.0).memory_mb == 512 and Limits() == Limits(30, 60, 1024)


def lock_downs() -> list:
    """The lock-down's two implementations of its native calls: the C extension (not in a
    pure install) and the ctypes one a pure install uses."""
    import blis_simpy.search.ctypes_lockdown as through_ctypes
    return [pytest.param(jail.native, id="extension", marks=pytest.mark.skipif(
        jail.PURE, reason="a pure install has no lockdown extension")),
        pytest.param(through_ctypes, id="ctypes")]


@pytest.mark.parametrize("native", lock_downs())
def test_both_lock_downs_refuse_files_and_stop_the_clock(native):
    """Each implementation, in a forked process: the clock's pages zeroed, no new privileges,
    the filter on: a file cannot be opened, the coarse clock reads 0; what the kernel refuses
    is an OSError with its errno; a filter that is not whole instructions, a ValueError."""
    assert native.personality(jail.PERSONALITY_QUERY) >= 0
    with pytest.raises(OSError) as refused:
        native.map_zeros(1, 4096)  # (not page-aligned)
    assert refused.value.errno == errno.EINVAL
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            for start, size in jail.clock_pages():
                native.map_zeros(start, size)
            native.no_new_privs()
            native.seccomp(jail.program())
            try:
                os.open("/proc/self/statm", os.O_RDONLY)
            except PermissionError:
                code = 0 if time.clock_gettime(6) == 0 else 3  # CLOCK_MONOTONIC_COARSE
        finally:
            os._exit(code)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    if native is jail.native and not jail.PURE:
        with pytest.raises(ValueError, match="instructions of 8 bytes"):
            native.seccomp(b"1234")


@pytest.mark.parametrize("native", lock_downs())
def test_both_lock_downs_fork_a_sibling_its_parent_reaps(native):
    """`fork_sibling` in a forked process (as the zygote calls it): the child it makes is
    this test's child, which reaps it and reads how it ended."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            sibling = native.fork_sibling()
            if sibling == 0:
                os._exit(7)
            os.write(write, sibling.to_bytes(4, "little"))
        finally:
            os._exit(0)
    os.close(write)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    sibling = int.from_bytes(os.read(read, 4), "little")
    os.close(read)
    assert os.waitstatus_to_exitcode(os.waitpid(sibling, 0)[1]) == 7
