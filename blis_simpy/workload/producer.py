"""A large synthetic workload drawn and hashed in a second process, on the machine's second
core, while the simulation runs.

Drawing a synthetic workload's requests and hashing their blocks does not depend on the
simulation: it is a fixed function of the scenario, about a sixth of a compat run's CPU. With a
second CPU free, a forked child (the producer) draws and hashes the requests a chunk at a time
and streams each chunk through a pipe in a compact columnar form: five int64 columns (index,
arrival, prompt and output lengths, block-hash count) and all the chunk's block hashes as one
uint64 array. The simulation's `release` process (`workload/release.py`) reads the requests
from an iterator as before; only where they are computed changes: the parent makes each
chunk's `Request` objects again from the columns (`release.rebuilt`, compiled), the same
requests, field for field, as the in-process source makes.

The pipe is bounded (1 MiB): a producer ahead of the simulation blocks on its write, so memory
stays flat however long the workload. A producer that fails raises its error in the parent
(the same exception, with the producer's traceback as a note); one that dies raises
ProducerError, never a short workload. The parent reaps it when the workload ends, when the
run ends (`Simulation.run` calls `stopped`), when it is collected, at exit, and on SIGTERM;
the child dies with its parent (PR_SET_PDEATHSIG) and ignores SIGINT (the parent stops it).

Used only when it pays (`wanted`): a distribution workload of THRESHOLD requests or more, on
Linux, with more than one CPU in the process's affinity mask (a pinned sandbox session has
one), from a process with no other thread (fork copies only the calling thread) that is not a
pool worker (a sweep's workers already use the cores); never for a prepared workload (a
policy search draws it once, in process). BLIS_SIMPY_PRODUCER=0 turns it off, =1 forces it on
whatever the size and CPU count (tests).
"""

from __future__ import annotations

import contextlib
import os
import signal
import struct
import sys
import threading
import weakref
from collections.abc import Iterator
from types import FrameType
from typing import BinaryIO

import numpy as np

from blis_simpy.config.scenario import Scenario
from blis_simpy.config.workload import DistributionWorkload
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.hashing import keys_of
from blis_simpy.core.request import Request
from blis_simpy.workload.prehash import Scratch, chain_arrays
from blis_simpy.workload.release import rebuilt
from blis_simpy.workload.synthetic import compat_drawn, native_requests

ENV = "BLIS_SIMPY_PRODUCER"  # 0: never; 1: whenever the platform allows; unset: when it pays
OFF = ("0", "off", "false", "no")
ON = ("1", "on", "true", "yes")
THRESHOLD = 5_000  # requests: below, the fork and its copied pages cost about what it saves
CHUNK_TOKENS = 1 << 18  # tokens hashed at a time (as `source.hashed`): ~340 bench requests
FIRST_TOKENS = 1 << 13  # the first chunk's: the run waits for it (then each chunk doubles)
PIPE_BYTES = 1 << 20  # how far ahead the producer may run (a few chunks)

HEADER = struct.Struct("<4sqq")  # kind, requests (or payload bytes), block hashes
CHUNK, DONE, FAIL = b"REQS", b"DONE", b"FAIL"
COLUMNS = 5  # index, arrival, input_len, output_len, hash count


class ProducerError(RuntimeError):
    """The workload's producer process ended before its last request."""


def wanted(requests: int) -> bool:
    """Whether a distribution workload of `requests` requests is drawn in a producer."""
    setting = os.environ.get(ENV, "").strip().lower()
    if setting in OFF:
        return False
    if setting and setting not in ON:
        raise ScenarioError(ENV, f"{setting!r} is not a setting",
                            f"{', '.join(OFF)} (never), {', '.join(ON)} (whenever the "
                            "platform allows) or unset (when it pays)")
    if not (sys.platform.startswith("linux") and hasattr(os, "sched_getaffinity")):
        return False
    if threading.active_count() > 1 or not main_thread():
        return False  # a fork copies only this thread: another's locks would stay held
    worker = sys.modules.get("multiprocessing")
    if worker is not None and worker.parent_process() is not None:
        return False  # a pool's worker: its siblings use the other cores
    if setting in ON:
        return True
    return requests >= THRESHOLD and len(os.sched_getaffinity(0)) > 1


