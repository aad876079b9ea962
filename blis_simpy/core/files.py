"""Reading a file a user named: a scenario, a trace, a policy bundle, candidate code, a sweep
file. Every input path goes through here, so each gets the same guarantees.

A path can name something that is not a file: a FIFO (reading waits for a writer that never
comes), a device (`/dev/zero` never ends), a directory, a socket; a symlink loop; a `/proc`
file that says it is empty or fails when read; a file of many gigabytes. Each of these is
refused with one line naming the option, the path and what is wrong, before anything is read
or run:

* the file is opened without blocking (a FIFO opens at once instead of waiting), then checked
  by `fstat` on the open descriptor (no race with a rename) to be a regular file;
* at most `limit` bytes are read, whatever size the file claims (`/proc` files claim 0), so a
  huge or growing file costs `limit` bytes of memory before it is refused;
* read errors (EIO from `/proc/self/mem`, EACCES) become the same one-line error.

The text readers decode UTF-8 and name the first bad byte. `digest` hashes a file for the keys
that must change with its content (the run store's, a prepared workload's).
"""

from __future__ import annotations

import functools
import hashlib
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from blis_simpy.core.errors import ScenarioError

MAX_TEXT_BYTES = 16 * 1024 * 1024  # a scenario, bundle, sweep file or candidate's code
# A trace is read line by line, never whole; the limit only stops a file that could not be
# a trace of at most MAX_REQUESTS rows (the Azure 2024 week is ~1.3 GB) from being scanned.
MAX_TRACE_BYTES = 64 * 1024**3

KINDS = {stat.S_IFDIR: "a folder", stat.S_IFIFO: "a FIFO (named pipe)",
         stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
         stat.S_IFSOCK: "a socket"}


def reason(exc: OSError) -> str:
    """An OSError as the words a user needs (`No such file or directory`)."""
    return exc.strerror or str(exc)


