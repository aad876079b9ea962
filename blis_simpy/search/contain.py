"""The evaluator's side of the boundary around candidate code (docs/security.md): the sandbox's
template process, and one locked-down process per candidate evaluation forked from it.

A `Sandbox` is started fresh with bubblewrap (`jail.command`), never forked from the evaluator,
so it holds nothing of it: it imports what candidates may use and forks a `Session` per
evaluation. Each process that evaluates candidates keeps one warm template (`sandbox()`), as
it would a connection pool; it dies with that process. A machine where the sandbox cannot
start refuses code candidates with `SandboxUnavailable`, one line saying why; there is no
unsandboxed fallback.

A session's process answers the simulation's policy calls over its own pair of pipes (a
round trip costs about two thirds of a socket's): a marshal frame to it, a frame back
(`blis_simpy.search.wire`). The evaluator waits for it, and answers its questions, at most
`Limits.wall_s` in all; the process's own limits (CPU time, memory) are enforced by the
kernel. Whatever goes wrong (a limit, a crash, a message that is not what was asked) ends the
session with `ContainedFailure`, which the sweep turns into a zero with the reason.

The two sides of a session take turns (one waits while the other works), so both run on one
CPU (`session_cpu`): the evaluating thread pins itself there for the session and puts its
CPU mask back at the end, and the candidate's process pins itself there before it locks
down. A crossing then wakes a process on the CPU it is already on; on different CPUs each
crossing pays a wake-up across CPUs (an interprocessor interrupt), which on a virtual machine
costs more than the crossing's own work. A sweep's workers each take a different CPU
(`take_cpu`), so two sessions never share one.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import importlib.util
import json
import multiprocessing.util
import os
import select
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, NoReturn

from blis_simpy.core.errors import PolicyError, ScenarioError
from blis_simpy.core.schema import convert, field_types, spec
from blis_simpy.search import jail, wire
from blis_simpy.search.codec import DECISION_TAG

START_S = 60.0  # seconds the template may take to start (imports, on a loaded machine)
CONTROL_S = 30.0  # seconds the template may take to fork or reap a candidate's process
CLOSE_S = 5.0  # seconds the sandbox may take to end once told to
MAX_ASKS = 10_000  # questions a candidate may ask the evaluator during one call
# How a candidate's process ended (the template reports the signal's name) -> why it scored 0.
ENDINGS = {
    "SIGXCPU": "exceeded its CPU-time limit",
    "SIGKILL": "was killed (past its CPU-time limit, or by the system)",
    "SIGSEGV": "crashed with SIGSEGV (a memory fault, or an attempt to read the clock, which "
               "the sandbox forbids)",
    "SIGSYS": "made a system call of another architecture",
}


MAX_LIMIT_S = 7 * 86_400  # a week: a longer limit is none (and overflows the kernel's waits)
MAX_MEMORY_MB = 1 << 20  # 1 TiB: more does not fit the kernel's address-space limit


@dataclass(frozen=True, slots=True)
class Limits:
    """What one candidate evaluation may use. Each value is checked when it is made (numpy
    numbers taken as the Python numbers they hold): a bad one is a ScenarioError naming it."""

    cpu_s: float = spec(30.0, help="CPU seconds of the candidate's process", gt=0,
                        le=MAX_LIMIT_S)
    wall_s: float = spec(60.0, help="seconds the evaluator waits for the candidate's answers "
                         "and spends answering its questions in one evaluation, in all", gt=0,
                         le=MAX_LIMIT_S)
    memory_mb: int = spec(1024, help="address space (MiB) of the candidate's process beyond "
                          "the sandbox template's", ge=16, le=MAX_MEMORY_MB)

    def __post_init__(self) -> None:
        hints = field_types(Limits)
        for item in fields(self):
            value = convert(hints[item.name], getattr(self, item.name),
                            f"limits.{item.name}", item.metadata)
            object.__setattr__(self, item.name, value)


class ContainedFailure(PolicyError):
    """The candidate's process failed (a limit, a crash, a broken message); the text says how.
    A `PolicyError`, so the run stops and the sweep scores the candidate 0."""

    def __init__(self, problem: str) -> None:
        super().__init__("", problem)
        self.args = (problem,)


class SandboxUnavailable(ScenarioError):
    """The sandbox cannot start on this machine: code candidates are refused, not run
    unsandboxed."""

    def __init__(self, problem: str) -> None:
        super().__init__("sandbox", f"code candidates run only in the sandbox, which cannot "
                         f"start here: {problem}", f"install bubblewrap ({jail.INSTALL}); it "
                         "needs unprivileged user namespaces, or root")
        self.args = (problem,)


class TemplateGone(SandboxUnavailable):
    """The template ended after it started (killed from outside): `spawn` starts another."""


def packages() -> list[Path]:
    """The folders (or single-file modules) the sandbox imports from: this package, numpy
    (and its bundled libraries), and what the compiled request's native vectors import:
    mypyc's runtime library (`librt`, a namespace package) and `mypy_extensions` (a module)."""
    found = []
    for name in ("blis_simpy", "numpy", "librt", "mypy_extensions"):
        spec = importlib.util.find_spec(name)
        assert spec is not None
        for location in spec.submodule_search_locations or [str(spec.origin)]:
            path = Path(location)
            found.append(path)
            libs = path.with_name(f"{name}.libs")
            if libs.is_dir():
                found.append(libs)
    return found