def main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


LIVE: weakref.WeakSet[Producer] = weakref.WeakSet()  # started and not yet reaped
_TERM_INSTALLED = False


class Child:
    """The producer's process id (None once reaped) and the parent's end of its pipe."""

    __slots__ = ("pid", "reader")

    def __init__(self, pid: int, reader: BinaryIO) -> None:
        self.pid: int | None = pid
        self.reader = reader

    def end(self) -> None:
        """Kill the process if it is not reaped yet, reap it, close the pipe."""
        pid, self.pid = self.pid, None
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        if not self.reader.closed:
            self.reader.close()


class Producer:
    """A forked process drawing and hashing a distribution workload's requests; `requests()`
    yields them in order (once), `stop()` ends and reaps the process (idempotent; also done
    when the Producer is collected, at exit, and on SIGTERM)."""

    def __init__(self, scenario: Scenario, reference_draws: bool) -> None:
        read_fd, write_fd = os.pipe()
        try:
            import fcntl

            fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        except (ImportError, AttributeError, OSError):  # the default 64 KiB is enough
            pass
        others = [p.fd for p in LIVE]
        parent = os.getpid()
        try:
            pid = os.fork()
        except OSError:
            os.close(read_fd)
            os.close(write_fd)
            raise
        if pid == 0:  # the child: never returns
            os.close(read_fd)
            for fd in others:
                os.close(fd)
            serve(write_fd, scenario, reference_draws, parent)
        os.close(write_fd)
        self.fd: int = read_fd
        self.child = Child(pid, os.fdopen(read_fd, "rb", buffering=1 << 16))
        self.stop = weakref.finalize(self, self.child.end)  # stop(): end it, once
        LIVE.add(self)
        on_term()

    @property
    def pid(self) -> int | None:
        return self.child.pid

    def requests(self) -> Iterator[Request]:
        try:
            while True:
                kind, count, hashes = HEADER.unpack(self.read(HEADER.size))
                if kind == DONE:
                    break
                if kind == FAIL:
                    raise self.failure(self.read(count))
                assert kind == CHUNK, kind
                payload = self.read(8 * (COLUMNS * count + hashes))
                columns = np.frombuffer(payload, np.int64, COLUMNS * count).reshape(COLUMNS,
                                                                                      count)
                chains = np.frombuffer(payload, np.uint64, hashes, 8 * COLUMNS * count)
                index, arrival, input_len, output_len, counts = columns.tolist()
                yield from rebuilt(index, arrival, input_len, output_len, counts,
                                   chains.tolist(), keys_of(chains))
        finally:
            self.stopped()

    def stopped(self) -> None:
        self.stop()
        LIVE.discard(self)
        if not LIVE:
            off_term()

    def read(self, size: int) -> bytes:
        data = self.child.reader.read(size)
        if len(data) < size:
            raise ProducerError(f"the workload producer (pid {self.pid}) ended before its "
                                f"last request: {self.ended()}")
        return data

    def ended(self) -> str:
        """How the producer ended, once it has (it closed its end of the pipe): reaped."""
        pid, self.child.pid = self.child.pid, None
        if pid is None:
            return "already stopped"
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):
            number = os.WTERMSIG(status)
            return f"killed by signal {number} ({signal.Signals(number).name})"
        return f"exit status {os.waitstatus_to_exitcode(status)}"

    def failure(self, payload: bytes) -> BaseException:
        """The producer's error, raised in the parent: the exception itself when it can be
        sent, with the producer's traceback as a note; else a ProducerError with both."""
        import pickle

        status = self.ended()
        text, exc = pickle.loads(payload)
        where = f"in the workload producer process ({status}):\n{text}"
        if isinstance(exc, BaseException):
            exc.add_note(where)
            return exc
        return ProducerError(f"the workload producer failed {where}")


