"""Nothing of a sandbox outlives the process that evaluates in it, however that process ends
(newcomer 16, finding 3): SIGKILLed (the OOM killer, `timeout -s KILL`, a harness's kill -9)
while its candidate spins, or while an escaped candidate blocks on a lock for ever (no CPU
used, so no CPU limit ends it), the template's PID namespace is emptied by the kernel within
seconds; a sweep's pool workers, waiting on their pipes, end with their caller too.

A sandbox's processes are found by their PID namespace (`/proc/PID/ns/pid`), which every
process in it shares whoever its parent is now, and the evaluator's other descendants by pid
and start time (a pid may be reused, its start time not)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from blis_simpy.search.sweep import worker_pool
from tests.search import escapes
from tests.search.helpers import prefix_scenario
from tests.search.test_code import routing

ROOT = Path(__file__).resolve().parents[2]
OURS = os.readlink("/proc/self/ns/pid")
SPIN = routing("n = 0\nwhile n >= 0:\n    n += 1").source  # within the static rules
# An escaped candidate blocked for ever on a lock it already holds: asleep in the kernel.
LOCKED = escapes.escaping("import _thread\nlock = _thread.allocate_lock()\nlock.acquire()\n"
                          "lock.acquire()\n").source
GONE_WITHIN_S = 10.0


def processes() -> dict[int, tuple[int, str, str, str]]:
    """Every process now: pid -> (parent, start time, state, PID namespace)."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            namespace = os.readlink(f"/proc/{pid}/ns/pid")
        except OSError:
            continue
        found[int(pid)] = (int(stat[1]), stat[19], stat[0], namespace)
    return found


def below(root: int, table: dict[int, tuple[int, str, str, str]]) -> set[int]:
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, row in table.items() if row[0] in frontier} - found
        found |= frontier
    return found


def sandboxes(root: int) -> dict[str, list[int]]:
    """The PID namespaces of `root`'s descendants other than ours (its sandboxes): each with
    the processes in it now, whatever their parents."""
    table = processes()
    spaces = {table[pid][3] for pid in below(root, table)} - {OURS}
    return {space: sorted(pid for pid, row in table.items() if row[3] == space)
            for space in spaces}


