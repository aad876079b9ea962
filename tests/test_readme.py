"""The README's output-column table is generated from a real run (scripts/readme_columns.py);
this keeps it in sync with the code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_readme_lists_the_columns_every_output_table_really_has():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "readme_columns.py"),
                           "--check"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, ("README.md's column table is out of date: run "
                                  "`python scripts/readme_columns.py`", proc.stderr)
