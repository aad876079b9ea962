"""A run's output folder, claimed before the run and replaced whole after it.

Everything that can make writing fail is checked before a simulation starts: the target is not
a file, it holds no earlier run's files (unless `force`, and then only an earlier run's folder),
its parent can be created and written, and the table format's library is installed. The files
are staged in a hidden folder next to the target, so the final rename never crosses a file
system (no EXDEV after a long run), and the target appears whole or not at all; an earlier
folder replaced with `force` survives until the new one is complete.

A symlinked target is followed: the files go where the link points, staged on that file
system, and the link stays. A target that is a mount point cannot be renamed (EBUSY): its
files are staged inside it and moved into place one by one, the old ones deleted only once
every new one is written.

A staging folder's name holds the writing process's id: one left behind by a process that was
killed outright (SIGKILL, power loss: no chance to clean up) is removed by the next claim of
the same target.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from blis_simpy.core.errors import ScenarioError


class OutputFolder:
    """The folder a run will be written to; `field` names it in errors (`--out`, `out_dir`)."""

    def __init__(self, path: str | Path, tables: str = "auto", force: bool = False,
                 field: str = "out_dir") -> None:
        self.path, self.field = Path(path), field
        self.format = table_format(tables)
        self.check_target(force)
        self.target = self.path.resolve()  # the real folder, a symlink followed
        self.in_place = self.target.is_dir() and mount_point(self.target)
        self.staging = self.claim()
        self.committed = False

    def location(self) -> Path:
        """Where the files are: the folder once committed, else the staging folder."""
        return self.path if self.committed else self.staging

    def check_target(self, force: bool) -> None:
        path = self.path
        if path.exists() and not path.is_dir():
            raise ScenarioError(self.field, f"{path} exists and is not a folder")
        if not (path.is_dir() and any(path.iterdir())):
            return
        if not force:
            raise ScenarioError(
                self.field, f"{path} already holds files (from an earlier run?); they would "
                "be mixed with this run's", "an empty or new folder, or --force (force=True) "
                "to replace the folder whole")
        # `force` deletes the folder: only an earlier run's, never a home or project folder
        if not (path / "summary.json").is_file():
            raise ScenarioError(
                self.field, f"{path} holds files but no summary.json: it is not an earlier "
                "run's output folder, so --force (force=True) does not replace it",
                "a new or empty folder, or an earlier run's output folder")
        if Path.cwd().resolve().is_relative_to(path.resolve()):
            raise ScenarioError(self.field, f"{path} holds the current folder, so --force "
                                "(force=True) does not replace it")

    def claim(self) -> Path:
        """Create the staging folder beside the target (inside it for a mount point): proves
        the place is writable and on the target's own file system."""
        target = self.target
        token = f"{os.getpid()}-{os.urandom(4).hex()}"
        prefix = ".staging-" if self.in_place else f".{target.name}.staging-"
        staging = (target if self.in_place else target.parent) / f"{prefix}{token}"
        remove_orphans(staging.parent, prefix)
        # folders this claim creates, deepest last: removed again if the run never writes
        self.created = [p for p in reversed(target.parents) if not p.exists()]
        self.staging = staging
        blocker = next((p for p in target.parents if p.exists()), None)
        if blocker is not None and not blocker.is_dir():
            raise ScenarioError(self.field, f"cannot write {self.path}: {blocker} is a file, "
                                "not a folder", "a path whose existing parents are folders")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            staging.mkdir()
        except OSError as exc:
            self.discard()
            raise ScenarioError(self.field, f"cannot write {self.path}: "
                                f"{exc.strerror or exc}") from None
        return staging

    def commit(self, write: Callable[[Path, str], None]) -> list[Path]:
        """Let `write(folder, table_format)` fill the staging folder, then put it in place of
        the target, keeping any earlier folder until the new one is there."""
        try:
            write(self.staging, self.format)
            if self.in_place:
                self.replace_entries()
                self.committed = True
                return sorted(self.path.iterdir())
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
        self.committed = True
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return sorted(self.path.iterdir())

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

    def discard(self) -> None:
        """Drop the staging folder, and the folders made for it that stayed empty (a run that
        failed or was interrupted leaves nothing behind)."""
        shutil.rmtree(self.staging, ignore_errors=True)
        for folder in reversed(self.created):
            try:
                folder.rmdir()
            except OSError:  # holds the finished output, or something else: keep it
                return


def remove_orphans(folder: Path, prefix: str) -> None:
    """Delete the staging folders `prefix<pid>-<token>` in `folder` whose process is gone."""
    if not folder.is_dir():
        return
    for entry in folder.iterdir():
        pid = entry.name.removeprefix(prefix).partition("-")[0]
        if entry.name.startswith(prefix) and pid.isdigit() and not alive(int(pid)) \
                and entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def mount_point(folder: Path) -> bool:
    """A folder another file system is mounted on (or the root): it cannot be renamed."""
    return os.path.ismount(folder)


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
