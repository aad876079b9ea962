"""The candidate's side of the boundary: what runs inside the sandbox (docs/security.md).

`python -m blis_simpy.search.cell 0` is the template: started fresh in the sandbox by the
evaluator (`blis_simpy.search.contain`), it imports what a candidate may use, forks its
zygote, then waits on its control socket. For each evaluation the zygote forks one candidate
process (`zygote`: each from the same memory), which holds nothing but these imports: the
template never sees a candidate (the evaluator sends the source to the candidate's process
directly), so no candidate can see another. The candidate's process locks itself down
(`jail.lock_down`) before it reads the source, then serves the evaluator's calls over its own
pipes until told to close, and answers with what it printed.

The rules a candidate's code lives by at the Python level (the allowed imports, the safe
builtins, each allowed module seen without the modules it imports) are here too; the static
check (`blis_simpy.search.code`) refuses most of what breaks them before anything runs, and
the operating system (`jail`) holds whatever gets past both.
"""

from __future__ import annotations

import array
import builtins
import contextlib
import gc
import importlib
import io
import os
import random
import signal
import socket
import struct
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any, BinaryIO, NoReturn

from blis_simpy.search import jail  # (first: the template withholds ctypes from numpy)

if __name__ == "__main__":  # the template (the evaluator imports this module too)
    jail.withhold_native_code()

from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.schema import load
from blis_simpy.policies import admission, priority, routing, scheduler
from blis_simpy.policies.guard import REQUIRED
from blis_simpy.search import sealed, wire

AXIS_NAMES: dict[str, dict[str, Any]] = {
    "admission": {"AdmissionPolicy": admission.AdmissionPolicy,
                  "AdmissionDecision": admission.AdmissionDecision, "ADMIT": admission.ADMIT},
    "priority": {"PriorityPolicy": priority.PriorityPolicy,
                 "PriorityDecision": priority.PriorityDecision},
    "routing": {"RoutingPolicy": routing.RoutingPolicy,
                "RoutingDecision": routing.RoutingDecision, "argmax": routing.argmax},
    "scheduler": {"InstanceScheduler": scheduler.InstanceScheduler,
                  "BatchDecision": scheduler.BatchDecision,
                  "SchedulerContext": scheduler.SchedulerContext},
}
BASES: dict[str, type] = {"admission": admission.AdmissionPolicy,
                          "priority": priority.PriorityPolicy,
                          "routing": routing.RoutingPolicy,
                          "scheduler": scheduler.InstanceScheduler}
# `operator` is left out: attrgetter and methodcaller reach attributes by string.
ALLOWED_IMPORTS = ("bisect", "collections", "dataclasses", "functools", "heapq", "itertools",
                   "math", "statistics", "typing")
# What the modules with helpers that take attribute names as strings offer a candidate (an
# allow-list; the static check says why the rest is refused: `code.WITHHELD`).
OFFERED = {
    "functools": frozenset({"cache", "cached_property", "cmp_to_key", "lru_cache", "partial",
                            "partialmethod", "reduce", "total_ordering"}),
    "dataclasses": frozenset({"Field", "FrozenInstanceError", "InitVar", "KW_ONLY", "MISSING",
                              "asdict", "astuple", "dataclass", "field", "fields",
                              "is_dataclass", "replace"})}
# Never in any module's view: helpers that evaluate annotation strings with the real builtins.
WITHHELD = frozenset({"get_type_hints", "ForwardRef", "get_annotations"})
# Submodules imported in the template too: a candidate's process opens no file.
PRELOADED = (*ALLOWED_IMPORTS, "collections.abc")
FORBIDDEN_NAMES = frozenset({
    "open", "exec", "eval", "compile", "input", "breakpoint", "globals", "locals", "vars",
    "getattr", "setattr", "delattr", "hash", "id", "memoryview", "help", "exit", "quit",
    "dir"})
SAFE_BUILTINS = {name: getattr(builtins, name) for name in dir(builtins)
                 if not name.startswith("_") and name not in FORBIDDEN_NAMES}
