"""The documentation site builds with `mkdocs build --strict`: no broken link or anchor, no page
missing from the navigation, every generated reference page made from the code, and every
tutorial notebook shown with its plots (the outputs committed in it, which
tests/test_notebooks.py checks are what the code gives today)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mkdocs", reason="the docs site needs mkdocs: pip install "
                    "'blis-simpy[docs]'")
pytest.importorskip("mkdocs_jupyter")
pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "MPLBACKEND": "Agg", "JUPYTER_PREFER_ENV_PATH": "1",
           "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-6000:]
    return out


def test_site_builds_strict(site):
    assert (site / "index.html").is_file()


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_tutorial_is_an_executed_notebook_with_its_plots(site, notebook):
    page = (site / "tutorials" / notebook.stem / "index.html").read_text()
    assert re.search(r"<img[^>]+src=\"data:image/png;base64,", page), \
        f"{notebook.name}: no plot in the rendered page"


def test_reference_pages_are_generated_from_the_code(site):
    scenario = (site / "reference" / "scenario" / "index.html").read_text()
    assert "max_scheduled_tokens" in scenario and "token budget per step" in scenario
    policies = (site / "reference" / "policies" / "index.html").read_text()
    assert "prefix-affinity" in policies and "token-bucket" in policies
    outputs = (site / "reference" / "outputs" / "index.html").read_text()
    assert "ttft_ms" in outputs and "kv_blocks_used" in outputs
    cli = (site / "reference" / "cli" / "index.html").read_text()
    assert "blis-simpy run" in cli and "--trace-level" in cli
    api = (site / "reference" / "api" / "index.html").read_text()
    assert "run_many" in api and "Recorder" in api