def serve(fd: int, scenario: Scenario, reference_draws: bool, parent: int) -> None:
    """The producer's whole life: its requests' chunks written to `fd`, then DONE (or FAIL
    and the error); it exits without running the parent's exit handlers."""
    code = 1
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the parent stops us
        die_with_parent(parent)
        for frame in frames(scenario, reference_draws):
            write_all(fd, frame)
        write_all(fd, HEADER.pack(DONE, 0, 0))
        code = 0
    except BaseException as exc:  # sent to the parent, which raises it
        import pickle
        import traceback

        try:
            text = traceback.format_exc()
            try:
                payload = pickle.dumps((text, exc))
            except Exception:
                payload = pickle.dumps((text, None))
            write_all(fd, HEADER.pack(FAIL, len(payload), 0) + payload)
        except BaseException:  # the parent is gone (or stopped reading)
            pass
    finally:
        os._exit(code)


def frames(scenario: Scenario, reference_draws: bool) -> Iterator[bytes]:
    """The workload's requests a chunk at a time, each chunk's frame: its header, its
    columns, its block hashes. The first chunks are small (the run waits for the first),
    then CHUNK_TOKENS each."""
    batch: list[Request] = []
    parts: list[tuple[np.ndarray, ...]] = []
    size, limit = 0, min(FIRST_TOKENS, CHUNK_TOKENS)
    scratch = Scratch()
    block_size = scenario.engine.block_size
    for req, pieces in drawn(scenario, reference_draws):
        batch.append(req)
        parts.append(pieces)
        size += req.input_len + req.output_len
        if size >= limit:
            yield frame(batch, parts, block_size, scratch)
            batch, parts, size, limit = [], [], 0, min(2 * limit, CHUNK_TOKENS)
    if batch:
        yield frame(batch, parts, block_size, scratch)


def drawn(scenario: Scenario, reference_draws: bool
          ) -> Iterator[tuple[Request, tuple[np.ndarray, ...]]]:
    """The distribution workload's requests with the arrays their sequences are made of."""
    workload = scenario.workload
    assert isinstance(workload, DistributionWorkload)
    seed, horizon = scenario.workload_seed, scenario.horizon_us
    if reference_draws:
        yield from compat_drawn(workload, seed, horizon)
        return
    for req in native_requests(workload, seed, horizon):
        assert req.tokens is not None
        yield req, (req.tokens,)


def frame(batch: list[Request], parts: list[tuple[np.ndarray, ...]], block_size: int,
          scratch: Scratch) -> bytes:
    chains, fulls = chain_arrays(parts, block_size, scratch)
    columns = np.array([[r.index for r in batch], [r.arrival for r in batch],
                        [r.input_len for r in batch], [r.output_len for r in batch], fulls],
                       dtype=np.int64)
    return (HEADER.pack(CHUNK, len(batch), len(chains)) + columns.tobytes()
            + chains.astype(np.uint64, copy=False).tobytes())


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def die_with_parent(parent: int) -> None:
    """PR_SET_PDEATHSIG: the kernel kills this process when its parent dies (SIGKILL of
    the parent included)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the call
        os._exit(1)


def stop_all() -> None:
    for producer in list(LIVE):
        producer.stopped()


def on_term() -> None:
    """While a producer runs, a SIGTERM left at its default stops and reaps the producers
    first, then ends this process as the default would."""
    global _TERM_INSTALLED
    if _TERM_INSTALLED or not main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, terminated)
        _TERM_INSTALLED = True


def off_term() -> None:
    global _TERM_INSTALLED
    if _TERM_INSTALLED and main_thread():
        if signal.getsignal(signal.SIGTERM) is terminated:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _TERM_INSTALLED = False


def terminated(signum: int, frame: FrameType | None) -> None:
    stop_all()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