# --- which CPU a session runs on ------------------------------------------------------------

# This process's CPU for its sessions, when it is one of a sweep's workers (`take_cpu`).
WORKER_CPU: int | None = None
PIN = True  # False: neither side of a session is pinned (for benchmarks: what pinning saves)


def take_cpu(taken: Any, cpus: Sequence[int]) -> None:
    """In a sweep worker (`pool_worker`): take the next of `cpus` (the sweep's allowed CPUs, in
    order; `taken` counts the workers started, a shared `multiprocessing.Value`), so workers
    take different CPUs while there are enough of them."""
    global WORKER_CPU
    with taken.get_lock():
        index = taken.value
        taken.value += 1
    WORKER_CPU = cpus[index % len(cpus)]


# --- a sweep's workers ----------------------------------------------------------------------


def pool_worker(caller: int, taken: Any, cpus: Sequence[int]) -> None:
    """A sweep worker's initializer: end with the `caller` (`end_with`), take a CPU
    (`take_cpu`), and close its template when the pool shuts it down (a worker's exit runs
    multiprocessing's finalizers, not atexit), so the template and its candidates are reaped
    and their CPU time is the caller's children's, as a benchmark counts it."""
    end_with(caller)
    take_cpu(taken, cpus)
    multiprocessing.util.Finalize(SHARED, SHARED.forget, exitpriority=0)


def end_with(caller: int) -> None:
    """End this process (a pool worker) when `caller`, the process that started the pool,
    ends, however it ends: a worker waiting on its pipe would otherwise wait for ever, and its
    sandbox with it. A thread waits on the caller's pidfd: it watches the process, where the
    kernel's parent-death signal follows the thread that forked the worker (the first to use
    a warm pool, such as the GEPA adapter's, which may end long before the pool). Without
    pidfds (Linux before 5.3), the parent-death signal is the fallback."""
    try:
        watched = os.pidfd_open(caller)
    except ProcessLookupError:  # it has ended already
        os.kill(os.getpid(), signal.SIGKILL)
    except (OSError, AttributeError):
        with contextlib.suppress(OSError):  # (not forked by the caller: nothing to hold on to)
            jail.die_with_parent(caller)
        return
    threading.Thread(target=die_when_readable, args=(watched,), daemon=True,
                     name="blis-simpy-end-with-caller").start()


def die_when_readable(pidfd: int) -> None:
    """SIGKILL this process once the process `pidfd` refers to has ended."""
    select.select([pidfd], [], [])
    os.kill(os.getpid(), signal.SIGKILL)


@functools.cache
def libc() -> ctypes.CDLL:
    return ctypes.CDLL(None)


def current_cpu() -> int:
    """The CPU this thread is running on now (-1 if the C library cannot say)."""
    try:
        return int(libc().sched_getcpu())
    except (OSError, AttributeError):
        return -1


def pin(cpus: set[int]) -> None:
    """Run the calling thread on `cpus` (nothing if the kernel refuses: a cgroup's CPU set
    changed under us; the session only runs slower)."""
    with contextlib.suppress(OSError):
        os.sched_setaffinity(0, cpus)


def session_cpu(allowed: Collection[int]) -> int:
    """The CPU both sides of a session run on, one of `allowed` (the evaluating thread's
    mask): this worker's own, else the one the thread runs on now, else the lowest."""
    if WORKER_CPU is not None and WORKER_CPU in allowed:
        return WORKER_CPU
    cpu = current_cpu()
    return cpu if cpu in allowed else min(allowed)


