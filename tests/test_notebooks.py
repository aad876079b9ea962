"""The notebooks are committed with their outputs, run from any folder (only the installed
package, never the repository's files), and their stored outputs are what the code gives
today: each is executed in an empty folder outside the repository (scripts/run_notebooks.py,
as `make notebooks` does) and its text outputs compared with the committed ones. The
documentation site shows those stored outputs as its tutorial pages (tests/test_docs.py), so
the notebooks run once per test run, here.

The kernel is the `python3` kernelspec, which jupyter_client resolves to the interpreter
running pytest (the venv's): no `ipykernel install` step is needed.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))
SPEC = importlib.util.spec_from_file_location("run_notebooks",
                                              ROOT / "scripts" / "run_notebooks.py")
assert SPEC is not None and SPEC.loader is not None
RUNNER = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(RUNNER)


def test_notebooks_found() -> None:
    assert PATHS, f"no notebooks in {NOTEBOOKS}"


@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_committed_with_outputs(path: Path) -> None:
    """Issue 31: they were committed without outputs; a reader should see the figures."""
    nb = nbformat.read(path, as_version=4)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert all(cell.execution_count is not None for cell in code), f"{path.name}: not run"
    images = [o for cell in code for o in cell.outputs if "image/png" in o.get("data", {})]
    assert images, f"{path.name}: no figure stored"
    assert "repo_root" not in "".join(cell.source for cell in code)


@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_notebook_runs_outside_the_repository_and_gives_its_stored_outputs(path: Path) -> None:
    fresh = RUNNER.execute(path)  # raises CellExecutionError on the first failing cell
    assert RUNNER.texts(fresh) == RUNNER.texts(nbformat.read(path, as_version=4)), \
        f"{path.name}: stored outputs are stale (make notebooks)"
