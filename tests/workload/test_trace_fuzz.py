"""Fuzzing trace files: a few hundred bad traces in every format, and valid ones.

A bad trace is a valid one (random rows in one of the formats) with exactly one defect: a bad
time (NaN, infinities, negative, out of range, not a number, before the previous row), a bad
length or token list (negative, huge, fractional, not a number), a bad timestamp, a bad JSON
line or value, too few columns, a header without a needed column, a duplicate request id,
non-UTF-8 bytes or a NUL byte. The contract: preparing the run raises ScenarioError naming
`workload.path`, the trace file and the defect's line; the command line exits 2 with one
`error:` line, no traceback and no output folder. A valid trace replays with every row's
request accounted for.
"""

from __future__ import annotations

import csv
import datetime
import io
import json
import math
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from blis_simpy.api import prepare, run
from blis_simpy.cli import app
from blis_simpy.core.errors import ScenarioError
from blis_simpy.metrics.warnings import FEW_REQUESTS
from tests.trace_helpers import (
    AZURE_HEADER,
    BLIS_HEADER,
    BURSTGPT_HEADER,
    assert_trace_error,
    trace_dict,
    trace_scenario,
)

FORMATS = ("blis", "azure", "burstgpt", "mooncake")
HEADERS = {"blis": BLIS_HEADER, "azure": AZURE_HEADER, "burstgpt": BURSTGPT_HEADER}
SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.function_scoped_fixture,
                                                        HealthCheck.too_slow]}

AZURE_START = datetime.datetime(2023, 11, 16, 18, 10)
BAD_SECONDS = ["inf", "-inf", "nan", "NaN", "-1", "-0.001", "abc", "", "1e400", "1e10", "0x10",
               "1,5"]
BAD_COUNTS = ["-1", "1.5", "abc", "", "10000001", "1e3", "99999999999999999999", "+-3", "٣",
              "9" * 5000]  # more digits than int() converts
BAD_TOKENS = ['[1,"a"]', "[1.5]", "[-1]", "1,2", "[1,,2]", "[", "{}", "[99999999999999999999]",
              "[true]", "[1 2]", "[,]", "[1,]", "null", "[[1]]", ""]
BAD_STAMPS = ["2023-13-01 00:00:00", "2023-11-16T", "yesterday", "", "2023-11-16 24:00:00",
              "2023-11-16 18:17:03.1234567890", "2023-02-29 10:00:00", "18:17:03", "nan"]
