"""Trace replay (blis_simpy/workload/trace*.py): the reference's CSV of token ids and the
published traces (Azure, BurstGPT, Mooncake), as files. Each defect a bad trace used to cause
has a test named after it; then ids and columns surviving into the outputs, each published
format on a small file written from its description, and the library's trace scenarios."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import blis_simpy
from blis_simpy.api import prepare, run
from blis_simpy.cli import app
from blis_simpy.config.workload import TraceWorkload
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.hashing import block_hashes
from blis_simpy.sim.sample import sample
from blis_simpy.workload.source import requests_of
from blis_simpy.workload.trace import load_trace
from blis_simpy.workload.trace_file import TraceLines
from blis_simpy.workload.trace_published import azure_ns
from blis_simpy.workload.trace_tokens import HashBlockTokens, TokenMaker
from tests.trace_helpers import (
    AZURE_HEADER,
    BLIS_HEADER,
    assert_trace_error,
    azure_text,
    blis_text,
    burstgpt_text,
    mooncake_text,
    trace_dict,
    trace_scenario,
    write,
)
from tests.workload_helpers import TENANTS, scenario_dict

ROOT = Path(__file__).resolve().parents[2]
RUNNER = CliRunner()
ROWS = [(0.0, "a", "m", [1, 2, 3], [4, 5]), (0.1, "b", "m", [6, 7], [8])]


def load(path: Path, horizon: int | None = None, truncate: bool = False, **fields):
    return load_trace(TraceWorkload("trace", str(path), **fields), seed=7, horizon=horizon,
                      truncate=truncate)


def column(trace, field: str) -> list[int]:
    """A field of every request the trace replays."""
    return [getattr(req, field) for req in trace.requests()]


def refused(scenario_path: Path, workload: dict | None = None) -> ScenarioError:
    """The error preparing (not running) a replay of the trace raises."""
    with pytest.raises(ScenarioError) as err:
        prepare(trace_scenario(scenario_path, workload))
    return err.value


def cli_run(tmp_path: Path, data: dict) -> tuple[object, Path]:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    return RUNNER.invoke(app, ["run", str(scenario), "--out", str(out), "--quiet"]), out


# --- defects ------------------------------------------------------------------------------------


def test_a_prompt_longer_than_the_csv_field_limit_replays(tmp_path):
    prompt = list(range(100_000, 125_000))  # 25k ids, ~175k characters: over csv's 131,072
    path = write(tmp_path / "t.csv", blis_text([(0.0, "long", "m", prompt, [1, 2])]))
    limit = csv.field_size_limit()
    result = run(trace_scenario(path))
    assert result.requests.input_tokens.tolist() == [25_000]
    assert result.requests.final_state.tolist() == ["completed"]
    assert csv.field_size_limit() == limit  # the process-wide limit is restored


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "NaN", "1e400", "infinity"])
def test_an_infinite_or_nan_arrival_time_is_refused(tmp_path, value):
    path = write(tmp_path / "t.csv", blis_text([ROWS[0], (value, "b", "m", [1], [2])]))
    assert_trace_error(refused(path), path, 3, f"arrival_time {value!r}", "seconds from 0")


def test_a_non_monotone_arrival_time_is_refused(tmp_path):
    path = write(tmp_path / "t.csv", blis_text([(0.2, "a", "m", [1], [2]),
                                                (0.3, "b", "m", [1], [2]),
                                                (0.25, "c", "m", [1], [2])]))
    assert_trace_error(refused(path), path, 4, "0.25 s, before the previous row (0.3 s)",
                       "sorted by arrival time")


def test_a_negative_arrival_time_is_refused(tmp_path):
    path = write(tmp_path / "t.csv", blis_text([(-0.5, "a", "m", [1], [2])]))
    assert_trace_error(refused(path), path, 2, "arrival_time '-0.5'", "seconds from 0")


@pytest.mark.parametrize("content, line, needle", [
    (bytes(range(128, 256)) * 4, 1, "0x80"),  # not UTF-8
    (b"\x00\x01\x02\x03binary\n" * 3, 1, "NUL"),  # UTF-8, but binary
    (BLIS_HEADER.encode() + b"\n\x89PNG\r\n\x1a\n\x00\x00", 2, "0x89"),  # after a header
    (b"\x1f\x8b\x08\x00" + bytes(range(200, 256)), 1, "gzip"),  # a damaged gzip file
])
def test_binary_garbage_is_refused(tmp_path, content, line, needle):
    path = write(tmp_path / "t.csv", content)
    assert_trace_error(refused(path), path, line, needle)


@pytest.mark.parametrize("encoding, line", [("latin-1", 3), ("utf-16", 1), ("cp1252", 3)])
def test_a_wrong_encoding_is_refused(tmp_path, encoding, line):
    text = blis_text([ROWS[0], (0.1, "café", "m", [1], [2])])
    path = write(tmp_path / "t.csv", text.encode(encoding))
    assert_trace_error(refused(path), path, line, "is not UTF-8 text", "UTF-8")


def test_a_utf8_byte_order_mark_is_ignored(tmp_path):
    path = write(tmp_path / "t.csv", blis_text(ROWS).encode("utf-8-sig"))
    assert len(load(path)) == 2


@pytest.mark.parametrize("compat", ["none", "blis"])
@pytest.mark.parametrize("content, horizon", [
    (BLIS_HEADER + "\n", None),  # header only
    ("", None),  # an empty file
    (blis_text([(5.0, "late", "m", [1, 2], [3])]), 1.0),  # no row within the horizon
    (AZURE_HEADER + "\n", None),
    ("\n\n", None),  # blank lines: no header, no rows
])
def test_an_empty_trace_runs_and_writes_every_output(tmp_path, compat, content, horizon):
    path = write(tmp_path / "t.csv", content)
    data = trace_dict(path, compat=compat, horizon_s=horizon,
                      cluster={"instances": 2, "trace_level": "decisions"},
                      fitness={"weights": {"throughput": 1.0, "p99_ttft": 1.0}})
    result, out = cli_run(tmp_path, data)
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["arrived_requests"] == summary["completed_requests"] == 0
    assert summary["warnings"][0].startswith("no request arrived")
    assert "warning: no request arrived" in result.stderr
    evaluation = json.loads((out / "evaluation.json").read_text())
    assert evaluation["fitness"] == 0.0
    tables = {p.stem for p in out.iterdir()}
    assert {"requests", "steps", "instances", "anomalies", "decisions"} <= tables
    if compat == "blis":
        assert json.loads((out / "results.json").read_text())["requests"] == []
    res = run(trace_scenario(path, compat=compat, horizon_s=horizon))
    assert res.requests.empty and res.by_tenant().empty and res.by_slo_class().empty
    assert res.by_instance().empty


def test_an_empty_trace_samples_to_a_header_only_trace(tmp_path):
    path = write(tmp_path / "t.csv", BLIS_HEADER + "\n")
    out = tmp_path / "sampled.csv"
    assert sample(trace_scenario(path), out) == 0
    assert out.read_text().splitlines()[0].startswith(BLIS_HEADER)
    assert len(out.read_text().splitlines()) == 1


@pytest.mark.parametrize("row, line, needles", [
    ('abc,r,m,"[1]","[2]"', 2, ("arrival_time 'abc'",)),
    ('0.1,r,m,"[1, x]","[2]"', 2, ("prefill_tokens", "not a list of integers")),
    ('0.1,r,m,"[1]","[2.5]"', 2, ("decode_tokens", "not a list of integers")),
    ('0.1,r,m,"[1,,2]","[2]"', 2, ("prefill_tokens",)),
    ('0.1,r,m,"[1,2,]","[2]"', 2, ("prefill_tokens", "'[1,2,]'")),  # numpy would take it
    ('0.1,r,m,"[-1]","[2]"', 2, ("from -1 to -1",)),
    ('0.1,r,m,"[1]","[99999999999999999999]"', 2, ("decode_tokens",)),
    ('0.1,r,m,"1,2","[2]"', 2, ("not a list",)),
    ("0.1,r,m", 2, ("3 columns", "at least 5")),
    ('0.1,r,m,"[1]","[2]",t,c,s,-1,chat', 2, ("turn '-1' is not a turn number",)),
    ('0.1,r,m,"[1]","[2]",t,c,s,' + "9" * 5000 + ",chat", 2, ("turn '999",)),
    ('0.1,r,m,"[1]","[2', 2, ("decode_tokens",)),
])
def test_bad_reference_rows_name_the_line_and_the_value(tmp_path, row, line, needles):
    header = BLIS_HEADER + ",tenant_id,slo_class,session_id,turn,request_type"
    path = write(tmp_path / "t.csv", header + "\n" + row + "\n")
    with pytest.raises(ScenarioError) as err:
        load(path)
    assert_trace_error(err.value, path, line, *needles)


def test_a_missing_trace_file_names_workload_path(tmp_path):
    with pytest.raises(ScenarioError) as err:
        load(tmp_path / "nope.csv")
    assert err.value.path == "workload.path" and "cannot read" in str(err.value)


# --- times --------------------------------------------------------------------------------------


def test_trace_arrivals_round_natively_and_truncate_in_compat(tmp_path):
    path = write(tmp_path / "t.csv", blis_text([(1.001, "a", "m", [1, 2], [1])]))
    assert column(load(path), "arrival") == [1001000]  # 1.001 * 1e6 = 1000999.99..
    assert column(load(path, truncate=True), "arrival") == [1000999]


def test_trace_stops_at_the_first_arrival_past_the_horizon(tmp_path):
    rows = [(0.1, "a", "m", [1], [1]), (0.3, "b", "m", [2], [1]), (0.2, "c", "m", [3], [1])]
    path = write(tmp_path / "t.csv", blis_text(rows))
    assert len(load(path, horizon=200_000)) == 1  # the unsorted row after it is never read


# --- ids and columns ----------------------------------------------------------------------------


def labelled_trace(tmp_path: Path) -> Path:
    rows = [(0.01 * i, f"conv-{i}", "llama-x", list(range(i, i + 40)), [1] * 5,
             "acme" if i % 2 else "beta", "interactive", f"s{i % 3}", i % 3, "chat")
            for i in range(12)]
    return write(tmp_path / "t.csv", blis_text(rows, extra=True))


def test_trace_ids_tenants_classes_and_models_survive_into_every_table(tmp_path):
    path = labelled_trace(tmp_path)
    result = run(trace_scenario(
        path, cluster={"instances": 2, "trace_level": "decisions"},
        evaluation={"slo_targets": {"interactive": {"ttft_ms": 0.001}}}))
    ids = [f"conv-{i}" for i in range(12)]
    req = result.requests
    assert req.id.tolist() == ids
    assert req.tenant.tolist() == ["beta", "acme"] * 6
    assert set(req.slo_class) == {"interactive"} and set(req.model) == {"llama-x"}
    assert req.session.tolist() == [f"s{i % 3}" for i in range(12)]
    assert req.turn.tolist() == [i % 3 for i in range(12)]
    assert set(req.request_type) == {"chat"}
    assert set(result.decisions.request) == set(ids)
    violations = result.anomalies[result.anomalies.type == "slo_violation"]
    assert sorted(violations.requests) == sorted(ids)  # every one missed a 1 µs TTFT
    assert set(result.by_tenant().tenant) == {"acme", "beta"}


def test_compat_results_json_names_requests_the_reference_way(tmp_path):
    path = labelled_trace(tmp_path)
    result = run(trace_scenario(path, compat="blis"))
    rows = json.loads(result.reference.results_json())["requests"]
    assert [r["requestID"] for r in rows] == [f"request_{i}" for i in range(12)]
    assert result.requests.id.tolist() == [f"conv-{i}" for i in range(12)]


def test_a_sampled_workload_replays_with_its_ids_tenants_and_sessions(tmp_path):
    original = run(blis_simpy.Scenario.from_dict(scenario_dict(TENANTS)))
    out = tmp_path / "sampled.csv"
    sample(blis_simpy.Scenario.from_dict(scenario_dict(TENANTS)), out)
    replay = run(blis_simpy.Scenario.from_dict(
        scenario_dict({"type": "trace", "path": "sampled.csv"}), tmp_path))
    columns = ["id", "arrival_s", "tenant", "slo_class", "session", "turn", "request_type",
               "input_tokens", "output_tokens"]
    before = original.requests.sort_values(["arrival_s"], kind="stable")[columns]
    after = replay.requests[columns]
    assert len(after) > 20
    assert before.reset_index(drop=True).equals(after.reset_index(drop=True))
    assert set(replay.requests.model) == {TENANTS_MODEL}


TENANTS_MODEL = "meta-llama/llama-3.1-8b-instruct"  # what `workload sample` writes


def test_empty_request_ids_are_named_after_their_row(tmp_path):
    path = write(tmp_path / "t.csv", blis_text([(0.0, "", "m", [1], [2]),
                                                (0.1, "x", "m", [1], [2]),
                                                (0.2, "", "m", [1], [2])]))
    assert run(trace_scenario(path)).requests.id.tolist() == ["request_0", "x", "request_2"]


def test_duplicate_request_ids_are_refused(tmp_path):
    path = write(tmp_path / "t.csv", blis_text([(0.0, "a", "m", [1], [2]),
                                                (0.1, "request_2", "m", [1], [2]),
                                                (0.2, "", "m", [1], [2])]))
    assert_trace_error(refused(path), path, 4, "'request_2' is also on line 3", "unique")


def test_the_model_filter_keeps_the_rows_naming_its_models(tmp_path):
    rows = [(0.1 * i, f"r{i}", ("m1", "m2", "m3")[i % 3], [i + 1] * 20, [1]) for i in range(9)]
    path = write(tmp_path / "t.csv", blis_text(rows))
    result = run(trace_scenario(path, {"models": ["m1", "m3", "m9"]}))
    assert result.requests.id.tolist() == ["r0", "r2", "r3", "r5", "r6", "r8"]
    assert result.warnings[-1] == ("workload.models: no row of t.csv names 'm9' (rows name: "
                                   "m1, m2, m3)")  # (after: only 6 requests measured)


def test_a_model_filter_on_a_trace_without_models_is_refused(tmp_path):
    path = write(tmp_path / "t.csv", azure_text([("2023-11-16 18:17:03.9799600", 10, 5)]))
    err = refused(path, {"models": ["ChatGPT"]})
    assert err.path == "workload.models" and "azure" in str(err) and "burstgpt" in err.valid


# --- the published formats ----------------------------------------------------------------------


def test_azure_arrivals_are_offsets_from_the_first_row_to_the_microsecond(tmp_path):
    path = write(tmp_path / "t.csv", azure_text([
        ("2023-11-16 18:17:03.9799600", 374, 44),
        ("2023-11-16 18:17:04.0000004", 396, 109),  # +20040.4 µs
        ("2023-11-16 18:17:04.0000005", 879, 7),  # +20040.5 µs: rounds up
        ("2023-11-16 18:17:05", 45, 3),  # fewer fractional digits are fine
        ("2023-11-17 00:00:00.0000000", 1, 1),  # past midnight
    ]))
    trace = load(path)
    midnight = (24 * 3600 - (18 * 3600 + 17 * 60 + 3.97996)) * 1e6
    assert column(trace, "arrival") == [0, 20040, 20041, 1020040, round(midnight)]
    assert column(trace, "input_len") == [374, 396, 879, 45, 1]
    assert column(trace, "output_len") == [44, 109, 7, 3, 1]


EPOCH_2023 = 1700158623  # 2023-11-16 18:17:03 UTC


def test_azure_timestamps_as_epoch_seconds_or_date_times_and_kept(tmp_path):
    """Issue 31: epoch-second timestamps in the Azure layout were refused, and the original
    timestamps were lost. Both forms are read as the same instants (mixed in one file too),
    to the nanosecond, and each row's own timestamp is in the requests table."""
    dated = write(tmp_path / "dated.csv", azure_text([
        ("2023-11-16 18:17:03.9799600", 374, 44), ("2023-11-16 18:17:04.0000004", 396, 9)]))
    epoch = write(tmp_path / "epoch.csv", azure_text([
        (f"{EPOCH_2023}.9799600", 374, 44), ("2023-11-16 18:17:04.0000004", 396, 9)]))
    first, second = load(dated), load(epoch)
    assert column(first, "arrival") == column(second, "arrival") == [0, 20040]
    ns = [EPOCH_2023 * 10**9 + 979_960_000, (EPOCH_2023 + 1) * 10**9 + 400]
    assert column(first, "trace_time") == column(second, "trace_time") == ns
    req = run(trace_scenario(epoch)).requests
    assert req.trace_time_ns.tolist() == ns  # exact, beyond a float's digits
    assert str(pd.to_datetime(req.trace_time_ns[0], utc=True)) == \
        "2023-11-16 18:17:03.979960+00:00"