MAX_ERROR = 2000  # characters of an error message sent back


# --- the candidate's Python-level rules ------------------------------------------------------


def guarded_import(name: str, globals_: Any = None, locals_: Any = None,
                   fromlist: Any = (), level: int = 0) -> types.ModuleType:
    """The only `__import__` a candidate gets: the allowed modules, nothing else, each seen
    through `public_view`."""
    if level or name.split(".")[0] not in ALLOWED_IMPORTS:
        raise ImportError(f"import {name} is not allowed in a policy")
    return public_view(builtins.__import__(name, globals_, locals_, fromlist, level))


def public_view(module: types.ModuleType) -> types.ModuleType:
    """A copy of an allowed module without its private names, without the modules it
    imported (`typing.sys`, `dataclasses.inspect`) and without the helpers withheld (`OFFERED`,
    `WITHHELD`): only allowed submodules stay, viewed the same way."""
    view = types.ModuleType(module.__name__)
    offered = OFFERED.get(module.__name__)
    for name, value in vars(module).items():
        if name.startswith("_") or name in WITHHELD \
                or (offered is not None and name not in offered):
            continue
        if isinstance(value, types.ModuleType):
            if value.__name__.split(".")[0] not in ALLOWED_IMPORTS \
                    or not value.__name__.startswith(module.__name__ + "."):
                continue
            value = public_view(value)
        setattr(view, name, value)
    return view


def install(source: str, axis: str, entry: str, label: str) -> type:
    """Run the source as a fresh module (safe builtins, the axis's types in scope), registered
    as `blis_candidate` (dataclasses look their module up), and return its class `entry`."""
    module = types.ModuleType("blis_candidate")
    namespace = module.__dict__
    namespace["__builtins__"] = {**SAFE_BUILTINS, "__build_class__": builtins.__build_class__,
                                 "__import__": guarded_import}
    namespace.update(AXIS_NAMES[axis])
    sys.modules[module.__name__] = module
    exec(compile(source, f"<candidate {label}>", "exec"), namespace)
    cls = namespace.get(entry)
    base = BASES[axis]
    if not isinstance(cls, type) or not issubclass(cls, base):
        raise TypeError(f"{entry} is not a class deriving from {base.__name__}")
    required = REQUIRED.get(base)
    if required is not None:
        method = required.partition("(")[0]
        if getattr(cls, method, None) is getattr(base, method):
            raise TypeError(f"{entry} does not define {required}, which a {base.__name__} "
                            "must")
    return cls


# --- the template --------------------------------------------------------------------------


def main(argv: list[str]) -> None:
    """The template: import everything a candidate may use, prove a candidate's process can be
    locked down, fork the zygote, say ready, then have it fork candidates' processes on request
    until the evaluator hangs up."""
    jail.fixed_addresses("blis_simpy.search.cell", argv)
    # The control socket (the template's standard input) moved to the lowest free
    # descriptor, 3: the template's descriptors, and so its candidates' memory, are then the
    # same whatever the evaluator had open (the descriptors' numbers showed in candidates'
    # addresses).
    control = socket.socket(fileno=os.dup(int(argv[0])))
    for name in PRELOADED:
        importlib.import_module(name)
    sealed.seal(tuple({type(base) for base in BASES.values()}))
    jail.prepare()  # (the filter made once here, not in every candidate's process)
    # What the template holds is out of every candidate's collections: a collection would
    # walk it (and write to each object's header, copying the pages the fork shares).
    gc.freeze()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # nothing the template or a candidate prints goes anywhere
        os.dup2(devnull, fd)
    os.close(devnull)
    problem = self_test()
    if problem:
        control.sendall(wire.line(["broken", problem]))
        return
    zygote, link = start_zygote()
    reader = control.makefile("rb")
    control.sendall(wire.line(["ready"]))
    for data in reader:
        answer(control, zygote, link, data)


def answer(control: socket.socket, zygote: int, link: socket.socket, data: bytes) -> None:
    """One request of the evaluator's: have the zygote fork a candidate's process, or end
    one."""
    message = wire.parse(data)
    if message[0] == "spawn":
        spawn(control, zygote, link, message[1:])
    elif message[0] == "end":
        control.sendall(wire.line(["ended", *end(int(message[1]))]))


