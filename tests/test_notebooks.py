"""Execute every notebook in notebooks/ and check it runs cleanly and draws its plots.

The kernel is the `python3` kernelspec, which jupyter_client resolves to the interpreter
running pytest (the venv's): no `ipykernel install` step is needed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))


def test_notebooks_found() -> None:
    assert PATHS, f"no notebooks in {NOTEBOOKS}"


@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_committed_without_outputs(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{path.name}: stored outputs (strip them)"
            assert cell.execution_count is None, f"{path.name}: stored execution count"


@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_notebook_executes(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Headless plotting; the kernel inherits this environment.
    monkeypatch.setenv("MPLBACKEND", "Agg")
    # Prefer this environment's kernelspec over any stray user-level "python3" one.
    monkeypatch.setenv("JUPYTER_PREFER_ENV_PATH", "1")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        kernel_name="python3",
        timeout=120,
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()  # raises CellExecutionError on the first failing cell

    images = [
        output
        for cell in nb.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if "image/png" in output.get("data", {})
    ]
    assert images, f"{path.name} produced no image output"