def test_published_trace_times_are_kept_and_other_workloads_add_no_column(tmp_path):
    burst = write(tmp_path / "b.csv", burstgpt_text([(0.5, "ChatGPT", 10, 5),
                                                     (1.25, "ChatGPT", 12, 4)]))
    moon = write(tmp_path / "m.jsonl", mooncake_text([
        {"timestamp": 10, "input_length": 10, "output_length": 5, "hash_ids": [1]},
        {"timestamp": 2510, "input_length": 10, "output_length": 5, "hash_ids": [1]}]))
    assert run(trace_scenario(burst)).requests.trace_time_ns.tolist() == [5 * 10**8,
                                                                          125 * 10**7]
    assert run(trace_scenario(moon)).requests.trace_time_ns.tolist() == [10**7, 2510 * 10**6]
    blis = write(tmp_path / "t.csv", blis_text(ROWS))
    assert "trace_time_ns" not in run(trace_scenario(blis)).requests


@pytest.mark.parametrize("fmt", ["azure", "mooncake"])
def test_zero_token_output_rows_are_skipped_and_counted(tmp_path, fmt):
    """Issue 31: a 0-token output row ran silently as a 1-token request. In the published
    traces such a row produced nothing: it is skipped, and the run says how many."""
    if fmt == "azure":
        text = azure_text([("2023-11-16 18:17:03", 10, 5), ("2023-11-16 18:17:04", 20, 0),
                           ("2023-11-16 18:17:05", 30, 2)])
    else:
        text = mooncake_text([{"timestamp": t, "input_length": n, "output_length": o,
                               "hash_ids": [1]} for t, n, o in ((0, 10, 5), (1, 20, 0),
                                                                 (2, 30, 2))])
    result = run(trace_scenario(write(tmp_path / "z.txt", text)))
    assert result.requests.input_tokens.tolist() == [10, 30]
    assert any("skipped 1 rows of z.txt: 0 output tokens" in w for w in result.warnings)


