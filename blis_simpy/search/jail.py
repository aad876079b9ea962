"""The operating system's half of the boundary around candidate code: the bubblewrap command
that starts the sandbox, and the limits a candidate's process puts on itself before it runs a
line of candidate code (docs/security.md).

The sandbox (`command`) is a fresh interpreter, never a fork of the evaluator: new user, PID,
network, IPC and UTS namespaces, an empty environment (but a fixed hash seed), no file system
but the interpreter and the packages it imports, read-only, and a fresh /proc and /dev. It
lives as long as its control socket: when the process that started it ends (however it
ends, SIGKILL included), the template reads the end of the socket and exits. The template is
its PID namespace's init (`--as-pid-1`: no bwrap reaper there waits for its orphans), so the
kernel then kills everything else in the namespace, a candidate that spins and one blocked on
a lock for ever alike; and each candidate's process dies with the template
(`die_with_parent`). (Not bwrap's --die-with-parent: that follows the thread that started
it, and evaluations run in threads.)

A candidate's process (`lock_down`) then drops to: no core dumps, no files written, a CPU-time
and an address-space limit, no new privileges, and a seccomp filter that lets through only
what a running interpreter needs to compute and to talk over its one socket (read, write,
memory, exit): every other system call (open, socket, fork, exec, kill, clock_gettime,
getrandom, getpid, signal handlers, ...) fails with EPERM; before it, every clock is stopped
(`withdraw_clock`: the vDSO's clock data zeroed). The native calls this takes are a small C
extension's (`lockdown.c`, built by setup.py), so no candidate's process has ctypes to run
machine code of its own (`withhold_native_code`); a pure install makes them through ctypes
(`ctypes_lockdown`), and then does not guarantee that (docs/security.md).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import math
import os
import resource
import signal
import struct
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (the template imports this module: nothing it does not need)
    from pathlib import Path

try:  # the lock-down's native calls: the C extension setup.py builds (lockdown.c)
    from blis_simpy.search import lockdown as native
    PURE = False
except ImportError:  # a pure install: the same calls through ctypes (docs/security.md)
    from blis_simpy.search import ctypes_lockdown as native  # type: ignore[no-redef]
    PURE = True
# What runs machine code of one's own: never loaded in the sandbox (`withhold_native_code`).
NATIVE_CODE = ("ctypes", "_ctypes")

# Environment inside the sandbox: nothing of the caller's, a fixed hash seed (a set of strings
# iterates in the same order in every sandbox), one BLAS thread (nothing runs in the
# background of a process that forks candidates).
ENVIRONMENT = {"PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1",
               "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "LC_ALL": "C.UTF-8"}
# The system's own libraries (merged-/usr systems link /lib and /bin into /usr).
SYSTEM = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin")
PYTHON_FLAGS = ("-S", "-s", "-B")  # no site-packages scan, no user site, no bytecode written
INSTALL = "apt-get install bubblewrap (Debian, Ubuntu), dnf install bubblewrap (Fedora)"


def bwrap() -> str | None:
    """The bubblewrap executable, or None."""
    import shutil  # (the evaluator's only: the template does not import it)

    return shutil.which("bwrap")


def command(bwrap_path: str, module: str, packages: Sequence[Path]) -> list[str]:
    """The command line that runs `python -m module 0` in the sandbox with `packages` (the
    folders of the packages it imports, and of their bundled libraries) readable; its
    standard input (descriptor 0) is the control socket."""
    return sandboxed(bwrap_path, packages, "-m", module, "0")


def probe(bwrap_path: str, packages: Sequence[Path]) -> list[str]:
    """The command line that starts the same sandbox and an interpreter in it that exits at
    once: whether the sandbox can start here, at a tenth of a template's cost."""
    return sandboxed(bwrap_path, packages, "-c", "")


def sandboxed(bwrap_path: str, packages: Sequence[Path], *arguments: str) -> list[str]:
    """bubblewrap's command line for the sandbox, running the interpreter with
    `arguments`."""
    python = os.path.realpath(sys.executable)
    args = [bwrap_path, "--unshare-user", "--unshare-pid", "--as-pid-1", "--unshare-net",
            "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try", "--uid", "65534", "--gid", "65534",
            "--hostname", "sandbox", "--new-session", "--clearenv",
            "--chdir", "/"]
    for path in SYSTEM:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in dict.fromkeys([sys.base_prefix, *map(str, packages)]):
        if not path.startswith("/usr/"):
            args += ["--ro-bind", path, path]
    parents = dict.fromkeys(str(p.parent) for p in packages)  # (a `.libs` folder's: the same)
    for name, value in {**ENVIRONMENT, "PYTHONPATH": os.pathsep.join(parents)}.items():
        args += ["--setenv", name, value]
    return [*args, "--proc", "/proc", "--dev", "/dev", "--remount-ro", "/",
            python, *PYTHON_FLAGS, *arguments]