def cpu_ticks(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(stat[11]) + int(stat[12])


def spinning(pids: list[int]) -> bool:
    """A process here has spent more than half a CPU second (the candidate's loop)."""
    return any(cpu_ticks(pid) > os.sysconf("SC_CLK_TCK") // 2 for pid in pids)


def blocked(pids: list[int]) -> bool:
    """A process here sleeps on a futex (the second acquire of its own lock)."""
    for pid in pids:
        try:
            if "futex" in Path(f"/proc/{pid}/wchan").read_text():
                return True
        except OSError:
            continue
    return False


def wait_for(root: subprocess.Popen[bytes], ready: Callable[[list[int]], bool],
             count: int) -> None:
    """Until `count` sandboxes below `root` each hold a candidate that is `ready`."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert root.poll() is None, root.communicate()
        found = sandboxes(root.pid)
        if sum(len(pids) >= 2 and ready(pids) for pids in found.values()) >= count:
            return
        time.sleep(0.1)
    pytest.fail(f"no {count} candidates running below process {root.pid}: {found}")


def kill_and_check(root: subprocess.Popen[bytes]) -> None:
    """SIGKILL `root`; then within GONE_WITHIN_S no process of its sandboxes remains and
    none of its other descendants does (a zombie waiting for its reaper counts as ended)."""
    table = processes()
    descendants = {pid: table[pid][1] for pid in below(root.pid, table)}
    spaces = {table[pid][3] for pid in descendants} - {OURS}
    assert spaces
    root.kill()
    root.wait()
    deadline = time.monotonic() + GONE_WITHIN_S
    while True:
        table = processes()
        left = sorted(pid for pid, row in table.items() if row[2] != "Z" and (
            row[3] in spaces or descendants.get(pid) == row[1]))
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    shown = [command(pid) for pid in left]
    for pid in left:  # (so a failure leaves nothing behind either)
        os.kill(pid, signal.SIGKILL)
    assert not left, f"still running {GONE_WITHIN_S:g} s after the evaluator was killed: " \
        f"{'; '.join(shown)}"


def command(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return f"{pid} (gone)"
    return f"{pid} " + " ".join(a.decode(errors="replace") for a in argv)[-70:]


@pytest.fixture(scope="module")
def workload(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("workload") / "w.yaml"
    path.write_text(yaml.safe_dump(prefix_scenario().to_dict()))
    return path


def gepa_evaluate(tmp_path: Path, workload: Path, source: str) -> subprocess.Popen[bytes]:
    program = tmp_path / "candidate.py"
    program.write_text(source)
    return subprocess.Popen([sys.executable, "-c", escapes.UNCHECKED, "gepa-evaluate",
                             "--workload", str(workload), "--code", f"routing={program}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)


def test_a_spinning_candidate_ends_with_a_sigkilled_gepa_evaluate(tmp_path, workload):
    """Within the static rules, spinning: before, it ran until its CPU limit (~65 s)."""
    evaluator = gepa_evaluate(tmp_path, workload, SPIN)
    wait_for(evaluator, spinning, 1)
    kill_and_check(evaluator)


def test_a_candidate_blocked_on_a_lock_ends_with_a_sigkilled_gepa_evaluate(tmp_path,
                                                                           workload):
    """An escaped candidate asleep on a lock uses no CPU: before, it stayed for ever."""
    evaluator = gepa_evaluate(tmp_path, workload, LOCKED)
    wait_for(evaluator, blocked, 1)
    kill_and_check(evaluator)


RUN_MANY = """
from blis_simpy.search.code import CodePolicy
from blis_simpy.search.sweep import run_many
from tests.search.helpers import prefix_scenario
spin = {spin!r}
run_many(prefix_scenario(), {{"a": CodePolicy("routing", spin, id="a"),
                             "b": CodePolicy("routing", spin + "# b\\n", id="b")}}, [1],
         workers=2)
"""


def test_run_many_pool_workers_and_their_sandboxes_end_with_a_sigkilled_caller():
    """Two pool workers, each with a spinning candidate in its own sandbox: before, the
    workers waited on their pipes for ever, and their sandboxes with them."""
    caller = subprocess.Popen([sys.executable, "-c", RUN_MANY.format(spin=SPIN)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    wait_for(caller, spinning, 2)
    workers = below(caller.pid, processes())
    assert len(workers) >= 2 + 2 * 3  # two workers, each with bwrap, template, candidate
    kill_and_check(caller)


WATCHED = """
import sys, time
from blis_simpy.search.contain import end_with
end_with(int(sys.argv[1]))
print("watching", flush=True)
time.sleep(600)
"""


def test_a_pool_worker_not_forked_by_its_caller_still_ends_with_it():
    """A worker started by another process (a fork server's child: its parent is not the
    caller) watches the caller's pidfd all the same."""
    caller = subprocess.Popen(["sleep", "600"])
    worker = subprocess.Popen([sys.executable, "-c", WATCHED, str(caller.pid)],
                              stdout=subprocess.PIPE, cwd=ROOT)
    try:
        assert worker.stdout is not None and worker.stdout.readline() == b"watching\n"
        assert worker.poll() is None
        caller.kill()
        caller.wait()
        assert worker.wait(GONE_WITHIN_S) == -signal.SIGKILL
    finally:
        for process in (caller, worker):
            process.kill()
            process.wait()


def test_a_pool_worker_whose_caller_has_already_ended_ends_at_once():
    caller = subprocess.Popen(["true"])
    caller.wait()
    worker = subprocess.Popen([sys.executable, "-c", WATCHED, str(caller.pid)],
                              stdout=subprocess.PIPE, cwd=ROOT)
    assert worker.wait(60) == -signal.SIGKILL
    assert worker.stdout is not None and worker.stdout.read() == b""



def test_a_warm_pool_outlives_the_thread_that_first_used_it():
    """The GEPA adapter keeps its pool for the whole search, and its workers are forked by the
    first thread that submits: a parent-death signal (which follows that thread) would kill
    them when it ends, breaking the pool. They watch the process instead."""
    pool = worker_pool(2)
    try:
        first = threading.Thread(target=lambda: pool.submit(os.getpid).result())
        first.start()
        first.join()
        workers = {pid for pid in below(os.getpid(), processes())}
        time.sleep(0.5)
        assert pool.submit(os.getpid).result(timeout=60) in workers
    finally:
        pool.shutdown()