def test_zero_token_output_rows_of_the_reference_csv_run_as_one_token_and_say_so(tmp_path):
    """The reference replays an empty decode list as a request generating one token (compat
    parity keeps that); the run now says it does."""
    path = write(tmp_path / "t.csv", blis_text([(0.0, "a", "m", [1, 2, 3], []),
                                               (0.1, "b", "m", [6, 7], [8])]))
    result = run(trace_scenario(path))
    assert result.requests.generated_tokens.tolist() == [1, 1]
    assert any("1 rows of t.csv have no output tokens: each runs as a request generating "
               "one token" in w for w in result.warnings)


def test_an_azure_2024_trace_replays_with_unique_synthesised_tokens(tmp_path):
    """The 2024 week-long traces have 2023's columns; their timestamps carry a UTC offset and
    drop a zero fraction."""
    stamps = ["2024-05-10 00:00:00.009930+00:00", "2024-05-10 00:00:00.457+00:00",
              "2024-05-10 00:00:01+00:00", "2024-05-10 02:00:02.999999+02:00",
              "2024-05-10 00:00:03.000001Z"]
    lengths = [(1200, 20), (3800, 5), (64, 300), (16, 16), (2048, 1)]
    path = write(tmp_path / "code_1week.csv",
                 azure_text([(t, c, g) for t, (c, g) in zip(stamps, lengths, strict=True)]))
    result = run(trace_scenario(path))
    req = result.requests
    assert (req.arrival_s * 1e6).round().astype(int).tolist() == [
        0, 447070, 990070, 2990069, 2990071]
    assert req.input_tokens.tolist() == [c for c, _ in lengths]
    assert req.output_tokens.tolist() == [g for _, g in lengths]
    assert req.id.tolist() == [f"request_{i}" for i in range(5)]
    assert result.summary["cache_hit_rate"] == 0.0 and set(req.final_state) == {"completed"}