class Sandbox:
    """The template process in its sandbox, and the control socket to it."""

    def __init__(self) -> None:
        path = bwrap_path()
        ours, theirs = socket.socketpair()
        try:
            with jail.unrandomised():  # (at the sandbox's layout from the start)
                # The control socket as its standard input: the same descriptors in every
                # template, however many this process has open (`cell.main`).
                self.process = subprocess.Popen(
                    jail.command(path, "blis_simpy.search.cell", packages()),
                    stdin=theirs.fileno(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        except OSError as exc:
            raise SandboxUnavailable(f"bwrap did not start: {exc}") from None
        finally:
            theirs.close()
        self.control = ours
        self.owner = os.getpid()
        self.lock = threading.Lock()  # one exchange with the template at a time
        self.reader = ours.makefile("rb")
        ready = self.receive(START_S, starting=True)
        assert self.process.stderr is not None
        self.process.stderr.close()
        if ready[0] != "ready":
            self.close()
            raise SandboxUnavailable(str(ready[1]))

    def receive(self, timeout: float, starting: bool = False) -> list[Any]:
        """The template's next message; SandboxUnavailable if it ended or fell silent."""
        self.control.settimeout(timeout)
        try:
            data = self.reader.readline()
        except OSError:
            data = b""
        if not data:
            why = self.stderr() if starting else "the template process ended"
            self.close()
            raise SandboxUnavailable(why)
        return list(json.loads(data))

    def stderr(self) -> str:
        """The first line bwrap or the template wrote, once it has ended."""
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return "the template process did not answer"
        assert self.process.stderr is not None
        return last_line(self.process.stderr.read(4000), self.process.returncode)

    def alive(self) -> bool:
        return self.owner == os.getpid() and self.process.poll() is None

    def spawn(self, limits: Limits) -> Session:
        """A fresh candidate process, locked down to `limits` and pinned to the calling
        thread's `session_cpu` (TemplateGone if the template has ended)."""
        mask = os.sched_getaffinity(0)
        cpu = session_cpu(mask) if PIN else -1
        with self.lock:
            try:
                self.control.sendall(wire.line(["spawn", limits.cpu_s, limits.memory_mb,
                                                cpu]))
                self.control.settimeout(CONTROL_S)
                data, fds, _, _ = socket.recv_fds(self.control, 4096, 2)
                pid = int(json.loads(data)[1])
            except (OSError, ValueError, IndexError):
                data, fds = b"", []
            if len(fds) != 2:
                for fd in fds:
                    os.close(fd)
                self.close()
                raise TemplateGone("the template process ended")
        return Session(self, pid, fds[0], fds[1], limits, cpu, mask)

    def end(self, pid: int) -> tuple[str, float]:
        """Kill a candidate's process if it still runs; how it ended, and its CPU seconds."""
        with self.lock:
            try:
                self.control.sendall(wire.line(["end", pid]))
                ended = self.receive(CONTROL_S)
            except (OSError, SandboxUnavailable):
                return "the sandbox's end (its template was killed)", 0.0
        return str(ended[1]), float(ended[2])

    def close(self) -> None:
        """Hang up: the template exits, and with it its PID namespace (bwrap waits for that);
        killed if it does not."""
        self.reader.close()
        self.control.close()
        try:
            self.process.wait(CLOSE_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def bwrap_path() -> str:
    """bubblewrap's path; SandboxUnavailable where there is none, or no sandbox here."""
    problem = jail.supported()
    path = jail.bwrap()
    if problem or path is None:
        raise SandboxUnavailable(problem or "bubblewrap (bwrap) is not installed")
    return path


def last_line(stderr: bytes, status: int | None) -> str:
    """Why bubblewrap (or the template) ended: the last line it wrote, and its status."""
    lines = stderr[-4000:].decode(errors="replace").strip().splitlines()
    return (lines[-1] if lines else "") + f" (exit status {status})"


@contextlib.contextmanager
def sandbox_checked() -> Iterator[None]:
    """SandboxUnavailable at the end of the block where the sandbox cannot start (no bwrap,
    namespaces refused, no interpreter inside), without starting a template if this process
    has none: a sweep's pool workers start their own, and this process starts its own at its
    first evaluation. The sandbox is started once, with an interpreter that exits at once
    (`jail.probe`), while the block runs (the caller plans its runs meanwhile); what only a
    template finds (its lock-down's self-test) is refused, as SandboxUnavailable, at the
    first evaluation. A block that raises ends the check and lets its error through."""
    if SHARED.current is not None and SHARED.current.alive():
        yield
        return
    try:
        check = subprocess.Popen(jail.probe(bwrap_path(), packages()), stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    except OSError as exc:
        raise SandboxUnavailable(f"bwrap did not start: {exc}") from None
    with check:
        try:
            yield
        except BaseException:
            check.kill()
            raise
        try:
            _, stderr = check.communicate(timeout=START_S)
        except subprocess.TimeoutExpired:
            check.kill()
            raise SandboxUnavailable(f"bwrap did not start within {START_S:g} s") from None
    if check.returncode != 0:
        raise SandboxUnavailable(last_line(stderr, check.returncode))


class Shared:
    """The process's warm template: started on first use, started again in a process forked
    after it (a fork shares the parent's socket, never its template), closed at exit."""

    def __init__(self) -> None:
        self.current: Sandbox | None = None
        os.register_at_fork(after_in_child=self.forget)
        atexit.register(self.forget)

    def get(self) -> Sandbox:
        if self.current is None or not self.current.alive():
            self.forget()
            self.current = Sandbox()
        return self.current

    def forget(self) -> None:
        """Drop the template without talking to it (closing our end of its socket)."""
        if self.current is not None and self.current.owner != os.getpid():
            self.current.reader.close()
            self.current.control.close()
        elif self.current is not None:
            self.current.close()
        self.current = None


SHARED = Shared()


def sandbox() -> Sandbox:
    """This process's template (SandboxUnavailable if it cannot start)."""
    return SHARED.get()


def spawn(limits: Limits) -> Session:
    """A candidate process from this process's template, started again once if it ended."""
    try:
        return sandbox().spawn(limits)
    except TemplateGone:
        SHARED.forget()
        return sandbox().spawn(limits)


class Session:
    """One candidate's process: its pipes (the end we read its replies from, the end we write
    its messages to), and how long it may still make the evaluator wait. `call` sends a
    message and returns the reply, answering the candidate's questions on the way; any failure
    kills the process and raises ContainedFailure. From start to `finish` the thread that
    started it runs on `cpu` only, as the candidate's process does; `finish` (in the same
    thread) gives it back its `mask`.

    Every wait is a poll bounded by what is left of the budget: a read waits for the reply
    (poll, then read); a write is non-blocking and waits only when the pipe is full (a frame
    larger than the pipe's buffer, or a candidate that stopped reading)."""

    def __init__(self, sandbox_: Sandbox, pid: int, fd_in: int, fd_out: int,
                 limits: Limits, cpu: int, mask: set[int]) -> None:
        self.sandbox, self.pid, self.limits = sandbox_, pid, limits
        self.cpu, self.mask = cpu, mask
        self.pinned = cpu >= 0 and mask != {cpu}  # moved off its mask until `finish`
        if self.pinned:
            pin({cpu})
        self.fd_in, self.fd_out = fd_in, fd_out
        os.set_blocking(fd_out, False)
        self.readable = select.poll()
        self.readable.register(fd_in, select.POLLIN)
        self.writable = select.poll()
        self.writable.register(fd_out, select.POLLOUT)
        self.budget = limits.wall_s
        self.woke = time.monotonic()  # when the last wait ended
        self.buffer = b""
        self.ended = False
        self.cpu_s = 0.0  # the process's CPU time, once it has ended
        self.views = wire.ViewSender()
        self.state = wire.StateSender()

    def call(self, message: list[Any],
             answer: Callable[[list[Any]], Any] | None = None) -> list[Any]:
        reply = self.exchange(wire.frame(message), answer)
        if isinstance(reply, bytes):
            self.fail("sent a routing decision where none was asked")
        return reply  # type: ignore[return-value]

    def exchange(self, data: bytes,
                 answer: Callable[[list[Any]], Any] | None = None) -> list[Any] | bytes:
        """Send a framed message; the reply, answering the candidate's questions on the way:
        a JSON reply parsed, a routing decision's fixed record as its bytes (the caller
        decodes it, and refuses it where it asked for something else)."""
        self.send(data)
        for _ in range(MAX_ASKS):
            body = self.receive()
            if body[:1] == DECISION_TAG:
                return body
            reply = self.checked(body)
            if reply[0] != "ask":
                return reply
            if answer is None:
                self.fail(f"asked {shown(reply)} where nothing may be asked")
            self.send(wire.frame(["answer", answer(reply)]))
            self.answered()
        self.fail(f"asked more than {MAX_ASKS} questions in one call")

    def answered(self) -> None:
        """Take the evaluator's time answering a question (read, decoded, answered and sent
        since its last wait ended) from the budget: its work for a candidate is bounded with
        the candidate's own."""
        self.budget -= time.monotonic() - self.woke
        if self.budget <= 0:
            self.fail(f"exceeded its wall-time budget of {self.limits.wall_s:g} s (the "
                      "evaluator's time answering its questions included)")

    def send(self, data: bytes) -> None:
        while data:
            try:
                data = data[os.write(self.fd_out, data):]
            except BlockingIOError:
                if not self.wait(self.writable):
                    self.fail(f"exceeded its wall-time budget of {self.limits.wall_s:g} s "
                              "(it stopped reading)")
            except OSError:
                self.died()

    def receive(self) -> bytes:
        """The next frame's body."""
        buffer = self.buffer
        while True:
            if len(buffer) >= 4:
                size = int.from_bytes(buffer[:4], "little")
                if size > wire.MAX_LINE:
                    self.fail(f"sent {shown(buffer[:40])}, not a reply" if size >= wire.MAX_FRAME
                              else f"sent a message of more than {wire.MAX_LINE} bytes")
                if len(buffer) >= size + 4:
                    self.buffer = buffer[size + 4:]
                    return buffer[4:size + 4]
            if not self.wait(self.readable):
                self.fail(f"exceeded its wall-time budget of {self.limits.wall_s:g} s")
            try:
                chunk = os.read(self.fd_in, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                self.died()
            buffer = self.buffer = buffer + chunk

    def __del__(self) -> None:
        """A session dropped unfinished closes its pipes (as a socket closes when dropped):
        the candidate reads the end and exits."""
        if not getattr(self, "ended", True):
            self.ended = True
            os.close(self.fd_in)
            os.close(self.fd_out)

    def wait(self, poller: select.poll) -> bool:
        """Wait until the pipe is ready (or the candidate ended), its time taken from the
        budget: False if the budget ran out first."""
        started = time.monotonic()
        ready = poller.poll(max(self.budget * 1000, 1))
        self.woke = time.monotonic()
        self.budget -= self.woke - started
        return bool(ready)

    def checked(self, data: bytes) -> list[Any]:
        try:
            reply = wire.parse(data)
        except ValueError as exc:
            self.fail(f"sent something that is not JSON ({exc})")
        if not (isinstance(reply, list) and reply and isinstance(reply[0], str)):
            self.fail(f"sent {shown(reply)}, not a reply")
        return reply

    def died(self) -> NoReturn:
        """The process closed its pipes: how it ended, as the failure."""
        how = self.finish()
        what = ENDINGS.get(how, f"ended ({how})" if how.startswith("exit") else
                           f"crashed with {how}")
        raise ContainedFailure(f"the candidate's process {what} (limits: "
                               f"{self.limits.cpu_s:g} CPU s, {self.limits.memory_mb} MiB)")

    def fail(self, what: str) -> NoReturn:
        self.finish()
        raise ContainedFailure(f"the candidate {what}")

    def finish(self) -> str:
        """End the process (if it runs) and close its pipes; how it ended."""
        if self.ended:
            return "ended"
        self.ended = True
        os.close(self.fd_in)
        os.close(self.fd_out)
        if self.pinned:
            pin(self.mask)
        how, self.cpu_s = self.sandbox.end(self.pid)
        return how

    def close(self) -> str:
        """End the session; what the candidate printed (nothing if it had failed)."""
        if self.ended:
            return ""
        try:
            reply = self.call(["close"])
        except ContainedFailure:
            return ""
        self.finish()
        log = reply[1] if len(reply) == 2 and reply[0] == "log" else ""
        if not isinstance(log, str):
            return ""
        if len(log) > wire.MAX_LOG + 100:  # more than the cell keeps: an escaped candidate's
            return log[:wire.MAX_LOG] + f"\n[{len(log) - wire.MAX_LOG} more characters cut " \
                "by the evaluator]"
        return log


def shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
