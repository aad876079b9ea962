"""Execute the notebooks and store their outputs: `python scripts/run_notebooks.py [--check]`.

The notebooks are committed with their outputs, so a reader sees the figures without running
anything. Each is executed in an empty temporary folder, outside the repository, as a user's
copy would be (`make notebooks`): they reach scenarios through the installed package's library
(`blis_simpy.load("prefix-heavy")`), never through the repository's files.

`--check` executes them the same way and fails (status 1) if a text output differs from the one
committed: the stored outputs are what the code gives today (tests/test_notebooks.py runs it).
Images are not compared (a matplotlib upgrade changes their bytes, not their meaning), nor is
stderr (warnings name paths).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import nbclient
import nbformat

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
TIMEOUT_S = 600  # per cell


def execute(path: Path) -> Any:
    """The notebook executed in a fresh folder outside the repository, outputs attached."""
    nb = nbformat.read(path, as_version=4)
    os.environ.setdefault("MPLBACKEND", "Agg")  # headless; the kernel inherits it
    os.environ["JUPYTER_PREFER_ENV_PATH"] = "1"  # this environment's kernelspec
    with tempfile.TemporaryDirectory(prefix="blis-notebook-") as folder:
        nbclient.NotebookClient(nb, kernel_name="python3", timeout=TIMEOUT_S,
                                resources={"metadata": {"path": folder}}).execute()
    for cell in nb.cells:  # wall-clock times would change the file on every run
        cell.metadata.pop("execution", None)
    return nb


def texts(nb: Any) -> list[list[str]]:
    """Each code cell's text outputs: results and stdout, not images or stderr. Consecutive
    stdout outputs are joined: where the kernel cuts a cell's printing into outputs depends on
    timing (a long cell, such as a search printing its progress, is cut differently each run)."""
    out = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        shown: list[str] = []
        printing = False  # the last output shown was stdout
        for output in cell.outputs:
            if output.output_type == "stream" and output.name == "stdout":
                if printing:
                    shown[-1] += output.text
                else:
                    shown.append(output.text)
                printing = True
            elif "data" in output and "text/plain" in output.data:
                shown.append(output.data["text/plain"])
                printing = False
        out.append(shown)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="compare with the committed outputs instead of writing them")
    parser.add_argument("names", nargs="*", help="notebooks (default: all)")
    args = parser.parse_args()
    paths = [NOTEBOOKS / n for n in args.names] or sorted(NOTEBOOKS.glob("*.ipynb"))
    stale = []
    for path in paths:
        fresh = execute(path)
        if args.check:
            if texts(fresh) != texts(nbformat.read(path, as_version=4)):
                stale.append(path.name)
        else:
            nbformat.write(fresh, path)
        print(f"{path.name}: {'stale' if path.name in stale else 'ok'}", file=sys.stderr)
    if stale:
        print(f"stale outputs in {', '.join(stale)}: run `make notebooks`", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