@pytest.mark.parametrize("stamp", ["2023-11-16", "2023-11-16 25:00:00", "2023-02-30 01:00:00",
                                   "16/11/2023 18:17:03", "2023-11-16 18:17:03.1234567890",
                                   "1700000000.1234567890", "-1700000000",
                                   "2023-11-16 18:17:04+1:00",
                                   "2023-11-16 18:17:04 UTC"])
def test_bad_azure_timestamps_name_the_line(tmp_path, stamp):
    path = write(tmp_path / "t.csv", azure_text([("2023-11-16 18:17:03.9799600", 10, 5),
                                                 (stamp, 10, 5)]))
    assert_trace_error(refused(path), path, 3, f"TIMESTAMP {stamp!r}", "YYYY-MM-DD")


@pytest.mark.parametrize("offset", ["+99:00", "+05:75", "-12:01", "+14:01", "+2400", "-9959"])
def test_an_impossible_timezone_offset_in_a_trace_is_refused(tmp_path, offset):
    path = write(tmp_path / "t.csv", azure_text([("2024-05-10 00:00:00.000000+00:00", 10, 5),
                                                 (f"2024-05-10 00:00:01{offset}", 10, 5)]))
    assert_trace_error(refused(path), path, 3, "no real UTC offset", "-12:00 to +14:00")