# --- the candidate's own limits ----------------------------------------------------------------

ADDR_NO_RANDOMIZE, PERSONALITY_QUERY = 0x0040000, 0xFFFFFFFF
# Classic BPF over struct seccomp_data {int nr; u32 arch; u64 ip; u64 args[6]}.
LOAD_WORD, JUMP_EQ, JUMP_GE, RETURN = 0x20, 0x15, 0x35, 0x06
ALLOW, KILL, ERRNO_EPERM = 0x7FFF0000, 0x80000000, 0x00050000 | 1
# The system calls a candidate's interpreter makes while it computes and answers: its socket
# (read, write, close), memory (mmap and friends, brk, madvise, futex for the allocator's
# locks), returning from a signal, and exit. Per architecture: (AUDIT_ARCH, {name: number}).
SYSCALLS: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (0xC000003E, {"read": 0, "write": 1, "close": 3, "mmap": 9, "mprotect": 10,
                            "munmap": 11, "brk": 12, "rt_sigreturn": 15, "mremap": 25,
                            "madvise": 28, "exit": 60, "futex": 202, "exit_group": 231}),
    "aarch64": (0xC00000B7, {"read": 63, "write": 64, "close": 57, "mmap": 222,
                             "mprotect": 226, "munmap": 215, "brk": 214, "rt_sigreturn": 139,
                             "mremap": 216, "madvise": 233, "exit": 93, "futex": 98,
                             "exit_group": 94}),
}
X32_BIT = 0x40000000  # x86_64's x32 system calls: the same numbers with this bit set


def supported() -> str:
    """Why this machine cannot lock a candidate's process down, or ""."""
    if sys.platform != "linux":
        return f"the sandbox needs Linux (this is {sys.platform})"
    if architecture() not in SYSCALLS:
        return (f"the sandbox's system call filter knows x86_64 and aarch64, not "
                f"{architecture()}")
    return ""


def architecture() -> str:
    """This machine's architecture, as `platform.machine()` says it (without importing
    `platform` into the template)."""
    return os.uname().machine


def seccomp_program(machine: str) -> bytes:
    """The filter: another architecture's calls kill the process; the allowed calls pass;
    every other call fails with EPERM (the interpreter raises PermissionError)."""
    arch, numbers = SYSCALLS[machine]
    allowed = sorted(numbers.values())
    program = [(LOAD_WORD, 0, 0, 4), (JUMP_EQ, 1, 0, arch), (RETURN, 0, 0, KILL),
               (LOAD_WORD, 0, 0, 0)]
    if machine == "x86_64":
        program += [(JUMP_GE, 0, 1, X32_BIT), (RETURN, 0, 0, KILL)]
    for i, number in enumerate(allowed):  # a match jumps to the ALLOW at the end
        program.append((JUMP_EQ, len(allowed) - i, 0, number))
    program += [(RETURN, 0, 0, ERRNO_EPERM), (RETURN, 0, 0, ALLOW)]
    return b"".join(struct.pack("HBBI", *instruction) for instruction in program)


def withhold_native_code() -> None:
    """Make `import ctypes` fail in this process from now on (the template, before it imports
    numpy, which looks for ctypes and does without): no candidate's process then has it, and
    once locked down none can load it (no open, no dlopen). Not in a pure install, whose
    lock-down needs ctypes (`PURE`)."""
    if not PURE:
        sys.modules.update(dict.fromkeys(NATIVE_CODE))  # type: ignore[arg-type]


@functools.cache
def program() -> bytes:
    """This machine's seccomp filter (made once, in the template, before it forks
    candidates)."""
    return seccomp_program(architecture())


def prepare() -> None:
    """Make, in the template, what a candidate's lock-down only uses: the filter and where
    the clock's pages are (and, in a pure install, the filter's ctypes objects)."""
    program()
    clock_pages()
    if PURE:
        from blis_simpy.search import ctypes_lockdown
        ctypes_lockdown.hold(program())


