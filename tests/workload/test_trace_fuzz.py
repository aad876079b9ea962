"""Trace files, generated: every bad one is refused before the run with an error naming
`workload.path` and a line; every valid one replays with each request accounted for."""

from __future__ import annotations

import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blis_simpy
from blis_simpy.api import prepare
from blis_simpy.core.errors import ScenarioError
from tests.conftest import trace_run_scenario

HEADER = "arrival_time,request_id,model,prefill_tokens,decode_tokens"
GOOD_ROW = '{t},r{i},m,"[1, 2, 3]","[7, 8]"'
BAD_TIMES = ["inf", "-inf", "nan", "-1", "-0.5", "1e300", "abc", "", "0x10", "1,5"]
BAD_TOKENS = ["[]", "[-1]", "[1.5]", "[true]", "[1, 'x']", "{}", "1", "[99999999999999]",
              "[[1]]", "null", "[1,", ""]


@st.composite
def bad_traces(draw: st.DrawFn) -> tuple[bytes, int]:
    """A trace with one bad row among good ones, and that row's line number."""
    good = draw(st.integers(0, 5))
    rows = [GOOD_ROW.format(t=0.1 * i, i=i) for i in range(good)]
    kind = draw(st.sampled_from(["time", "tokens", "columns", "order", "binary"]))
    start = 0.1 * good
    if kind == "time":
        bad = f'{draw(st.sampled_from(BAD_TIMES))},r,m,"[1]","[2]"'
    elif kind == "tokens":
        column = draw(st.sampled_from([3, 4]))
        fields = [f"{start:.3f}", "r", "m", '"[1]"', '"[2]"']
        fields[column] = '"' + draw(st.sampled_from(BAD_TOKENS)).replace('"', "'") + '"'
        bad = ",".join(fields)
    elif kind == "columns":
        bad = ",".join(draw(st.lists(st.text(string.ascii_letters + "0123456789.", max_size=5),
                                     max_size=4)))
    elif kind == "order":
        rows.append(GOOD_ROW.format(t=start + 1.0, i=good))
        bad = GOOD_ROW.format(t=start + 0.5, i=good + 1)
    else:
        body = "\n".join([HEADER, *rows]).encode() + b"\n"
        return body + b"\xff" + draw(st.binary(min_size=1, max_size=40)), len(rows) + 2
    rows.append(bad)
    return ("\n".join([HEADER, *rows]) + "\n").encode(), len(rows) + 1


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(bad_traces())
def test_bad_trace_is_refused_before_the_run_naming_path_and_line(tmp_path_factory, case):
    content, line = case
    path: Path = tmp_path_factory.mktemp("trace") / "t.csv"
    path.write_bytes(content)
    with pytest.raises(ScenarioError) as err:
        prepare(trace_run_scenario(path))
    assert err.value.path == "workload.path"
    assert f"line {line}" in str(err.value), (content, str(err.value))


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.floats(0, 5), st.integers(1, 400), st.integers(1, 60)),
                max_size=25))
def test_valid_trace_replays_every_request(tmp_path_factory, rows):
    rows = sorted(rows)
    lines = [HEADER] + [f'{t!r},id{i},m,"{list(range(1, n + 1))}","{list(range(out))}"'
                        for i, (t, n, out) in enumerate(rows)]
    path: Path = tmp_path_factory.mktemp("trace") / "t.csv"
    path.write_text("\n".join(lines) + "\n")
    result = blis_simpy.run(trace_run_scenario(path))
    summary = result.summary
    assert summary["arrived_requests"] == len(rows) == len(result.requests)
    assert summary["completed_requests"] + summary["rejected_requests"] \
        + summary["still_queued"] + summary["still_running"] == len(rows)
    assert list(result.requests.input_tokens) == [n for _, n, _ in rows]