@settings(max_examples=100, deadline=None)
@given(st.sampled_from("+-"), st.integers(0, 99), st.integers(0, 99), st.booleans())
def test_any_timezone_offset_is_read_or_refused_as_a_clock_would(sign, hours, minutes, colon):
    offset = f"{sign}{hours:02d}{':' if colon else ''}{minutes:02d}"
    east = (hours * 60 + minutes) * 60 * (1 if sign == "+" else -1)
    real = minutes < 60 and -12 * 3600 <= east <= 14 * 3600
    lines = TraceLines("t.csv", io.BytesIO(b""))
    if real:
        assert azure_ns(lines, f"2024-05-10 00:00:00{offset}") == azure_ns(
            lines, "2024-05-10 00:00:00") - east * 10**9
    else:
        with pytest.raises(ScenarioError, match="no real UTC offset"):
            azure_ns(lines, f"2024-05-10 00:00:00{offset}")


@pytest.mark.parametrize(("offset", "seconds"), [("-12:00", 43_200), ("+14:00", -50_400),
                                                  ("+0530", -19_800), ("Z", 0)])
def test_real_timezone_offsets_shift_the_arrival_by_their_hours(tmp_path, offset, seconds):
    path = write(tmp_path / "t.csv", azure_text([("2024-05-10 00:00:00+00:00", 10, 5),
                                                 (f"2024-05-11 00:00:00{offset}", 10, 5)]))
    assert column(load(path), "arrival") == [0, (86_400 + seconds) * 1_000_000]