def start_zygote() -> tuple[int, socket.socket]:
    """Fork the zygote, the process every candidate's process is forked from: the template's
    end of the pipe that wakes it, and of the link its candidates' processes talk over
    (which tells the template the pid of the process that writes to it)."""
    woken, wake = os.pipe()
    link, candidates = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    link.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    if os.fork() == 0:
        os.close(wake)
        link.close()
        zygote(woken, candidates.fileno())
    os.close(woken)
    candidates.close()
    return wake, link


def zygote(woken: int, link: int) -> NoReturn:
    """Fork a candidate's process each time the template asks (a byte on `woken`), until the
    template ends. The loop keeps nothing from one candidate to the next (each object
    it makes is freed before the next of its size is made), so this process's memory is the
    same at every fork, and so is every candidate's at its start: a candidate's default
    reprs (its objects' addresses) never depend on what ran before it. (A template that forks
    candidates itself, between requests that change its memory, left its allocator's free
    lists in one of two orders, so every other candidate saw other addresses.)

    Each is forked as the template's child (`jail.fork_sibling`), which reaps it and reports
    its CPU time and how it ended."""
    while os.read(woken, 1):
        if jail.fork_sibling() == 0:
            try:
                candidate(link)
            finally:  # (never back into this loop)
                os._exit(1)
    os._exit(0)


def self_test() -> str:
    """Lock a throwaway process down and check that it can no longer open a file: why not,
    or ""."""
    pid = os.fork()
    if pid == 0:
        try:
            jail.lock_down(5, 64)
        except BaseException:
            os._exit(2)
        try:
            os.open("/proc/self/statm", os.O_RDONLY)
        except PermissionError:
            os._exit(0)
        os._exit(1)
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    return {0: "", 1: "a locked-down process could still open files",
            2: "the kernel refused the seccomp filter or the limits"}.get(
        status, f"the self-test process ended with status {status}")


def spawn(control: socket.socket, zygote: int, link: socket.socket,
          request: list[Any]) -> None:
    """Have the zygote fork a candidate's process for `request` (its CPU seconds, memory MiB
    and CPU, -1: not pinned); hand the evaluator its pid and its pipes' other ends (the end
    it reads the replies from, the end it writes the messages to), which the candidate's
    process sends here."""
    link.sendall(wire.line([os.getpid(), *request]))
    os.write(zygote, b"!")
    pid, fds = handed_over(link)
    socket.send_fds(control, [wire.line(["spawned", pid])], fds)
    for fd in fds:
        os.close(fd)


CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid
FD = struct.Struct("i")


def handed_over(link: socket.socket) -> tuple[int, list[int]]:
    """The pid of the candidate's process that sent its pipes' ends over the `link`, and the
    ends: the kernel says who sent them (SO_PASSCRED), so the candidate's process sends the
    same bytes whatever its pid."""
    _, ancillary, _, _ = link.recvmsg(1, socket.CMSG_SPACE(2 * FD.size)
                                      + socket.CMSG_SPACE(CREDENTIALS.size))
    pid, fds = -1, []
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds = list(array.array("i", data[:len(data) - len(data) % FD.size]))
        elif level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            pid = CREDENTIALS.unpack(data[:CREDENTIALS.size])[0]
    return pid, fds


