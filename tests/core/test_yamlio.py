"""Hostile YAML (blis_simpy/core/yamlio.py): alias bombs, self-reference and oversized
documents are refused at once, with the file or option named."""

from __future__ import annotations

import time

import pytest
from typer.testing import CliRunner

from blis_simpy.cli import app
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.yamlio import MAX_BYTES, load_yaml


def bomb(levels: int) -> str:
    lines = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def test_hostile_yaml_alias_bomb_is_refused_fast():
    started = time.perf_counter()
    with pytest.raises(ScenarioError, match=r"expands to .* values through its aliases"):
        load_yaml(bomb(12), "s.yaml")  # 9**12 values when expanded
    assert time.perf_counter() - started < 5.0  # unguarded, it took 51 s and 6 GB


def test_hostile_yaml_alias_bomb_in_policy_params_exits_2_through_the_cli(tmp_path):
    path = tmp_path / "s.yaml"
    body = bomb(12).replace("\n", "\n      ")
    path.write_text("version: 1\nmodel: {name: x}\npolicies:\n  routing:\n    type: weighted\n"
                    f"    params:\n      {body}\n")
    out = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "o")])
    assert out.exit_code == 2
    assert str(path) in out.stderr and "aliases" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "o").exists()


def test_modest_aliases_are_fine():
    assert load_yaml(bomb(3), "s.yaml")["a2"][0][0] == [1] * 9


def test_an_alias_inside_its_own_value_is_refused():
    with pytest.raises(ScenarioError, match="refers to a value that contains it"):
        load_yaml("a: &a [1, *a]\n", "s.yaml")


def test_an_oversized_document_is_refused_before_parsing():
    with pytest.raises(ScenarioError, match="limit"):
        load_yaml("#" * (MAX_BYTES + 1), "s.yaml")


def test_deep_nesting_is_an_error_not_a_crash():
    with pytest.raises(ScenarioError):
        load_yaml("[" * 100_000 + "]" * 100_000, "s.yaml")


def test_a_key_written_twice_is_an_error_naming_both_lines():
    with pytest.raises(ScenarioError, match=r"'model' appears twice .* \(lines 2 and 4\)"):
        load_yaml("version: 1\nmodel: {name: a}\nname: x\nmodel: {name: b}\n", "s.yaml")
    assert load_yaml("a: &base {x: 1}\nb: {<<: *base, y: 2}\n", "s.yaml") == {
        "a": {"x": 1}, "b": {"x": 1, "y": 2}}  # a merge key is not a duplicate