BURST_ROWS = [(5, "ChatGPT", 472, 18), (5, "GPT-4", 1054, 0), (7, "ChatGPT", 30, 210),
              (9, "GPT-4", 88, 46), (12, "ChatGPT", 2000, 0), (12, "ChatGPT", 700, 64)]


def test_burstgpt_skips_failed_rows_and_says_how_many(tmp_path):
    path = write(tmp_path / "burst.csv", burstgpt_text(BURST_ROWS))
    result, out = cli_run(tmp_path, trace_dict(path))
    assert result.exit_code == 0, result.output
    note = "skipped 2 rows of burst.csv: 0 response tokens (failed requests)"  # no folder
    assert json.loads((out / "summary.json").read_text())["warnings"][-1] == note
    assert f"warning: {note}" in result.stderr
    res = run(trace_scenario(path))
    assert res.requests.arrival_s.tolist() == [5.0, 7.0, 9.0, 12.0]
    assert res.requests.model.tolist() == ["ChatGPT", "ChatGPT", "GPT-4", "ChatGPT"]
    assert res.requests.input_tokens.tolist() == [472, 30, 88, 700]


def test_burstgpt_model_filter_replays_one_model(tmp_path):
    path = write(tmp_path / "burst.csv", burstgpt_text(BURST_ROWS))
    result = run(trace_scenario(path, {"models": ["GPT-4"]}))
    assert result.requests.output_tokens.tolist() == [46]
    assert result.warnings[-1] == "skipped 1 rows of burst.csv: 0 response tokens (failed requests)"


