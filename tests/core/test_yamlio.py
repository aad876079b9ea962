"""Hostile YAML (blis_simpy/core/yamlio.py): alias bombs, self-reference and oversized
documents are refused at once, with the file or option named; numbers read as YAML 1.2 reads
them; control characters and values a tag cannot hold are one-line errors."""

from __future__ import annotations

import json
import time

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from blis_simpy.cli import app
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.yamlio import MAX_BYTES, dump_yaml, load_yaml
from tests.conftest import BASE


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


# --- YAML 1.2 numbers, control characters, tags ------------------------------------------------

SMALL = {**BASE, "workload": {**BASE["workload"], "num_requests": 5}}


def scenario_text(**workload: str) -> str:
    """The small test scenario as YAML, with workload values written as raw YAML text."""
    text = yaml.safe_dump({k: v for k, v in SMALL.items() if k != "workload"})
    fields = {**{k: str(v) for k, v in SMALL["workload"].items() if k in (
        "type", "num_requests", "rate_per_s")}, **workload}
    return text + "workload:\n" + "".join(f"  {k}: {v}\n" for k, v in fields.items())


def test_yaml12_decimal_exponent_is_a_number():
    assert load_yaml("a: 2.5e1\nb: 1e-9\nc: -3E+2\n", "s.yaml") == {
        "a": 25.0, "b": 1e-9, "c": -300.0}
    scenario = Scenario.from_yaml_text(scenario_text(rate_per_s="2.5e1"))
    assert scenario.workload.rate_per_s == 25.0


def test_yaml12_exponent_in_a_json_scenario_is_a_number(tmp_path):
    data = {**SMALL, "workload": {**SMALL["workload"], "rate_per_s": "RATE"}}
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data).replace('"RATE"', "2.5e1"))
    assert Scenario.from_yaml(path).workload.rate_per_s == 25.0


def test_yaml12_leading_zero_is_decimal_024_is_24_requests():
    scenario = Scenario.from_yaml_text(scenario_text(num_requests="024"))
    assert scenario.workload.num_requests == 24  # YAML 1.1 (PyYAML): octal 20
    assert load_yaml("a: 0o17\nb: 0x1F\n", "s.yaml") == {"a": 15, "b": 31}


def test_yaml12_sexagesimal_1_20_is_text_not_80():
    assert load_yaml("a: 1:20\n", "s.yaml") == {"a": "1:20"}  # YAML 1.1 (PyYAML): 80
    with pytest.raises(ScenarioError, match=r"workload\.num_requests: expected int, got "
                       r"str '1:20'"):
        Scenario.from_yaml_text(scenario_text(num_requests="1:20"))


def test_yaml11_booleans_and_dates_are_text():
    assert load_yaml("a: yes\nb: off\nc: 2024-01-02\nd: True\n", "s.yaml") == {
        "a": "yes", "b": "off", "c": "2024-01-02", "d": True}


def test_underscores_in_numbers_are_text_and_refused_by_a_number_field():
    with pytest.raises(ScenarioError, match=r"expected int, got str '1_000'"):
        Scenario.from_yaml_text(scenario_text(num_requests="1_000"))


@pytest.mark.parametrize(("text", "needle"), [
    ("a: !!float abc", "'abc' is not a valid !!float"),
    ("a: !!int x", "'x' is not a valid !!int"),
    ("a: !!timestamp x", "!!timestamp"),
    ("a: !!bool maybe", "!!bool"),
    ("a: 1" + "1" * 5000, "an integer of 5,001 digits"),
])
def test_a_value_its_tag_cannot_hold_is_a_yaml_error_not_a_traceback(text, needle):
    with pytest.raises(ScenarioError, match="not valid YAML at line 1") as err:
        load_yaml(text, "s.yaml")
    assert needle in str(err.value)


def test_control_character_in_a_comment_is_a_one_line_error_through_the_cli(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(scenario_text() + "# a comment \x01 here\n")
    out = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "o")])
    assert out.exit_code == 2 and "Traceback" not in out.output
    assert out.stderr.count("\n") == 1 and "control character U+0001" in out.stderr
    assert not (tmp_path / "o").exists()


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_control_character_anywhere_is_an_error_naming_its_line_and_column(data):
    text = scenario_text()
    at = data.draw(st.integers(0, len(text)))
    char = data.draw(st.sampled_from([chr(c) for c in range(32) if c not in (9, 10, 13)]
                                     + ["\x7f", "\ufffe"]))
    line = text[:at].count("\n") + 1
    column = at - text[:at].rfind("\n")
    with pytest.raises(ScenarioError) as err:
        Scenario.from_yaml_text(text[:at] + char + text[at:])
    assert f"line {line}, column {column}: control character U+{ord(char):04X}" in str(err.value)
    assert "\n" not in str(err.value)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_any_text_parses_or_is_one_scenario_error_of_one_line(text):
    try:
        load_yaml(text, "s.yaml")
    except ScenarioError as exc:
        assert "\n" not in str(exc)


SCALARS = st.one_of(st.text(max_size=12), st.integers(-10**20, 10**20),
                    st.floats(allow_nan=False), st.booleans(), st.none(),
                    st.sampled_from(["1e5", "yes", "024", "1:20", "0o17", "0x1F", ".inf",
                                     "True", "~", "2024-01-02", "<<", "=", "1_000"]))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=8), st.one_of(SCALARS, st.lists(SCALARS, max_size=4)),
                       max_size=6))
def test_written_yaml_reads_back_the_same(data):
    assert load_yaml(dump_yaml(data), "s.yaml") == data


JSON = st.recursive(st.none() | st.booleans() | st.integers(-10**30, 10**30)
                    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=10),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(JSON, st.booleans())
def test_a_json_document_reads_as_json_does(value, spaced):
    """YAML 1.2 is a superset of JSON: every number (2.5e1, 1E+2, -0.0) and string
    reads as a JSON parser reads it (surrogate-pair escapes of json.dumps joined), also written
    without spaces after separators."""
    text = json.dumps(value, separators=(", ", ": ") if spaced else (",", ":"))
    assert load_yaml(text, "s.json") == json.loads(text)


def test_an_emoji_escaped_by_json_dumps_is_one_character_and_a_lone_half_is_refused():
    """json.dumps writes an emoji as a surrogate pair; read as two lone surrogates it passed
    the loader and the run failed with a UnicodeEncodeError when it hashed the tenant id."""
    text = json.dumps({**SMALL, "workload": {"type": "tenants", "duration_s": 1,
                                             "tenants": [{"id": "\U0001f600"}]}})
    assert "\\ud83d\\ude00" in text
    assert Scenario.from_yaml_text(text).workload.tenants[0].id == "\U0001f600"
    with pytest.raises(ScenarioError, match="unpaired surrogate"):
        load_yaml('{"a": "\\udc00"}', "s.json")