def open_input(path: str | Path, field: str, what: str = "file",
               limit: int = MAX_TEXT_BYTES) -> BinaryIO:
    """`path` opened for binary reading, once it is known to be a regular file of at most
    `limit` bytes (by its size; `read_text` also counts what it reads). `field` names the
    option or YAML path in errors, `what` the kind of file expected (for the valid part)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ScenarioError(field, f"cannot read {path}: {reason(exc)}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise not_regular(path, info.st_mode, field, what)
        if info.st_size > limit:
            raise too_big(path, field, what, limit)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def not_regular(path: str | Path, mode: int, field: str, what: str) -> ScenarioError:
    kind = KINDS.get(stat.S_IFMT(mode), "a special file")
    return ScenarioError(field, f"{path} is {kind}, not a regular file", what)


def too_big(path: str | Path, field: str, what: str, limit: int) -> ScenarioError:
    return ScenarioError(field, f"{path} is larger than {limit:,} bytes", f"{what} of at most "
                         f"{limit:,} bytes")


def read_bytes(path: str | Path, field: str, what: str = "file",
               limit: int = MAX_TEXT_BYTES) -> bytes:
    """The whole file, at most `limit` bytes (see `open_input`)."""
    with open_input(path, field, what, limit) as handle:
        try:
            data = handle.read(limit + 1)
        except OSError as exc:
            raise ScenarioError(field, f"cannot read {path}: {reason(exc)}") from None
    if len(data) > limit:  # a file that said it was smaller (/proc), or grew
        raise too_big(path, field, what, limit)
    return data


def read_text(path: str | Path, field: str, what: str = "a UTF-8 text file",
              limit: int = MAX_TEXT_BYTES) -> str:
    """The whole file as UTF-8 text (a byte-order mark dropped), at most `limit` bytes."""
    data = read_bytes(path, field, what, limit)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ScenarioError(field, f"{path} is not UTF-8 text (byte {data[exc.start]:#04x} "
                            f"at offset {exc.start})", what) from None


def digest(path: str | Path, field: str, what: str = "file",
           limit: int = MAX_TEXT_BYTES) -> str:
    """The SHA-256 of the file's content, read as `open_input` opens it and never past the
    size the file states: one that holds more (a /proc file states 0 bytes, and
    /proc/self/pagemap holds 256 GiB) or grows while read is refused after one byte more, not
    hashed to its end. A file with the same inode, size and modification time as one hashed
    before is not read again (a sweep keys every run by its trace)."""
    try:
        info = os.stat(path)
    except (OSError, ValueError) as exc:
        problem = reason(exc) if isinstance(exc, OSError) else str(exc)
        raise ScenarioError(field, f"cannot read {path}: {problem}") from None
    return hashed(str(path), info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, field,
                  what, limit)


@functools.lru_cache(maxsize=256)
def hashed(path: str, device: int, inode: int, size: int, mtime_ns: int, field: str,
           what: str, limit: int) -> str:
    """`digest` of a file as `os.stat` saw it (the arguments after `path` are the memo's key)."""
    with open_input(path, field, what, limit) as handle:
        stated = os.fstat(handle.fileno()).st_size
        content = hashlib.sha256()
        left = stated + 1  # a byte past the stated size is a file that says less than it holds
        try:
            while left and (chunk := handle.read(min(left, 1 << 20))):
                content.update(chunk)
                left -= len(chunk)
        except OSError as exc:
            raise ScenarioError(field, f"cannot read {path}: {reason(exc)}") from None
    if not left:
        raise ScenarioError(field, f"{path} holds more than the {stated:,} bytes its size says "
                            "(a /proc file, or one growing while read)", what)
    return content.hexdigest()


def not_an_option(path: str | Path, field: str, what: str) -> None:
    """An output path given as `--set` or `--force` is an option whose own value was left out
    (`run s.yaml --out --set x=1` would write a folder named `--set`); a file or folder that
    really starts with dashes is still reachable with its folder (`out/--name`; pathlib drops
    a leading `./`)."""
    if str(path).startswith("--"):
        raise ScenarioError(field, f"{str(path)!r} looks like an option, not a path: {field} "
                            "needs its own value", f"{what}, e.g. {field} out/run; a name that "
                            "starts with dashes goes with its folder, e.g. out/--name")


def check_replaceable(path: Path, field: str, what: str, force: bool = False) -> None:
    """`path` may be written by `replacing`: its folder exists, and it is new, or with
    `force` a regular file (never a device, FIFO or folder: `--out /dev/null` as root would
    replace the device with a file). Without `force` an existing file is refused, as `run`
    refuses a folder holding files: a mistyped path must not cost a user's file."""
    not_an_option(path, field, what)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise ScenarioError(field, f"cannot write {path}: {reason(exc)}") from None
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise not_regular(path, info.st_mode, field, what)
    if not force and (info is not None or os.path.islink(path)):
        raise ScenarioError(field, f"{path} already exists and would be replaced",
                            f"a new file, or --force to replace {path}")
    if not path.parent.is_dir():
        raise ScenarioError(field, f"cannot write {path}: the folder {path.parent} does not "
                            "exist", what)


@contextmanager
def replacing(path: Path, field: str, what: str = "a file path", force: bool = False
              ) -> Iterator[Path]:
    """A temporary file beside `path` for the block to write, moved over `path` once the
    block ends without error: no reader ever sees half a file, and a failure, an interrupt
    or SIGTERM leaves none (the old file, if any, stays)."""
    check_replaceable(path, field, what, force)
    temp = path.with_name(f".{path.name}.{os.getpid()}-{os.urandom(4).hex()}.tmp")
    try:
        yield temp
        os.replace(temp, path)
    except OSError as exc:
        raise ScenarioError(field, f"cannot write {path}: {reason(exc)}") from None
    finally:
        temp.unlink(missing_ok=True)
