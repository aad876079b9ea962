"""The package's layers point one way: a subpackage imports only the layers below it, lazily
or not, and no two subpackages import each other (ARCHITECTURE.md, docs/architecture.md).

Every import statement of every module is read with `ast` (imports inside functions and under
TYPE_CHECKING count the same), so the rule cannot be dodged by importing late.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "blis_simpy"

# Bottom to top. A layer may import itself and any layer listed before it. The modules at the
# package root (api, cli, __init__, __main__) sit above everything.
LAYERS = ["data", "core", "rng", "config", "policies", "engine", "cluster", "workload", "metrics",
          "compat", "sim", "report", "validate", "calibrate", "observe", "search"]
BOTTOM = {"data", "core", "rng"}  # none imports another (data holds files only)
TOP = {"api", "cli", "__init__", "__main__"}


def layer_of(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def imported_names(path: Path) -> set[str]:
    """Dotted names of blis_simpy that `path` imports: modules, and `module.name` for each
    name imported from one (a submodule, or a function or class in it)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    package = list(rel.parts[:-1])  # the package a relative import starts from
    found = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            names = [module, *(f"{module}.{alias.name}" for alias in node.names)]
        found.update(name for name in names if name.startswith("blis_simpy."))
    return found


def imported_layers(path: Path) -> set[str]:
    """First-level subpackages (or root modules) of blis_simpy that `path` imports."""
    return {name.split(".")[1] for name in imported_names(path)}


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def allowed(source: str) -> set[str]:
    if source in TOP:
        return set(LAYERS) | TOP
    if source in BOTTOM:
        return {source}
    return set(LAYERS[: LAYERS.index(source) + 1])


def test_every_subpackage_has_a_layer():
    subpackages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert subpackages == set(LAYERS)
    roots = {p.stem for p in PACKAGE.glob("*.py")}
    assert roots == TOP


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down(path: Path):
    source = layer_of(path)
    upward = imported_layers(path) - allowed(source)
    assert not upward, f"{path.relative_to(PACKAGE)} ({source}) imports {sorted(upward)}"


def test_no_cycle_between_subpackages():
    edges: dict[str, set[str]] = {}
    for path in modules():
        source = layer_of(path)
        edges.setdefault(source, set()).update(imported_layers(path) - {source})
    ties = sorted((a, b) for a in edges for b in edges[a] if a < b and a in edges.get(b, ()))
    assert not ties, f"two-way imports between {ties}"

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in edges.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    cyclic = sorted(node for node in edges if node in reach(node))
    assert not cyclic, f"import cycle through {cyclic}"


def test_no_cycle_between_modules():
    """No two modules import each other, however late or through however many others (a
    circle of modules is one concept split in two, or a helper in the wrong place)."""
    paths = {module_name(path): path for path in modules()}
    edges = {name: {other for other in imported_names(path) if other in paths} - {name}
             for name, path in paths.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in edges[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = stack[stack.index(node):]
            del stack[stack.index(node):]
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    assert not cycles, f"modules importing each other: {cycles}"


def test_the_checker_sees_lazy_and_relative_imports(tmp_path: Path):
    """The walker is real: a function-local import and a relative one are both found."""
    fake = PACKAGE / "core" / "_probe_for_layer_test.py"
    try:
        fake.write_text("def f():\n    from blis_simpy.sim import build\n"
                        "from ..engine import instance\n")
        assert imported_layers(fake) == {"sim", "engine"}
        assert imported_layers(fake) - allowed("core") == {"sim", "engine"}
    finally:
        fake.unlink()