def end(pid: int) -> list[Any]:
    """Kill a candidate's process (if it still runs): how it ended, and the CPU seconds it
    used."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    _, status, usage = os.wait4(pid, 0)
    cpu = usage.ru_utime + usage.ru_stime
    if os.WIFSIGNALED(status):
        return [signal.Signals(os.WTERMSIG(status)).name, cpu]
    return [f"exit {os.WEXITSTATUS(status)}", cpu]


# --- a candidate's process -----------------------------------------------------------------


def candidate(link: int) -> NoReturn:
    """Take the template's request over the `link`, make this process's pipes and hand their
    other ends to the template; then tie this process's life to the template's, lock down,
    and serve the evaluator until it closes. Every step is the same whatever this process's
    pid, so every candidate starts from the same memory."""
    os.closerange(3, link)
    os.closerange(link + 1, 1 << 16)
    template, cpu_s, memory_mb, cpu = wire.parse(os.read(link, 4096))
    to_candidate, to_evaluator = os.pipe(), os.pipe()
    fd_in, fd_out = to_candidate[0], to_evaluator[1]
    with socket.socket(fileno=link) as handover:
        socket.send_fds(handover, [b"!"], [to_evaluator[0], to_candidate[1]])
    os.close(to_evaluator[0])
    os.close(to_candidate[1])
    if cpu >= 0:
        with contextlib.suppress(OSError):  # (a CPU outside the sandbox's set: anywhere)
            os.sched_setaffinity(0, {cpu})
    reader = os.fdopen(fd_in, "rb", buffering=1 << 16, closefd=False)
    try:
        jail.die_with_parent(template)
        random.seed(0)  # the global generator a standard module may reach: the same everywhere
        jail.lock_down(cpu_s, memory_mb)
    except BaseException as exc:
        os.write(fd_out, wire.body(["error", f"the sandbox could not lock down: {exc}"]))
        os._exit(3)
    Server(fd_out).serve(reader)
    os._exit(0)


class BoundedLog(io.TextIOBase):
    """Where a candidate's print() goes: the first `wire.MAX_LOG` characters, then a count."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.kept = 0
        self.dropped = 0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        text = str(text)
        room = wire.MAX_LOG - self.kept
        if room > 0:
            self.parts.append(text[:room])
            self.kept += min(room, len(text))
        self.dropped += max(0, len(text) - max(room, 0))
        return len(text)

    def text(self) -> str:
        more = f"\n[{self.dropped} more characters not kept]" if self.dropped else ""
        return "".join(self.parts) + more


class Snapshots(list):  # type: ignore[type-arg]
    """The routable instances' snapshots for one routing call; `refresh()` asks the evaluator
    to re-read every field now, as `blis_simpy.cluster.snapshot.Snapshots.refresh` does.
    Each server makes its own subclass with its `ask` (`asking`): a call's list is then made
    by the type's C constructor, not an interpreted `__init__`."""

    ask: Callable[..., Any]

    @staticmethod
    def asking(ask: Callable[..., Any]) -> type[Snapshots]:
        return type("Snapshots", (Snapshots,), {"ask": staticmethod(ask)})

    def refresh(self) -> None:
        self.clear()
        wire.snapshots_in(self.ask("refresh"), self)


class FleetView:
    """What an admission candidate's `state.instance_snapshots()` reads: the snapshots, asked of
    the evaluator when the candidate calls it (an admission that never looks costs nothing)."""

    def __init__(self, ask: Callable[..., Any]) -> None:
        self.ask = ask

    def admission_snapshots(self, clock: int) -> list[Any]:
        return [wire.snapshot_in(f) for f in self.ask("instance_snapshots")]


class ShadowView:
    """The router's shadow KV model, read through the evaluator: the current request's
    expected hits on every routable instance come with the call, anything else is asked."""

    def __init__(self, ask: Callable[..., Any]) -> None:
        self.ask = ask
        self.hashes: tuple[int, ...] = ()
        self.hits: dict[str, int] = {}

    def expected_hit(self, instance: str, hashes: Any) -> int:
        if hashes is self.hashes or hashes == self.hashes:
            hit = self.hits.get(instance)
            if hit is not None:
                return hit
        return int(self.ask("expected_hit", str(instance), [int(h) for h in hashes]))


