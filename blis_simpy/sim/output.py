"""A run's output folder, claimed before the run and replaced whole after it.

Everything that can make writing fail is checked before a simulation starts: the target is not
a file, it holds no earlier run's files (unless `force`, and then only an earlier run's folder),
its parent can be created and written, and the table format's library is installed. The files
are staged in a hidden folder next to the target, so the final rename never crosses a file
system (no EXDEV after a long run), and the target appears whole or not at all; an earlier
folder replaced with `force` survives until the new one is complete.

The claim is exclusive: the staging folder is created, and locked (`flock`) for as long as the
run holds it, while the folder it is made in is locked, and a target with a live staging
folder of another run (another process, or another thread of this one) is refused. So two
runs started on the same new `--out` cannot both take it; the second is told at once, where
it used to run to the end and then delete the first one's output. A staging folder whose lock
nobody holds was left by a run killed outright (SIGKILL, power loss: no chance to clean up)
and is removed by the next claim of the same target. Its name holds the writing process's id,
which decides liveness where the file system has no locks.

A symlinked target is followed: the files go where the link points, staged on that file
system, and the link stays; a symlink loop is an error. A target that is a mount point
(another file system, or a bind mount of a folder of the same one, which `os.path.ismount`
cannot see: both found in /proc/self/mountinfo) cannot be renamed (EBUSY): its files are staged
inside it, which also proves it writable (a read-only mount is refused before the run), and
moved into place one by one, the old ones deleted only once every new one is written.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import ModuleType

from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.files import not_an_option


class OutputFolder:
    """The folder a run will be written to; `field` names it in errors (`--out`, `out_dir`)."""

    def __init__(self, path: str | Path, tables: str = "auto", force: bool = False,
                 field: str = "out_dir", ending: Callable[[], bool] = lambda: False) -> None:
        if not isinstance(path, str | os.PathLike) or not str(path):
            raise ScenarioError(field, f"expected a folder path, got {path!r}",
                                "a str or pathlib.Path naming a new or empty folder")
        not_an_option(path, field, "a new or empty folder")
        self.path, self.field = Path(path), field
        # True once the process has been told to end (cli: SIGTERM, SIGHUP): checked again
        # before the folder is put in place, as the signal's KeyboardInterrupt can be lost on
        # its way (raised where Python swallows errors: a finaliser, a dict lookup's __eq__)
        self.ending = ending
        self.format = table_format(tables)
        self.target = self.resolved()  # the real folder, a symlink followed
        self.in_place = self.target.is_dir() and mount_point(self.target)
        self.lock: int | None = None  # the staging folder's descriptor, locked
        self.staging = self.claim(force)
        self.committed = False

    def location(self) -> Path:
        """Where the files are: the folder once committed, else the staging folder."""
        return self.path if self.committed else self.staging

    def resolved(self) -> Path:
        try:
            target = self.path.resolve()
            # what only a look at the path shows: a name too long, a denied folder
            with suppress(FileNotFoundError, NotADirectoryError):
                os.stat(target)
            return target
        except (OSError, RuntimeError) as exc:  # a symlink loop (RuntimeError before 3.13)
            raise ScenarioError(self.field, f"cannot write {self.path}: a symlink loop "
                                f"({exc})" if isinstance(exc, RuntimeError) else
                                f"cannot write {self.path}: {exc.strerror or exc}") from None

    def check_target(self, force: bool) -> None:
        path = self.path
        if path.exists() and not path.is_dir():
            raise ScenarioError(self.field, f"{path} exists and is not a folder")
        self.replacing = path.is_dir() and any(path.iterdir())
        if not self.replacing:
            return
        # the caller's own switch: the command line's option, or the API's argument
        knob = "force=True" if self.field == "out_dir" else "--force"
        if not force:
            raise ScenarioError(
                self.field, f"{path} already holds files (from an earlier run?); they would "
                "be mixed with this run's", f"an empty or new folder, or {knob} to replace "
                "the folder whole")
        # `force` deletes the folder: only an earlier run's, never a home or project folder
        if not (path / "summary.json").is_file():
            raise ScenarioError(
                self.field, f"{path} holds files but no summary.json: it is not an earlier "
                f"run's output folder, so {knob} does not replace it",
                "a new or empty folder, or an earlier run's output folder")
        if Path.cwd().resolve().is_relative_to(self.target):
            raise ScenarioError(self.field, f"{path} holds the current folder, so {knob} "
                                "does not replace it")

    def claim(self, force: bool) -> Path:
        """Create and lock the staging folder beside the target (inside it for a mount
        point), under a lock of the folder it is made in: proves the place is writable and on
        the target's own file system, and that no other run holds the target."""
        target = self.target
        token = f"{os.getpid()}-{os.urandom(4).hex()}"
        prefix = ".staging-" if self.in_place else f".{target.name}.staging-"
        home = target if self.in_place else target.parent
        self.staging = home / f"{prefix}{token}"
        # folders this claim creates, deepest last: removed again if the run never writes
        self.created = [p for p in reversed(target.parents) if not p.exists()]
        blocker = next((p for p in target.parents if p.exists()), None)
        if blocker is not None and not blocker.is_dir():
            raise ScenarioError(self.field, f"cannot write {self.path}: {blocker} is a file, "
                                "not a folder", "a path whose existing parents are folders")
        try:
            home.mkdir(parents=True, exist_ok=True)
            with locked(home):
                self.refuse_live_claims(home, prefix)
                self.check_target(force)
                self.staging.mkdir()
                self.lock = hold(self.staging)
        except OSError as exc:
            self.discard()
            raise ScenarioError(self.field, f"cannot write {self.path}: "
                                f"{exc.strerror or exc}") from None
        except BaseException:
            self.discard()
            raise
        return self.staging

    def refuse_live_claims(self, folder: Path, prefix: str) -> None:
        """Remove the staging folders `prefix<pid>-<token>` of runs that are gone; refuse if a
        run that is still going holds one."""
        for entry in sorted(folder.iterdir()):
            pid = entry.name.removeprefix(prefix).partition("-")[0]
            if not (entry.name.startswith(prefix) and pid.isdigit() and entry.is_dir()
                    and not entry.is_symlink()):
                continue
            if held(entry, int(pid)):
                raise ScenarioError(self.field, f"another run (process {pid}) is writing "
                                    f"{self.path}", "another folder, or wait for that run")
            shutil.rmtree(entry, ignore_errors=True)

    def commit(self, write: Callable[[Path, str], None]) -> list[Path]:
        """Let `write(folder, table_format)` fill the staging folder, then put it in place of
        the target, keeping any earlier folder until the new one is there."""
        try:
            write(self.staging, self.format)
            if self.ending():
                raise KeyboardInterrupt
            if self.in_place:
                self.replace_entries()
                self.committed = True
                return sorted(self.path.iterdir())
            self.refuse_newcomer()
            old = self.set_aside()
        except BaseException:
            self.discard()
            raise
        try:
            os.rename(self.staging, self.target)
        except BaseException:
            if old is not None:
                os.rename(old, self.target)
            self.discard()
            raise
        self.release()
        self.committed = True
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return sorted(self.path.iterdir())

    def refuse_newcomer(self) -> None:
        """A target that was new or empty at the claim but holds files now was filled by
        something other than a run (runs are refused while this one holds the claim): it is
        not replaced, and this run's files are kept beside it under a visible name."""
        target = self.target
        if self.replacing or not (target.is_dir() and any(target.iterdir())):
            return
        kept = target.parent / f"{target.name}.{self.staging.name.rpartition('-')[2]}"
        os.rename(self.staging, kept)
        raise ScenarioError(self.field, f"{self.path} was filled by something else while this "
                            f"run wrote it, so it was not replaced; this run's files are in "
                            f"{kept}")

    def set_aside(self) -> Path | None:
        if not self.target.exists():
            return None
        old = self.target.parent / f".{self.target.name}.old-{os.urandom(4).hex()}"
        os.rename(self.target, old)
        return old

    def replace_entries(self) -> None:
        """A mount point's old entries deleted, the staged files moved in, the staging
        folder removed: renames inside one file system."""
        for entry in self.target.iterdir():
            if entry == self.staging:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        for item in self.staging.iterdir():
            os.rename(item, self.target / item.name)
        self.staging.rmdir()
        self.release()

    def discard(self) -> None:
        """Drop the staging folder, and the folders made for it that stayed empty (a run that
        failed or was interrupted leaves nothing behind)."""
        shutil.rmtree(self.staging, ignore_errors=True)
        self.release()
        for folder in reversed(self.created):
            try:
                folder.rmdir()
            except OSError:  # holds the finished output, or something else: keep it
                return

    def release(self) -> None:
        """Let go of the staging folder's lock (after it has become the target, or is gone)."""
        if self.lock is not None:
            os.close(self.lock)
            self.lock = None


