"""The reference's flag syntax and Go's number parsing (compat/flags.py)."""

from __future__ import annotations

import pytest

from blis_simpy.compat.convert import blis_command
from blis_simpy.compat.flags import go_float, go_int
from blis_simpy.core.errors import ScenarioError
from tests.compat.helpers import BASE, COEFFS, LLAMA


def test_equals_syntax_and_single_dash_match_space_syntax():
    spaced = blis_command(["run", "--model", LLAMA, "--rate", "10", "--seed", "7", *COEFFS])
    equals = blis_command(["run", f"--model={LLAMA}", "--rate=10", "-seed=7",
                           "-alpha-coeffs", "1,2,3", "--beta-coeffs=4,5,6"])
    assert equals == spaced
    assert spaced["seed"] == 7 and spaced["workload"]["rate_per_s"] == 10.0


def test_go_number_syntax():
    assert go_int("0x10") == 16 and go_int("010") == 8 and go_int("-3") == -3
    assert go_int("1_000") == 1000  # base 0 allows underscores between digits
    assert go_float("1e3") == 1000.0 and go_float("0x1p-2") == 0.25
    for bad in ("1.5", "1__0", " 1", "9223372036854775808"):
        with pytest.raises(ValueError):
            go_int(bad)
    for bad in ("1_0", "1e400", "", "0x1"):
        with pytest.raises(ValueError):
            go_float(bad)


def test_first_positional_must_be_run():
    with pytest.raises(ScenarioError, match="run"):
        blis_command(["simulate", *BASE])
    with pytest.raises(ScenarioError, match="run"):
        blis_command(BASE)


def test_summarize_trace_takes_no_separate_value():
    with pytest.raises(ScenarioError, match="unexpected argument"):
        blis_command(["run", *BASE, *COEFFS[:2], "--summarize-trace", "false"])
