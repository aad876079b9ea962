"""Errors are one printable line (blis_simpy/core/errors.py): whatever a file name, a YAML key,
a trace field or an override holds (newlines, terminal escape sequences, bidirectional
overrides), the message shows it escaped, so it can neither break the line nor take over the
terminal that prints it."""

from __future__ import annotations

import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from blis_simpy.cli import app
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import ScenarioError
from tests.conftest import BASE

NASTY = st.lists(st.sampled_from(["\n", "\r", "\x1b[31m", "\x07", "\x00", "\u202e", "\u2066",
                                  "\x9b", "a", "é", "\t"]), min_size=1, max_size=8).map("".join)


def shown_safely(text: str) -> bool:
    return not any(unicodedata.category(c) == "Cc" or 0x202A <= ord(c) <= 0x202E
                   or 0x2066 <= ord(c) <= 0x2069 for c in text)


@settings(max_examples=100, deadline=None)
@given(NASTY, NASTY, NASTY)
def test_an_error_is_one_printable_line_whatever_its_parts_hold(path, problem, file):
    assert shown_safely(str(ScenarioError(path, problem, problem, file)))


@settings(max_examples=50, deadline=None)
@given(NASTY)
def test_a_control_character_in_a_yaml_key_cannot_break_the_error_line(key):
    data = {**BASE, "workload": {**BASE["workload"], key: 1}}
    try:
        Scenario.from_dict(data)
    except ScenarioError as exc:
        assert shown_safely(str(exc)) and "unknown key" in str(exc)


def test_a_newline_in_an_override_key_is_one_line_through_the_cli():
    done = CliRunner().invoke(app, ["validate", "quickstart", "--set", "a\nb\x1b[2J=1"])
    assert done.exit_code == 2
    assert done.stderr.count("\n") == 1 and "a\\nb\\x1b[2J: is not a dotted key" in done.stderr