def fork_sibling() -> int:
    """Fork a child of this process's parent, not of this process (CLONE_PARENT): 0 in the
    child, its pid here. The zygote forks candidates' processes so: each is then the
    template's child from its start, which reaps it (its CPU time, how it ended), and
    nothing between them depends on timing."""
    return native.fork_sibling()


def die_with_parent(parent: int) -> None:
    """Have the kernel SIGKILL this process when its parent (`parent`, its pid) ends, however
    it ends; OSError if the kernel refuses, or if the parent has already ended (this process
    was handed to another before the request took hold)."""
    native.die_with_parent(signal.SIGKILL)
    if os.getppid() != parent:
        raise OSError(errno.ESRCH, f"its parent (process {parent}) has ended")


def lock_down(cpu_s: float, memory_mb: int) -> None:
    """Limit this process for good (raises OSError if the kernel refuses any step: a candidate
    never runs unlocked). Memory: `memory_mb` beyond what is mapped now."""
    cpu = math.ceil(cpu_s)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    statm = os.open("/proc/self/statm", os.O_RDONLY)  # (bytes: no text codec to load)
    try:
        pages = int(os.read(statm, 200).split()[0])
    finally:
        os.close(statm)
    cap = pages * os.sysconf("SC_PAGE_SIZE") + memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    withdraw_clock()
    native.no_new_privs()
    native.seccomp(program())


# The kernel's pages of clock data that the vDSO reads (newer kernels split them in two).
CLOCK_PAGES = (b"[vvar]", b"[vvar_vclock]")


def withdraw_clock() -> None:
    """Stop every clock: the pages of clock data the vDSO reads are replaced by zeros (the
    vDSO then reads the coarse clocks as 0 and asks the kernel for the others, which the
    filter refuses: `time.time()` raises PermissionError, the interpreter's own lock waits
    read 0). Before this, the vDSO read the real clock without a system call. (The
    time-stamp counter is left: only machine code reaches it, which a candidate's process
    cannot run without ctypes; making it fault, PR_SET_TSC, cost a third more of the
    candidate's CPU on this VM, 34 -> 46 ms an evaluation: docs/security.md.)"""
    for start, size in clock_pages():
        native.map_zeros(start, size)


@functools.cache
def clock_pages() -> tuple[tuple[int, int], ...]:
    """Where the clock's pages are mapped, and their sizes (found once, in the template: its
    forks have the same; reading /proc/self/maps costs about 1 ms)."""
    maps = os.open("/proc/self/maps", os.O_RDONLY)
    try:
        text = b""
        while chunk := os.read(maps, 1 << 16):
            text += chunk
    finally:
        os.close(maps)
    pages = []
    for line in text.splitlines():
        if line.rstrip().endswith(CLOCK_PAGES):
            start, end = (int(x, 16) for x in line.split()[0].split(b"-"))
            pages.append((start, end - start))
    return tuple(pages)


def personality(persona: int) -> int:
    """Set the calling thread's execution domain and flags (`PERSONALITY_QUERY`: only read
    them): the previous value, or -1 if the kernel refuses."""
    try:
        return native.personality(persona)
    except OSError:
        return -1


def fixed_addresses(module: str, argv: Sequence[str]) -> None:
    """Run `python -m module argv` again with address-space randomisation off, unless it is
    already off (the evaluator starts the sandbox so: `unrandomised`): an object's default
    repr shows its address, so the same candidate would print and order differently in two
    sandboxes. Called first thing in the sandbox."""
    current = personality(PERSONALITY_QUERY)
    if current < 0 or current & ADDR_NO_RANDOMIZE:
        return
    if personality(current | ADDR_NO_RANDOMIZE) >= 0:
        os.execv(sys.executable, [sys.executable, *PYTHON_FLAGS, "-m", module, *argv])


@contextlib.contextmanager
def unrandomised() -> Iterator[None]:
    """The programs the calling thread starts meanwhile run without address-space
    randomisation, as the sandbox does (`fixed_addresses`), so the template does not start
    a second interpreter to get there. The flag is the thread's own, inherited by what it
    starts and read when a program is loaded: this process's layout, and what its other
    threads start, stay randomised. (A kernel that refuses changes nothing; a set-user-ID
    bwrap drops the flag, and the template then starts again itself, as before.)"""
    current = personality(PERSONALITY_QUERY)
    changed = current >= 0 and not current & ADDR_NO_RANDOMIZE \
        and personality(current | ADDR_NO_RANDOMIZE) >= 0
    try:
        yield
    finally:
        if changed:
            personality(current)