def mooncake_run(tmp_path: Path, hash_ids: list[list[int]], **changes):
    records = [{"timestamp": 1000 * i, "input_length": 512 * len(ids) - 100,
                "output_length": 8, "hash_ids": ids} for i, ids in enumerate(hash_ids)]
    path = write(tmp_path / "mooncake.jsonl", mooncake_text(records))
    return run(trace_scenario(path, **changes))


def test_mooncake_shared_hash_ids_hit_the_prefix_cache(tmp_path):
    result = mooncake_run(tmp_path, [[1, 2, 3], [1, 2, 4], [1, 2, 3, 5], [9, 10]])
    cached = result.requests.cached_tokens.tolist()
    # Request 1 shares blocks 1-2 (1024 tokens) with request 0; request 2 shares all of
    # request 0's full blocks; request 3 shares nothing.
    assert cached[0] == 0 and cached[1] == 1024 and cached[2] >= 1024 + 512 - 100 - 16
    assert cached[3] == 0
    assert result.summary["cache_hit_rate"] > 0


def test_mooncake_without_repeated_hash_ids_never_hits(tmp_path):
    result = mooncake_run(tmp_path, [[1, 2, 3], [4, 5], [6], [7, 8, 9]])
    assert result.summary["cache_hit_rate"] == 0.0
    assert result.requests.cached_tokens.tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize("block_size", [16, 64, 512])
def test_equal_hash_ids_give_equal_engine_blocks_at_any_block_size(block_size):
    tokens = HashBlockTokens(TokenMaker(3), 512)
    a = tokens.sequence(np.array([5, 6], dtype=np.uint64), 1024, 10)
    b = tokens.sequence(np.array([5, 7], dtype=np.uint64), 1024, 10)
    short = tokens.sequence(np.array([5, 6], dtype=np.uint64), 700, 10)  # the last block
    # only for its real length
    assert np.array_equal(a[:512], b[:512]) and not np.array_equal(a[512:1024], b[512:1024])
    assert np.array_equal(short[:700], a[:700]) and not np.array_equal(short[700:], a[700:710])
    ha, hb = block_hashes(a[:1024], block_size), block_hashes(b[:1024], block_size)
    shared = 512 // block_size
    assert ha[:shared] == hb[:shared] and ha[shared] != hb[shared]


def test_a_sampled_mooncake_replay_replays_the_same_as_a_token_id_trace(tmp_path):
    """`workload sample` writes the synthesised ids; replaying them caches the same tokens."""
    records = [{"timestamp": 700 * i, "input_length": 900 + 37 * i, "output_length": 9,
                "hash_ids": [1, 2] if i % 2 else [1, 3 + i]} for i in range(8)]
    path = write(tmp_path / "m.jsonl", mooncake_text(records))
    sampled = tmp_path / "sampled.csv"
    assert sample(trace_scenario(path), sampled) == 8
    before, after = run(trace_scenario(path)), run(trace_scenario(sampled))
    assert after.requests.cached_tokens.tolist() == before.requests.cached_tokens.tolist()
    assert sum(before.requests.cached_tokens) > 0


def test_length_only_tokens_follow_the_seed_and_are_never_shared(tmp_path):
    rows = [(f"2023-11-16 18:17:{i:02d}.0000000", 64, 8) for i in range(40)]
    path = write(tmp_path / "t.csv", azure_text(rows))

    def tokens(seed: int) -> list[np.ndarray]:
        source = requests_of(trace_scenario(path, seed=seed), reference_draws=False,
                             prehash=False)
        return [r.tokens for r in source.requests]

    first, again, other = tokens(1), tokens(1), tokens(2)
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert not any(np.array_equal(a, b) for a, b in zip(first, other, strict=True))
    assert len({tuple(t[:16].tolist()) for t in first}) == 40  # no shared first block


