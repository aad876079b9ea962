"""The lock-down's native calls through ctypes: what a pure install (no C compiler, or
BLIS_SIMPY_PURE=1: no `blis_simpy.search.lockdown` extension) uses instead. The same functions,
the same errors (OSError with the errno), but ctypes is then loaded in every candidate's
process, and a candidate that gets past the static check can run machine code of its own
through it (docs/security.md, what a pure install does not guarantee)."""

from __future__ import annotations

import ctypes
import os
import signal
from typing import Any

LIBC = ctypes.CDLL(None, use_errno=True)
PRCTL = LIBC.prctl
PRCTL.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong,
                  ctypes.c_ulong)
PERSONALITY = LIBC.personality
PERSONALITY.argtypes = (ctypes.c_ulong,)
MMAP = LIBC.mmap
MMAP.restype = ctypes.c_void_p
MMAP.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                 ctypes.c_long)
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 1, 38, 22, 2
# clone, called with the interpreter's lock held (as os.fork is), by machine.
SYSCALL = ctypes.PyDLL(None, use_errno=True).syscall
SYSCALL.restype = ctypes.c_long
SYS_CLONE = {"x86_64": 56, "aarch64": 220}
CLONE_PARENT = 0x8000
PROT_READ, MAP_PRIVATE, MAP_FIXED, MAP_ANONYMOUS = 1, 0x02, 0x10, 0x20


class SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


def refused(what: str) -> OSError:
    error = ctypes.get_errno()
    return OSError(error, os.strerror(error), what)


def personality(persona: int, /) -> int:
    previous = int(PERSONALITY(persona))
    if previous == -1:
        raise refused("personality")
    return previous


def fork_sibling() -> int:
    ctypes.pythonapi.PyOS_BeforeFork()
    pid = int(SYSCALL(ctypes.c_long(SYS_CLONE[os.uname().machine]),
                      ctypes.c_ulong(CLONE_PARENT | signal.SIGCHLD), ctypes.c_ulong(0),
                      ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)))
    if pid == 0:
        ctypes.pythonapi.PyOS_AfterFork_Child()
        return 0
    error = ctypes.get_errno()
    ctypes.pythonapi.PyOS_AfterFork_Parent()
    if pid < 0:
        raise OSError(error, os.strerror(error), "clone")
    return pid


def die_with_parent(signal: int, /) -> None:
    if PRCTL(PR_SET_PDEATHSIG, signal, None, 0, 0) != 0:
        raise refused("prctl(PR_SET_PDEATHSIG)")


def no_new_privs() -> None:
    if PRCTL(PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0:
        raise refused("prctl(PR_SET_NO_NEW_PRIVS)")


# Each program's buffer and struct sock_fprog, made in the template (`hold`, from
# jail.prepare): made in a candidate's process, before its code, they left its memory
# different from one evaluation to the next (its objects' default reprs alternated).
HELD: dict[bytes, tuple[Any, SockFprog]] = {}


def hold(program: bytes) -> SockFprog:
    """The filter `program` as the kernel reads it (made on first call, kept)."""
    if program not in HELD:
        buffer = ctypes.create_string_buffer(program, len(program))
        HELD[program] = (buffer, SockFprog(len(program) // 8, ctypes.addressof(buffer)))
    return HELD[program][1]


def seccomp(program: bytes, /) -> None:
    if PRCTL(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(hold(program)), 0, 0) != 0:
        raise refused("prctl(PR_SET_SECCOMP)")


def map_zeros(start: int, size: int, /) -> None:
    if MMAP(start, size, PROT_READ, MAP_PRIVATE | MAP_FIXED | MAP_ANONYMOUS, -1, 0) != start:
        raise refused("mmap")
