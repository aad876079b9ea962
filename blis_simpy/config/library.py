"""The scenario library shipped with the package: a bare name (`quickstart`) finds its file
from any folder, for the command line, sweep files and the Python API alike."""

from __future__ import annotations

from pathlib import Path

from blis_simpy.core.errors import ScenarioError, closest_first

LIBRARY = Path(__file__).resolve().parents[1] / "scenarios"


def library_names() -> list[str]:
    return sorted(p.stem for p in LIBRARY.glob("*.yaml"))


def scenario_file(arg: str | Path, folder: Path | None = None, where: str = "") -> Path:
    """A file that exists (relative to `folder` when given) wins; else a bare name is looked
    up in the library."""
    path = Path(arg) if folder is None else folder / arg
    if path.exists() or path.is_symlink() or path.suffix or len(Path(arg).parts) != 1:
        return path
    shipped = LIBRARY / f"{arg}.yaml"
    if shipped.is_file():
        return shipped
    raise ScenarioError(where, f"{arg} is neither a file nor a library scenario",
                        ", ".join(closest_first(str(arg), library_names())))