def file_locks() -> ModuleType | None:
    """fcntl, for flock; None where there is none (Windows: claims go by process ids).
    Imported when a folder is claimed, not by every run that never writes one."""
    try:
        import fcntl
    except ImportError:
        return None
    return fcntl


@contextmanager
def locked(folder: Path) -> Iterator[None]:
    """`folder` locked while a claim looks at and adds to it (claims are milliseconds)."""
    fcntl = file_locks()
    fd = os.open(folder, os.O_RDONLY)
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError as exc:  # a file system without locks: claims are unguarded
                if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                    raise
        yield
    finally:
        os.close(fd)


def hold(staging: Path) -> int:
    """A descriptor of the staging folder holding its lock until it is closed (by `release`,
    or by the process's end however it ends)."""
    fcntl = file_locks()
    fd = os.open(staging, os.O_RDONLY)
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                os.close(fd)
                raise
    return fd


def held(staging: Path, pid: int) -> bool:
    """Whether a run still holds `staging`: its lock is taken (by any process or thread),
    or, on a file system without locks, its process is alive."""
    fcntl = file_locks()
    if fcntl is None:
        return alive(pid)
    try:
        fd = os.open(staging, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return alive(pid)
    finally:
        os.close(fd)  # releases the lock if it was taken here
    return False


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def mount_point(folder: Path) -> bool:
    """A folder something is mounted on: another file system, the root, or a bind mount of
    a folder of the same file system (same device, so only the mount table shows it). It
    cannot be renamed."""
    return os.path.ismount(folder) or str(folder) in mount_points()


MOUNTINFO = "/proc/self/mountinfo"


def mount_points() -> set[str]:
    """Every mount point of this process's mount namespace (Linux; empty elsewhere). The
    fifth field of each mountinfo line, with its octal escapes (`\\040` for a space)."""
    try:
        with open(MOUNTINFO, encoding="utf-8", errors="surrogateescape") as f:
            lines = f.read().splitlines()
    except OSError:
        return set()
    return {re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), fields[4])
            for fields in (line.split(" ") for line in lines) if len(fields) > 4}


def table_format(tables: str) -> str:
    """csv or parquet; parquet needs pyarrow, checked here so a run never fails at the end."""
    if tables not in ("auto", "csv", "parquet"):
        raise ScenarioError("outputs.tables", f"unknown table format {tables!r}",
                            "auto, csv, parquet")
    if tables == "csv":
        return "csv"
    try:
        import pyarrow  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        if tables == "parquet":
            raise ScenarioError(
                "outputs.tables", "parquet needs pyarrow, which is not installed",
                "pip install 'blis-simpy[parquet]' (or pyarrow), or tables: csv") from None
        return "csv"
    return "parquet"
