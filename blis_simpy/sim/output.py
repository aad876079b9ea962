"""A run's output folder, claimed before the run and replaced whole after it.

Everything that can make writing fail is checked before a simulation starts: the target is not
a file, it holds no earlier run's files (unless `force`), its parent can be created and written,
and the table format's library is installed. The files are staged in a hidden folder next to
the target, so the final rename never crosses a file system (no EXDEV after a long run), and
the target appears whole or not at all; an earlier folder replaced with `force` survives until
the new one is complete.
"""

from __future__ import annotations

import os
import secrets
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
        self.staging = self.claim()

    def check_target(self, force: bool) -> None:
        path = self.path
        if path.exists() and not path.is_dir():
            raise ScenarioError(self.field, f"{path} exists and is not a folder")
        if path.is_dir() and not force and any(path.iterdir()):
            raise ScenarioError(
                self.field, f"{path} already holds files (from an earlier run?); they would "
                "be mixed with this run's", "an empty or new folder, or --force (force=True) "
                "to replace the folder whole")

    def claim(self) -> Path:
        """Create the staging folder beside the target: proves the place is writable and on
        the target's own file system."""
        staging = self.path.parent / f".{self.path.name}.staging-{secrets.token_hex(4)}"
        # folders this claim creates, deepest last: removed again if the run never writes
        self.created = [p for p in reversed(self.path.parents) if not p.exists()]
        self.staging = staging
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
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
            old = self.set_aside()
        except BaseException:
            self.discard()
            raise
        try:
            os.rename(self.staging, self.path)
        except BaseException:
            if old is not None:
                os.rename(old, self.path)
            self.discard()
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return sorted(self.path.iterdir())

    def set_aside(self) -> Path | None:
        if not self.path.exists():
            return None
        old = self.path.parent / f".{self.path.name}.old-{secrets.token_hex(4)}"
        os.rename(self.path, old)
        return old

    def discard(self) -> None:
        """Drop the staging folder, and the folders made for it that stayed empty (a run that
        failed or was interrupted leaves nothing behind)."""
        shutil.rmtree(self.staging, ignore_errors=True)
        for folder in reversed(self.created):
            try:
                folder.rmdir()
            except OSError:  # holds the finished output, or something else: keep it
                return


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