BAD_JSON_VALUES: dict[str, list[Any]] = {
    "timestamp": [-1, "5", None, math.nan, math.inf, 1e20, True, [1], 10**400],
    "input_length": [-1, 1.5, "3", None, 10_000_001, True, {}],
    "output_length": [-2, 2.5, "x", None, 10**30, False],
    "hash_ids": ["abc", [-1], [1.5], ["a"], [2**64], [None], 7, list(range(1, 400))],
}
BAD_LINES = ["{", "[]", "null", "1", "garbage", '{"timestamp": 1,', "{'timestamp': 1}", '"x"']
BAD_BYTES = [b"\xff", b"\xc3\x28", b"\x00", b"\xe9", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"]


# --- valid traces -------------------------------------------------------------------------------


@st.composite
def valid_rows(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Rows in arrival order: time (ms), lengths, an id, a model."""
    count = draw(st.integers(1, 12))
    gaps = draw(st.lists(st.integers(0, 400), min_size=count, max_size=count))
    rows = []
    clock = draw(st.integers(0, 1000))
    for i, gap in enumerate(gaps):
        clock += gap
        rows.append({"ms": clock, "prompt": draw(st.integers(0, 60)),
                     "output": draw(st.integers(1, 12)), "id": f"id-{i}",
                     "model": draw(st.sampled_from(["ChatGPT", "GPT-4"])),
                     "hash_ids": draw(st.lists(st.integers(0, 5), max_size=3))})
    return rows


def fields(fmt: str, row: dict[str, Any], index: int) -> list[str]:
    """A row's CSV fields in `fmt` (not mooncake)."""
    ms = row["ms"]
    if fmt == "blis":
        prompt = [(index * 97 + j) % 5000 for j in range(row["prompt"])]
        return [f"{ms / 1000:.3f}", row["id"], row["model"], json.dumps(prompt),
                json.dumps(list(range(row["output"])))]
    if fmt == "azure":
        stamp = AZURE_START + datetime.timedelta(milliseconds=ms)
        return [f"{stamp:%Y-%m-%d %H:%M:%S}.{stamp.microsecond:06d}0", str(row["prompt"]),
                str(row["output"])]
    return [f"{ms / 1000:.3f}", row["model"], str(row["prompt"]), str(row["output"]),
            str(row["prompt"] + row["output"]), "Conversation log"]


def record(row: dict[str, Any]) -> dict[str, Any]:
    blocks = -(-row["prompt"] // 512)
    return {"timestamp": row["ms"], "input_length": row["prompt"],
            "output_length": row["output"], "hash_ids": row["hash_ids"][:blocks]}


def csv_line(cells: list[str]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow(cells)
    return out.getvalue()


def lines_of(fmt: str, rows: list[dict[str, Any]]) -> list[str]:
    """The trace's lines (each ending in a newline), header first for the CSV formats."""
    if fmt == "mooncake":
        return [json.dumps(record(r)) + "\n" for r in rows]
    return [HEADERS[fmt] + "\n", *(csv_line(fields(fmt, r, i)) for i, r in enumerate(rows))]


# --- one defect ---------------------------------------------------------------------------------


@st.composite
def bad_trace(draw: st.DrawFn) -> tuple[bytes, int, str]:
    """(file content, the line the defect is on, what was done)."""
    fmt = draw(st.sampled_from(FORMATS))
    rows = draw(valid_rows())
    lines = lines_of(fmt, rows)
    first_row = 0 if fmt == "mooncake" else 1
    at = draw(st.integers(first_row, len(lines) - 1))
    kind = draw(st.sampled_from(["value", "encoding", "structure", "order"]))
    if kind == "encoding" or (kind == "order" and at == first_row):
        raw = [line.encode() for line in lines]
        line = draw(st.integers(0, len(lines) - 1))
        cut = draw(st.integers(0, len(raw[line]) - 1))
        raw[line] = raw[line][:cut] + draw(st.sampled_from(BAD_BYTES)) + raw[line][cut:]
        return b"".join(raw), line + 1, f"{fmt} bytes"
    if fmt == "mooncake":
        lines[at] = mooncake_defect(draw, rows, at, kind)
    elif kind == "structure" and draw(st.booleans()) and fmt != "blis":
        names = HEADERS[fmt].split(",")
        names.pop(draw(st.integers(0, 3 if fmt == "burstgpt" else 2)))
        lines[0] = ",".join(names) + "\n"
        return "".join(lines).encode(), 1, f"{fmt} header"
    else:
        lines[at] = csv_defect(draw, fmt, rows, at - 1, kind)
    return "".join(lines).encode(), at + 1, f"{fmt} {kind}"


def csv_defect(draw: st.DrawFn, fmt: str, rows: list[dict[str, Any]], index: int, kind: str
               ) -> str:
    cells = fields(fmt, rows[index], index)
    if kind == "structure":
        return csv_line(cells[: draw(st.integers(1, 2 if fmt == "azure" else 3))])
    if kind == "order":
        earlier = dict(rows[index], ms=rows[index - 1]["ms"] - draw(st.integers(1, 500)))
        return csv_line(fields(fmt, earlier, index))
    if fmt == "blis":
        column = draw(st.sampled_from([0, 1, 3, 4]))
        if column == 1:
            if index == 0:
                column = 3
            else:
                cells[1] = rows[draw(st.integers(0, index - 1))]["id"]  # a duplicate id
                return csv_line(cells)
        cells[column] = draw(st.sampled_from(BAD_SECONDS if column == 0 else BAD_TOKENS))
    elif fmt == "azure":
        column = draw(st.integers(0, 2))
        cells[column] = draw(st.sampled_from(BAD_STAMPS if column == 0 else BAD_COUNTS))
    else:
        column = draw(st.sampled_from([0, 2, 3]))
        cells[column] = draw(st.sampled_from(BAD_SECONDS if column == 0 else BAD_COUNTS))
    return csv_line(cells)


def mooncake_defect(draw: st.DrawFn, rows: list[dict[str, Any]], index: int, kind: str) -> str:
    data = record(rows[index])
    if kind == "structure":
        if draw(st.booleans()):
            return draw(st.sampled_from(BAD_LINES)) + "\n"
        del data[draw(st.sampled_from(["timestamp", "input_length", "output_length"]))]
    elif kind == "order":
        data["timestamp"] = rows[index - 1]["ms"] - draw(st.integers(1, 500))
    else:
        key = draw(st.sampled_from(sorted(BAD_JSON_VALUES)))
        data[key] = draw(st.sampled_from(BAD_JSON_VALUES[key]))
        if key == "hash_ids" and isinstance(data[key], list) and len(data[key]) > 1:
            data["input_length"] = 512 * (len(data[key]) - 1)  # one hash id too many
    return json.dumps(data) + "\n"


@settings(max_examples=300, **SETTINGS)
@given(bad_trace())
def test_a_bad_trace_is_refused_naming_the_file_and_the_line(tmp_path, case):
    content, line, what = case
    path = tmp_path / "trace.txt"
    path.write_bytes(content)
    try:
        prepare(trace_scenario(path))
    except ScenarioError as exc:
        assert_trace_error(exc, path, line)
        return
    raise AssertionError(f"{what}: no error for\n{content!r}")


@settings(max_examples=40, **SETTINGS)
@given(bad_trace())
def test_a_bad_trace_exits_2_without_a_traceback_or_output(tmp_path, case):
    content, line, _ = case
    path = tmp_path / "trace.txt"
    path.write_bytes(content)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(trace_dict(path)))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(scenario), "--out", str(out)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: workload.path: line {line}:")
    assert "Traceback" not in result.output and result.stdout == ""
    assert not out.exists()


# --- valid traces replay ------------------------------------------------------------------------


@settings(max_examples=80, **SETTINGS)
@given(st.sampled_from(FORMATS), valid_rows())
def test_a_valid_trace_replays_every_row(tmp_path, fmt, rows):
    path = tmp_path / "trace.txt"
    path.write_text("".join(lines_of(fmt, rows)))
    result = run(trace_scenario(path))
    req = result.requests
    assert len(req) == result.summary["arrived_requests"] == len(rows)
    assert (req.final_state == "completed").all()
    assert req.input_tokens.tolist() == [r["prompt"] for r in rows]
    assert req.output_tokens.tolist() == [r["output"] for r in rows]
    ids = [r["id"] for r in rows] if fmt == "blis" else [f"request_{i}" for i in
                                                          range(len(rows))]
    assert req.id.tolist() == ids
    arrivals = (req.arrival_s * 1000).round().astype(int).tolist()
    first = rows[0]["ms"] if fmt == "azure" else 0  # Azure: offsets from the first row
    assert arrivals == [r["ms"] - first for r in rows]
    if fmt in ("blis", "burstgpt"):
        assert req.model.tolist() == [r["model"] for r in rows]
    assert result.warnings == ([] if len(rows) >= FEW_REQUESTS else [  # a short trace
        f"only {len(rows)} request{'' if len(rows) == 1 else 's'} measured: percentiles and "
        f"rates from fewer than {FEW_REQUESTS} describe little (a p99 of so few is their "
        "maximum)"])