class Server:
    """One candidate's process: its class, its policy objects (one per `new`), the mirrors of
    what the evaluator sends, and its printed output."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.log = BoundedLog()
        self.cls: type | None = None
        self.axis = ""
        self.objects: list[Any] = []
        self.views = wire.ViewMirror()
        self.state = wire.StateMirror(self.ask)
        self.state.state.fleet_view = FleetView(self.ask)
        self.shadow: ShadowView | None = None
        self.reader: BinaryIO | None = None
        self.snapshots = Snapshots.asking(self.ask)

    def serve(self, reader: BinaryIO) -> None:
        self.reader = reader
        sys.stdout = sys.stderr = self.log
        while (message := wire.read_frame(reader)) is not None:
            if message[0] == "close":
                self.send(wire.body(["log", self.log.text()]))
                return
            self.send(self.handle(message))

    def send(self, data: bytes) -> None:
        written = os.write(self.fd, data)
        while written < len(data):  # (a reply larger than the pipe's buffer)
            data = data[written:]
            written = os.write(self.fd, data)

    def ask(self, *question: Any) -> Any:
        """A question to the evaluator in the middle of a call (snapshot refresh, shadow KV
        lookups); its answer."""
        self.send(wire.body(["ask", *question]))
        assert self.reader is not None
        message = wire.read_frame(self.reader)
        if message is None:
            os._exit(0)
        return message[1]

    def handle(self, message: list[Any]) -> bytes:
        """The reply to one message, encoded."""
        kind = message[0]
        try:
            if kind == "route":  # (the usual call: its fields read by `route` itself)
                return self.route(self.objects[message[1]], message)
            if kind == "load":
                return wire.body(self.load(*message[1:]))
            if kind == "new":
                return wire.body(self.new(message[1]))
            return HANDLERS[kind](self, self.objects[message[1]], *message[2:])
        except ScenarioError as exc:
            return wire.body(["error", str(exc)[:MAX_ERROR]])
        except Exception as exc:  # the candidate's code raised: its type and message
            return wire.body(["raised", type(exc).__name__, described(exc)])

    def load(self, source: str, axis: str, entry: str, label: str) -> list[Any]:
        try:
            self.cls = install(source, axis, entry, label)
        except Exception as exc:
            return ["error", f"{type(exc).__name__}: {described(exc)}"]
        self.axis = axis
        return ["ok"]

    def new(self, params: Mapping[str, Any]) -> list[Any]:
        """One policy object: built as the registry builds a user class (its `Params`
        dataclass, if any, loaded from the parameters), with the class attributes the
        engine reads."""
        cls = self.cls
        assert cls is not None
        params_cls = getattr(cls, "Params", None)
        value = load(params_cls, params, f"policies.{self.axis}.params") \
            if params_cls is not None else dict(params)
        try:
            obj = cls(value)
        except Exception as exc:
            return ["error", f"{cls.__name__}({value!r:.120}) raised {type(exc).__name__}: "
                    f"{described(exc)}"]
        self.objects.append(obj)
        reads_shadow = bool(getattr(obj, "reads_shadow_kv", False))
        if reads_shadow and self.shadow is None:
            self.shadow = ShadowView(self.ask)
            self.state.shadow_kv = self.shadow
        attributes = {"name": str(getattr(obj, "name", "custom"))[:wire.MAX_TEXT],
                      "reads_shadow_kv": reads_shadow,
                      "routes_pd": bool(getattr(obj, "routes_pd", False)),
                      "ages": bool(getattr(obj, "ages", True)),
                      "uses_priority": bool(getattr(obj, "uses_priority", False)),
                      "order_key": getattr(obj, "order_key", None) is not None,
                      "make_batch": getattr(obj, "make_batch", None) is not None,
                      "on_request_arrival": getattr(obj, "on_request_arrival", None) is not None}
        return ["ok", len(self.objects) - 1, attributes]

    # -- the calls, one per policy method ---------------------------------------------------

    def decide(self, obj: Any, view: Any, delta: list[Any] | tuple[()], clock: int) -> bytes:
        out = obj.decide(self.views.into(view), self.state.apply(delta), clock)
        if not isinstance(out, admission.AdmissionDecision):
            return wire.body(bad(out))
        return plain(["ok", out.action, out.reason, out.delay_us], out)

    def compute(self, obj: Any, view: Any, delta: list[Any] | tuple[()] | None,
                clock: int) -> bytes:
        state = None if delta is None else self.state.apply(delta)
        out = obj.compute(self.views.into(view), state, clock)
        if isinstance(out, priority.PriorityDecision):  # the score and its hints (seed G.1)
            hints = out.hints
            return plain(["ok", out.score, dict(hints) if isinstance(hints, Mapping)
                          else hints], out)
        return plain(["ok", out], out)

    def route(self, obj: Any, message: list[Any]) -> bytes:
        """`["route", handle, view, priority, snapshots, delta, clock, hits]`."""
        _, _, view, priority_, snapshots, delta, clock, hits = message
        req = wire.view_in(view)  # (whole, and not kept: each request is routed once)
        taken = self.snapshots()
        wire.snapshots_in(snapshots, taken)
        state = self.state.apply(delta) if delta else self.state
        if hits is not None and self.shadow is not None:
            self.shadow.hashes = req.prefix_hashes
            self.shadow.hits = {s.id: hit for s, hit in zip(taken, hits, strict=True)}
        out = obj.route(req, priority_, taken, state, clock)
        record = wire.route_reply(out)  # the usual decision: the fixed record
        if record is not None:
            return record
        if not isinstance(out, routing.RoutingDecision):
            return wire.body(bad(out))
        breakdown = None if out.breakdown is None else (
            dict(out.breakdown) if isinstance(out.breakdown, Mapping) else out.breakdown)
        return plain(["ok", out.target, out.reason, out.scores, breakdown, out.filtered,
                      out.prefill, out.decode], out)

    def order_key(self, obj: Any, view: Any, priority_: float) -> bytes:
        out = obj.order_key(self.views.into(view), priority_)
        return wire.body(bad(out)) if isinstance(out, list) else plain(["ok", out], out)

    def victim(self, obj: Any, views: list[Any], priorities: list[float]) -> bytes:
        out = obj.victim([self.views.into(v) for v in views], priorities)
        return plain(["ok", out], out)

    def make_batch(self, obj: Any, ctx: list[Any]) -> bytes:
        out = obj.make_batch(wire.context_in(ctx, self.views))
        if not isinstance(out, scheduler.BatchDecision):
            return wire.body(bad(out))
        chunks = out.chunk_sizes  # (pairs: JSON keys are strings)
        return plain(["ok", out.to_schedule, [[i, n] for i, n in chunks.items()]
                      if isinstance(chunks, Mapping) else chunks, out.victims], out)

    def on_request_arrival(self, obj: Any, view: Any, ctx: list[Any]) -> bytes:
        obj.on_request_arrival(self.views.into(view), wire.context_in(ctx, self.views))
        return wire.body(["ok"])


HANDLERS: dict[str, Callable[..., bytes]] = {
    "decide": Server.decide, "compute": Server.compute,
    "order_key": Server.order_key, "victim": Server.victim, "make_batch": Server.make_batch,
    "on_request_arrival": Server.on_request_arrival}


def plain(reply: list[Any], out: object) -> bytes:
    """The reply, encoded, if plain data can carry it (tuples become lists); else what was
    returned, described."""
    try:
        return wire.body(reply)
    except (TypeError, ValueError, RecursionError) as exc:
        return wire.body(bad(out, exc))


def bad(out: object, why: BaseException | None = None) -> list[Any]:
    """A return value that is not a decision (or one plain data cannot carry: `why`), its repr,
    for the evaluator's error message."""
    try:
        text = repr(out)[:200]
    except Exception as exc:
        text = f"<unprintable {type(out).__name__}: {type(exc).__name__}>"
    if why is not None:
        text += f" (cannot be sent as plain data: {type(why).__name__}: {described(why)[:100]})"
    return ["bad", text[:320]]


def described(exc: BaseException) -> str:
    try:
        return str(exc)[:MAX_ERROR]
    except Exception:
        return "<unprintable>"


if __name__ == "__main__":
    main(sys.argv[1:])
    # (no interpreter finalization: nothing here needs it, and the evaluator's pool workers
    # wait for their templates' end when they shut down)
    os._exit(0)
