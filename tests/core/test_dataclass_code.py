"""The dataclass methods' table (core/dataclass_code.py): a class made from the table behaves
exactly as one `dataclasses` compiles, other packages' classes never enter it, and a table
that is missing, foreign or unwritable only costs the compiling it would have saved."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from blis_simpy.core import dataclass_code
from blis_simpy.core.dataclass_code import HEADER, MethodCode

SOURCE = '''
import dataclasses

@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    y: float = 0.5
    tags: tuple[str, ...] = ()

@dataclasses.dataclass(order=True)
class Box:
    side: int
    label: str = dataclasses.field(default="box", compare=False)
'''


@pytest.fixture(autouse=True)
def writing_bytecode(monkeypatch: pytest.MonkeyPatch) -> None:
    """As Python runs by default (this suite may run under PYTHONDONTWRITEBYTECODE=1)."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)


def made(module_name: str, method_code: MethodCode) -> types.ModuleType:
    """SOURCE's classes made as module `module_name` with `method_code` as dataclasses'
    exec."""
    module = types.ModuleType(module_name)
    sys.modules[module_name] = module
    saved = dataclasses.exec  # type: ignore[attr-defined]
    dataclasses.exec = method_code.exec  # type: ignore[attr-defined]
    try:
        exec(SOURCE, module.__dict__)
    finally:
        dataclasses.exec = saved  # type: ignore[attr-defined]
        del sys.modules[module_name]
    return module


def behaviour(module: types.ModuleType) -> list[object]:
    point, box = module.Point, module.Box
    p = point(1, tags=("a",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 2
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'x'"):
        point()
    return [repr(p), p == point(1, 0.5, ("a",)), p == point(2), hash(p) == hash(point(1, 0.5,
            ("a",))), repr(box(3)), box(1, "a") < box(2, "b"), box(1, "a") == box(1, "b"),
            [f.name for f in dataclasses.fields(point)], p.__init__.__code__.co_filename,
            point.__init__.__code__.co_varnames]


def test_a_class_made_from_the_table_is_the_one_dataclasses_compiles(tmp_path: Path) -> None:
    path = str(tmp_path / "table.marshal")
    plain = made("blis_simpy.example_plain", MethodCode(None))
    first = MethodCode(path)
    compiled = made("blis_simpy.example", first)
    first.save()
    assert first.compiled == len(first.used) >= 8  # 2 classes' __init__, __repr__, __eq__, ...
    again = MethodCode(path)
    loaded = made("blis_simpy.example", again)
    assert again.compiled == 0 and again.used == first.used  # nothing parsed the second time
    assert behaviour(loaded) == behaviour(compiled) == behaviour(plain)
    assert Path(path).read_bytes().startswith(HEADER)


def test_other_packages_classes_go_to_the_builtin_exec(tmp_path: Path) -> None:
    method_code = MethodCode(str(tmp_path / "table.marshal"))
    behaviour(made("someone_else.models", method_code))
    behaviour(made("blis_simpy_lookalike", method_code))
    assert method_code.used == set() and method_code.compiled == 0


@pytest.mark.parametrize("content", [b"", b"not a table", HEADER + b"\xff\x00garbage",
                                     HEADER[:-1] + b"?" + b"{}", HEADER + b"N"])
def test_a_missing_or_foreign_table_is_rebuilt(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "table.marshal"
    path.write_bytes(content)
    method_code = MethodCode(str(path))
    behaviour(made("blis_simpy.example", method_code))
    assert method_code.compiled == len(method_code.used) > 0
    method_code.save()
    assert MethodCode(str(path)).load().keys() == method_code.used


def test_an_unwritable_folder_or_no_bytecode_writes_nothing(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    (tmp_path / "file").write_text("")
    unwritable = MethodCode(str(tmp_path / "file" / "table.marshal"))  # a file as the folder
    behaviour(made("blis_simpy.example", unwritable))
    unwritable.save()  # no error
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    quiet = MethodCode(str(tmp_path / "table.marshal"))
    behaviour(made("blis_simpy.example", quiet))
    quiet.save()
    assert not (tmp_path / "table.marshal").exists()
    quiet.save(always=True)  # as `build` does, like compileall
    assert (tmp_path / "table.marshal").exists()
    assert sorted(os.listdir(tmp_path)) == ["file", "table.marshal"]  # no temporary file


def test_an_overgrown_table_keeps_what_its_last_writer_used(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    path = str(tmp_path / "table.marshal")
    stale = MethodCode(path)
    stale.load()
    assert stale.codes is not None
    for i in range(5):
        stale.code(f"x = {i}\n")
    stale.save()
    monkeypatch.setattr(dataclass_code, "MAX_ENTRIES", 6)
    fresh = MethodCode(path)
    behaviour(made("blis_simpy.example", fresh))
    fresh.save()
    assert MethodCode(path).load().keys() == fresh.used


def test_the_package_installs_it_once_and_a_run_compiles_nothing_after_build() -> None:
    """In a fresh interpreter, after `build` (as `make compile` and bench.py run it): loading
    what a run loads compiles no dataclass method."""
    probe = ("import dataclasses, blis_simpy, blis_simpy.sim.run, blis_simpy.cli; "
             "from blis_simpy.core.dataclass_code import install; "
             "m = dataclasses.exec.__self__; assert install() is m; "
             "print(m.compiled, len(m.used))")
    subprocess.run([sys.executable, "-c", "from blis_simpy.core.dataclass_code import build; "
                    "build()"], check=True, timeout=300)
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True,
                         text=True, timeout=120).stdout.split()
    assert out[0] == "0" and int(out[1]) > 500