@pytest.mark.parametrize("key, value, needle", [
    ("timestamp", 10**400, "timestamp 1000"), ("timestamp", "12", "not a number"),
    ("input_length", 2.0, "not a token count"), ("output_length", True, "not a number"),
])
def test_bad_mooncake_values_name_the_line(tmp_path, key, value, needle):
    good = {"timestamp": 0, "input_length": 8, "output_length": 1}
    path = write(tmp_path / "m.jsonl", mooncake_text([good, {**good, key: value}]))
    assert_trace_error(refused(path), path, 2, key, needle)


def test_mooncake_hash_ids_beyond_the_prompt_are_refused(tmp_path):
    path = write(tmp_path / "m.jsonl", mooncake_text([
        {"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]},
        {"timestamp": 1, "input_length": 1025, "output_length": 1, "hash_ids": [1, 2, 3, 4]},
    ]))
    assert_trace_error(refused(path), path, 2, "4 hash_ids for an input_length of 1025",
                       "at most ceil(input_length / 512) = 3")


# --- detection ----------------------------------------------------------------------------------


SAMPLES = {
    "blis": blis_text(ROWS),
    "azure": azure_text([("2023-11-16 18:17:03.9799600", 10, 5),
                         ("2023-11-16 18:17:04.1", 3, 2)]),
    "burstgpt": burstgpt_text([(0, "ChatGPT", 10, 5), (1.5, "GPT-4", 3, 2)]),
    "mooncake": mooncake_text([{"timestamp": 0, "input_length": 10, "output_length": 5,
                                "hash_ids": [1]},
                               {"timestamp": 1500, "input_length": 3, "output_length": 2}]),
}


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_the_format_is_detected_from_the_first_line(tmp_path, fmt):
    path = write(tmp_path / "t.txt", SAMPLES[fmt])
    auto, named = load(path), load(path, format=fmt)
    assert column(auto, "arrival") == column(named, "arrival")
    assert column(auto, "input_len") == column(named, "input_len")
    assert len(auto) == 2 and column(auto, "arrival")[1] > 0


@pytest.mark.parametrize("fmt, other", [("azure", "blis"), ("burstgpt", "azure"),
                                        ("blis", "mooncake"), ("azure", "mooncake")])
def test_a_named_format_that_does_not_fit_the_file_names_line_one(tmp_path, fmt, other):
    path = write(tmp_path / "t.txt", SAMPLES[other])
    with pytest.raises(ScenarioError) as err:
        load(path, format=fmt)
    assert_trace_error(err.value, path, 1 if fmt != "blis" else 2)


def test_an_unknown_header_lists_the_formats(tmp_path):
    path = write(tmp_path / "t.csv", "time,prompt,output\n0,1,2\n")
    err = refused(path)
    assert_trace_error(err, path, 1, "'time,prompt,output' is no known trace header",
                       "workload.format")
    for fmt in ("blis:", "azure:", "burstgpt:", "mooncake:"):
        assert fmt in err.valid


def test_format_blis_reads_a_reference_trace_with_any_header(tmp_path):
    path = write(tmp_path / "t.csv", "a,b,c,d,e\n" + blis_text(ROWS).split("\n", 1)[1])
    assert len(load(path, format="blis")) == 2


def test_a_bad_format_name_lists_the_formats(tmp_path):
    with pytest.raises(ScenarioError) as err:
        trace_scenario(tmp_path / "t.csv", {"format": "csv"})
    assert err.value.path == "workload.format"
    for fmt in ("auto", "blis", "azure", "burstgpt", "mooncake"):
        assert repr(fmt) in err.value.valid


# --- the library's trace scenarios --------------------------------------------------------------


@pytest.mark.parametrize("name", ["trace-azure-code", "trace-burstgpt", "trace-mooncake"])
def test_library_trace_scenarios_replay_their_sample_files_quickly(name):
    result = run(ROOT / "scenarios" / f"{name}.yaml")
    assert result.wall_time_s < 2
    assert set(result.requests.final_state) == {"completed"}
    hit_rate = result.summary["cache_hit_rate"]
    assert hit_rate > 0.5 if name == "trace-mooncake" else hit_rate == 0
    skipped = [w for w in result.warnings if w.startswith("skipped")]
    assert bool(skipped) == (name == "trace-burstgpt")
    if name == "trace-burstgpt":
        assert set(result.requests.model) == {"ChatGPT"}
