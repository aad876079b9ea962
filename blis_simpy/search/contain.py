"""Running a candidate's code in a child process with limits, so that whatever it does (loop
forever, allocate without end, crash the interpreter) costs one evaluation, never the search.

The child is forked from the sweep's warm worker (everything is imported already, so a fork
costs milliseconds) and gets, before it runs anything: a CPU-time limit (SIGXCPU, then SIGKILL
one second later), an address-space limit on top of what it inherited (allocations beyond it
raise MemoryError), a file-size limit of 0 (a write fails with "File too large"; Python
ignores SIGXFSZ) and no core dumps. The
parent reads the pickled outcome from a pipe and kills the child at the wall-time budget.
"""

from __future__ import annotations

import math
import os
import pickle
import resource
import select
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from blis_simpy.core.schema import spec

T = TypeVar("T")
SIGNALS: dict[int, str] = {
    signal.SIGXCPU: "exceeded its CPU-time limit",
    signal.SIGKILL: "was killed (past its CPU-time limit, or by the system)",
}


@dataclass(frozen=True, slots=True)
class Limits:
    """What one contained evaluation may use."""

    cpu_s: float = spec(30.0, help="CPU seconds", gt=0)
    wall_s: float = spec(60.0, help="wall-clock seconds before the child is killed", gt=0)
    memory_mb: int = spec(1024, help="address space (MiB) beyond what the worker maps", ge=16)


class ContainedFailure(Exception):
    """The contained call did not return a value; the message says why."""


def contained(fn: Callable[[T], Any], arg: T, limits: Limits) -> Any:
    """fn(arg) run in a limited child process; its return value must pickle."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the caller's code
        os.close(read_end)
        child(fn, arg, limits, write_end)
    os.close(write_end)
    try:
        data = collect(read_end, pid, limits.wall_s)
    finally:
        os.close(read_end)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        what = SIGNALS.get(sig, f"crashed with signal {signal.Signals(sig).name}")
        raise ContainedFailure(f"the candidate {what} (limits: {limits.cpu_s:g} CPU s, "
                               f"{limits.memory_mb} MiB)")
    try:
        outcome, value = pickle.loads(data)
    except Exception:
        raise ContainedFailure("the candidate's process ended without a result "
                               f"(exit status {os.waitstatus_to_exitcode(status)})") from None
    if outcome == "error":
        raise ContainedFailure(value)
    return value


def collect(fd: int, pid: int, wall_s: float) -> bytes:
    """Everything the child writes, or kill it at the wall-time budget."""
    deadline = time.monotonic() + wall_s
    chunks: list[bytes] = []
    while True:
        remaining = deadline - time.monotonic()
        ready = select.select([fd], [], [], max(remaining, 0.0))[0] if remaining > 0 else []
        if not ready:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise ContainedFailure(f"the candidate exceeded its wall-time budget of "
                                   f"{wall_s:g} s")
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def child(fn: Callable[[T], Any], arg: T, limits: Limits, fd: int) -> None:
    """Apply the limits, run, send ("ok", value) or ("error", message), exit."""
    try:
        try:
            apply(limits)
            payload = pickle.dumps(("ok", fn(arg)))
        except BaseException as exc:  # anything the candidate does ends here, described
            payload = pickle.dumps(("error", f"{type(exc).__name__}: {exc}"[:2000]))
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os._exit(0)


def apply(limits: Limits) -> None:
    cpu = math.ceil(limits.cpu_s)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    mapped = mapped_bytes()
    if mapped is not None:
        cap = mapped + limits.memory_mb * 1024 * 1024
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        if hard != resource.RLIM_INFINITY:
            cap = min(cap, hard)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def mapped_bytes() -> int | None:
    """This process's address-space size (Linux), None where /proc does not say."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            pages = int(statm.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")
