"""The package's dataclass methods, compiled once per Python version and kept like bytecode.

`dataclasses` writes each class's generated methods (`__init__`, `__repr__`, `__eq__`,
`__hash__`, a frozen class's `__setattr__` and `__delattr__`) as source text and compiles it
with `exec` as the class is made. A `blis-simpy run` makes about 130 dataclasses, 765 methods:
parsing and compiling them was a fifth of a 1,000-request run's whole process (callgrind:
428 M of 1.98 G instructions, ~0.1 s on the benchmark machine).

`install` gives the `dataclasses` module an `exec` of its own (a module global shadows the
builtin for that module alone) that looks this package's method texts up in a table of
compiled code objects, keyed by the text itself, and executes the code object in place of the
text: the same function, made the same way, minus the parsing. A text not in the table (the
first run, a class that changed) is compiled as before and added; the table is written at
exit, with marshal, next to the package's own `.pyc` files (its `__pycache__`, or
`sys.pycache_prefix`), which is where Python keeps what it compiles, with the same owner and
trust and the same lifetime as the package. Nothing is written when Python writes no bytecode
(`-B`, PYTHONDONTWRITEBYTECODE) or the folder cannot be written; a missing, unreadable or
foreign file (another Python's marshal format) is ignored and rebuilt. Other packages' classes
go straight to the builtin `exec`.
"""

from __future__ import annotations

import atexit
import builtins
import dataclasses
import importlib.util
import marshal
import os
import sys
from collections.abc import Callable, Mapping
from contextlib import suppress
from types import CodeType
from typing import Any

PACKAGE = __name__.split(".")[0]
# the file's first bytes: the interpreter's bytecode magic number (its marshal format and code
# objects) and this table's own format
HEADER = importlib.util.MAGIC_NUMBER + b"blis-simpy dataclass methods 1\n"
# a table that grew past this (classes edited again and again) keeps only what its last
# writer used
MAX_ENTRIES = 5000


class MethodCode:
    """The compiled method texts of one table file (`path`; None: kept in memory only),
    loaded on first use; `compiled` counts the texts this process had to compile."""

    def __init__(self, path: str | None,
                 fallback: Callable[..., None] = builtins.exec) -> None:
        self.path = path
        self.fallback = fallback
        self.codes: dict[str, CodeType] | None = None
        self.used: set[str] = set()
        self.compiled = 0

    def exec(self, source: Any, globals: Mapping[str, Any] | None = None,
             locals: Mapping[str, Any] | None = None) -> None:
        """`exec` as `dataclasses` calls it, with a compiled text looked up, not parsed."""
        if isinstance(source, str) and globals is not None and ours(globals):
            source = self.code(source)
        self.fallback(source, globals, locals)

    def code(self, source: str) -> CodeType:
        codes = self.codes if self.codes is not None else self.load()
        code = codes.get(source)
        if code is None:
            code = codes[source] = compile(source, "<string>", "exec")
            if not self.compiled and self.path is not None:
                atexit.register(self.save)
            self.compiled += 1
        self.used.add(source)
        return code

    def load(self) -> dict[str, CodeType]:
        self.codes = {}
        if self.path is None:
            return self.codes
        try:
            with open(self.path, "rb") as f:
                data = f.read()
            if data.startswith(HEADER):
                table = marshal.loads(data[len(HEADER):])
                if isinstance(table, dict):
                    self.codes = {k: v for k, v in table.items()
                                  if isinstance(k, str) and isinstance(v, CodeType)}
        except (OSError, ValueError, EOFError, TypeError):
            pass  # no table yet, or not one this interpreter can read: rebuilt at exit
        return self.codes

    def save(self, always: bool = False) -> None:
        """Write the table (what was loaded and what this process compiled) in one rename,
        so a reader never sees half of it; any failure leaves things as they were. Python's
        "write no bytecode" holds unless `always` (as `compileall` writes .pyc files)."""
        if self.path is None or self.codes is None or (sys.dont_write_bytecode and not always):
            return
        table = self.codes
        if len(table) > MAX_ENTRIES:
            table = {k: v for k, v in table.items() if k in self.used}
        temporary = f"{self.path}.{os.getpid()}.tmp"
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            with open(temporary, "wb") as f:
                f.write(HEADER + marshal.dumps(table))
            os.replace(temporary, self.path)
        except (OSError, ValueError):
            with suppress(OSError):
                os.unlink(temporary)


def ours(namespace: Mapping[str, Any]) -> bool:
    """Whether the class being made belongs to this package (`dataclasses` passes the
    class's module globals)."""
    name = namespace.get("__name__")
    return isinstance(name, str) and (name == PACKAGE or name.startswith(PACKAGE + "."))


def table_path() -> str | None:
    """Where Python keeps this package's bytecode, for this interpreter; None when it keeps
    none (no cache tag)."""
    package = sys.modules[PACKAGE].__file__
    try:
        pyc = importlib.util.cache_from_source(package or "")
    except (NotImplementedError, ValueError):
        return None
    optimized = f".opt-{sys.flags.optimize}" if sys.flags.optimize else ""  # (-O, as .pyc)
    return os.path.join(os.path.dirname(pyc), f"dataclass-methods."
                        f"{sys.implementation.cache_tag}{optimized}.marshal")


def install() -> MethodCode:
    """Route `dataclasses`' compiling through the package's table (once per process)."""
    current = getattr(dataclasses, "exec", None)
    method_code = getattr(current, "__self__", None)
    if isinstance(method_code, MethodCode):
        return method_code
    method_code = MethodCode(table_path(), current or builtins.exec)
    dataclasses.exec = method_code.exec  # type: ignore[attr-defined]
    return method_code


def build() -> int:
    """Make every dataclass of the package (each of its modules imported) and write the
    table whatever PYTHONDONTWRITEBYTECODE says, as `compileall` writes the .pyc files: what
    `make compile` and scripts/bench.py do, as a wheel's install compiles the bytecode. A
    module whose optional dependency is missing is left out (its classes are compiled when
    first made). The number of methods in the table."""
    import importlib
    import pkgutil

    method_code = install()
    package = sys.modules[PACKAGE]
    for module in pkgutil.walk_packages(package.__path__, PACKAGE + ".", onerror=lambda _: None):
        if module.name.rpartition(".")[2] == "__main__":
            continue  # (runs the command line)
        try:
            importlib.import_module(module.name)
        except Exception:  # an optional dependency missing: compiled on first use
            continue
    method_code.save(always=True)
    return len(method_code.codes or {})
