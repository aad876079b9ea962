"""Both sides of a code candidate's session run on one CPU (docs/security.md, "Cost"): the
evaluating thread pins itself there for the session and gets its mask back afterwards, the
candidate's process runs on the same CPU, a restricted mask is respected, and a sweep's
workers take different CPUs."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from blis_simpy.search import contain
from blis_simpy.search.code import CodePolicy
from blis_simpy.search.contain import Limits, sandbox
from blis_simpy.search.remote import Contained
from blis_simpy.search.sweep import worker_pool
from tests.search.test_code import LEAST_LOADED
from tests.search.test_contain import CODE

CPUS = sorted(os.sched_getaffinity(0))
several = pytest.mark.skipif(len(CPUS) < 2, reason="needs 2 CPUs in this process's mask")


def outer_pid(session: contain.Session) -> int:
    """The candidate's process id outside the sandbox (the template reports the one inside
    its PID namespace): the process below the template whose innermost id it is."""
    below, queue = [], [sandbox().process.pid]
    while queue:
        pid = queue.pop()
        below.append(pid)
        for task in os.listdir(f"/proc/{pid}/task"):
            queue += map(int, Path(f"/proc/{pid}/task/{task}/children").read_text().split())
    for pid in below:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:") and int(line.split()[-1]) == session.pid \
                    and len(line.split()) > 2:
                return pid
    raise AssertionError(f"no process {session.pid} below the template")


def seen_in_session() -> tuple[int | None, set[int], set[int], set[int], set[int]]:
    """(this process's worker CPU, the thread's mask before, during and after a session, the
    candidate process's mask), with the candidate loaded (so it has pinned itself)."""
    before = os.sched_getaffinity(0)
    candidate = Contained(CODE, Limits())
    try:
        during = os.sched_getaffinity(0)
        theirs = os.sched_getaffinity(outer_pid(candidate.session))
    finally:
        candidate.close()
    return contain.WORKER_CPU, before, during, theirs, os.sched_getaffinity(0)


def test_a_candidate_runs_on_its_evaluators_cpu_and_the_mask_comes_back():
    _, before, during, theirs, after = seen_in_session()
    assert len(during) == 1 and during <= before
    assert theirs == during
    assert after == before


@several
def test_a_restricted_mask_is_respected_and_kept():
    """A thread limited to one CPU (taskset, a cgroup): the session runs there, and the
    thread keeps its mask."""
    seen = []

    def restricted() -> None:
        os.sched_setaffinity(0, {CPUS[-1]})
        seen.append(seen_in_session())

    thread = threading.Thread(target=restricted)
    thread.start()
    thread.join()
    _, before, during, theirs, after = seen[0]
    assert before == during == theirs == after == {CPUS[-1]}
    assert os.sched_getaffinity(0) == set(CPUS)  # the other threads' masks untouched


def test_a_failed_session_gives_the_mask_back():
    """A source that does not load: the session ends in its start, the mask comes back."""
    before = os.sched_getaffinity(0)
    no_entry = CodePolicy("routing", LEAST_LOADED.replace("class Policy", "class Other"),
                          id="no-entry")
    with pytest.raises(contain.ContainedFailure):
        Contained(no_entry, Limits())
    assert os.sched_getaffinity(0) == before


def pause_then_cpu(seconds: float) -> tuple[int, int | None]:
    time.sleep(seconds)
    return os.getpid(), contain.WORKER_CPU


@several
def test_a_sweeps_workers_take_different_cpus():
    with worker_pool(len(CPUS)) as pool:
        seen = dict(pool.map(pause_then_cpu, [0.2] * 4 * len(CPUS)))
    assert len(seen) == len(CPUS)
    assert sorted(seen.values()) == CPUS


@several
def test_in_a_worker_the_session_runs_on_the_workers_cpu():
    with worker_pool(2) as pool:
        results = list(pool.map(seen_session_after, [0.3, 0.3]))
    for worker_cpu, before, during, theirs, after in results:
        assert during == theirs == {worker_cpu}
        assert after == before
    assert len({r[0] for r in results}) == 2


def seen_session_after(seconds: float) -> tuple[int | None, set[int], set[int], set[int],
                                                  set[int]]:
    time.sleep(seconds)  # (both workers busy at once: each takes one task)
    return seen_in_session()
