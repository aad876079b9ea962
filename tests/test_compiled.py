"""The modules setup.py compiles with mypyc: compiled in this install (unless a pure one was
asked for with BLIS_SIMPY_PURE), never older than their sources, and a run gives the same bytes
compiled and as plain Python."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def compiled_sources() -> list[str]:
    """setup.py's COMPILED list."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "COMPILED":
            return list(ast.literal_eval(node.value))
    raise AssertionError("setup.py has no COMPILED list")


def module_name(source: str) -> str:
    return source.removesuffix(".py").replace("/", ".")


def test_the_hot_modules_are_compiled_unless_a_pure_install_was_asked_for():
    pure = bool(os.environ.get("BLIS_SIMPY_PURE"))
    files = {s: importlib.import_module(module_name(s)).__file__ or "" for s in compiled_sources()}
    extensions = {s for s, f in files.items() if f.endswith(".so")}
    assert extensions == (set() if pure else set(files)), (
        f"{files}: not compiled (no C compiler when installing? then set BLIS_SIMPY_PURE=1)")


def test_the_sandbox_locks_down_without_ctypes_unless_a_pure_install_was_asked_for():
    """setup.py's plain C extension (LOCKDOWN) makes a code candidate's lock-down calls, so
    its process never loads ctypes (docs/security.md); a pure install makes them through
    ctypes."""
    if sys.platform != "linux":
        pytest.skip("the sandbox is Linux's only")
    from blis_simpy.search import jail
    pure = bool(os.environ.get("BLIS_SIMPY_PURE"))
    assert pure == jail.PURE, "no lockdown extension (no C compiler? then BLIS_SIMPY_PURE=1)"
    assert jail.native.__name__ == ("blis_simpy.search.ctypes_lockdown" if pure
                                    else "blis_simpy.search.lockdown")


def test_no_extension_is_older_than_its_source():
    """An editable install builds the extensions next to the sources, and the interpreter
    prefers them: after editing a compiled module, `make compile` (or `make test`) rebuilds."""
    for source in [*compiled_sources(), "blis_simpy/search/lockdown.c"]:
        module = importlib.util.find_spec(module_name(source.removesuffix(".c")))
        path = Path((module.origin if module else None) or "")
        if path.suffix == ".so" and path.parent == (ROOT / source).parent:
            assert path.stat().st_mtime >= (ROOT / source).stat().st_mtime, (
                f"{path.name} is older than {source}: run `make compile`")


def run_cli(python_path: Path, scenario: str, smaller: str, out: Path) -> dict[str, bytes]:
    env = {**os.environ, "PYTHONPATH": str(python_path)}
    subprocess.run([sys.executable, "-m", "blis_simpy.cli", "run", str(ROOT / scenario),
                    "--out", str(out), "--quiet", "--force", "--set", smaller],
                   check=True, cwd=python_path, env=env, capture_output=True)
    # the echoed scenario names the folder it was read from
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.name != "scenario.yaml"}


@pytest.mark.parametrize(("scenario", "smaller"), [
    ("blis_simpy/scenarios/bench/1k-1inst.yaml", "workload.num_requests=400"),
    ("scenarios/prefix-heavy.yaml", "workload.duration_s=4"),
])
def test_a_run_gives_the_same_bytes_compiled_and_as_plain_python(scenario, smaller, tmp_path):
    """Compat (the reference's KV accounting) and native (prefix caching) runs."""
    pure = tmp_path / "pure"
    shutil.copytree(ROOT / "blis_simpy", pure / "blis_simpy",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    assert not list(pure.rglob("*.so"))
    compiled = run_cli(ROOT, scenario, smaller, tmp_path / "compiled-out")
    plain = run_cli(pure, scenario, smaller, tmp_path / "pure-out")
    assert compiled.keys() == plain.keys()
    for name in compiled:
        assert compiled[name] == plain[name], f"{name} differs compiled vs plain Python"


def notebook_cells(path: Path, *needles: str) -> str:
    """The code of the notebook's cells that contain any of `needles`, IPython magics left
    out, as one script."""
    cells = json.loads(path.read_text())["cells"]
    code = ["".join(cell["source"]) for cell in cells if cell["cell_type"] == "code"]
    chosen = [text for text in code if any(needle in text for needle in needles)]
    return "\n\n".join("\n".join(line for line in text.splitlines()
                                 if not line.startswith("%")) for text in chosen)


def test_the_notebooks_failure_injector_runs_pure_and_compiled(tmp_path):
    """notebooks/05-extending.ipynb's machine-shop failure injector, run as it is written,
    in a plain-Python copy of the package and in this install: the same failures, the same
    requests lost and sent again."""
    script = notebook_cells(ROOT / "notebooks" / "05-extending.ipynb", "import blis_simpy",
                            "SETUP =", "def breakdowns") + """
import json
import blis_simpy.engine.instance as instance
print(json.dumps([instance.__file__.endswith(".py"), broken.summary["faults"],
                  broken.requests.completion_s.round(6).tolist()]))
"""
    pure = tmp_path / "pure"
    shutil.copytree(ROOT / "blis_simpy", pure / "blis_simpy",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    outputs = []
    for path in (pure, ROOT):
        env = {**os.environ, "PYTHONPATH": str(path), "MPLBACKEND": "Agg"}
        done = subprocess.run([sys.executable, "-c", script], cwd=path, env=env, check=True,
                              capture_output=True, text=True)
        outputs.append(done.stdout.splitlines()[-1])
    (plain, faults, ends), (compiled, faults_c, ends_c) = map(json.loads, outputs)
    assert plain and compiled == bool(os.environ.get("BLIS_SIMPY_PURE"))
    assert faults == faults_c and ends == ends_c
    assert faults["crashes"] > 0 and faults["retried_requests"] > 0


def test_no_compiled_function_takes_a_vec_argument():
    """mypyc's entry point from interpreted code unboxes a `vec` argument with a reference it
    never drops (librt 0.16), so each call keeps the caller's whole vector alive: pass it as
    `object` and `cast` it inside (workload/release.py: `rebuilt`)."""
    found = []
    for source in compiled_sources():
        for node in ast.walk(ast.parse((ROOT / source).read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                arguments = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
                found += [f"{source}: {node.name}({a.arg})" for a in arguments
                          if a.annotation is not None and "vec[" in ast.unparse(a.annotation)]
    assert not found, found
