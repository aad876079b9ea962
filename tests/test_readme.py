"""The README is a front page: short, its links resolve, and every command in it works. Its
`blis-simpy` commands and its Python example run here, in a fresh folder, as a reader would
type them; its two `make` commands are what CI runs (.ci/run)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks(language: str) -> list[str]:
    return [body for lang, body in BLOCK.findall(README) if lang == language]


def commands() -> list[list[str]]:
    lines = [line.split(" #")[0].strip() for body in blocks("bash") for line in body.splitlines()]
    return [shlex.split(line) for line in lines if line]


def test_readme_is_a_front_page_under_250_lines():
    assert len(README.splitlines()) < 250


def test_readme_links_resolve():
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README):
        if not target.startswith(("http://", "https://")):
            assert (ROOT / target).exists(), f"README links to a missing {target}"


def test_readme_make_commands_are_the_two_ci_runs():
    makes = [c for c in commands() if c[0] == "make"]
    assert makes == [["make", "demo"], ["make", "test"]]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make demo" in ci and "make test" in ci


def test_readme_commands_and_python_example_run(tmp_path):
    cli = [c for c in commands() if c[0] != "make"]
    assert len(cli) >= 4
    for command in cli:
        assert command[0].endswith("blis-simpy"), command
        proc = subprocess.run([sys.executable, "-m", "blis_simpy", *command[1:]], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, (command, proc.stderr[-2000:])
    assert (tmp_path / "out" / "first" / "report.html").is_file()
    (python,) = blocks("python")
    proc = subprocess.run([sys.executable, "-c", python], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "out" / "python-run" / "summary.json").is_file()
