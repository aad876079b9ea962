"""Workload sources: native arrivals and lengths, the compat generator, trace parsing."""

from __future__ import annotations

import numpy as np
import pytest

from blis_simpy.config.resolve import resolve
from blis_simpy.core.errors import ScenarioError
from blis_simpy.sim.modes import mode_of
from blis_simpy.workload.source import requests_of
from blis_simpy.workload.synthetic import round_half_away
from blis_simpy.workload.trace import read_trace
from tests.conftest import scenario, write_trace


def workload_requests(s):
    return requests_of(s, reference_draws=mode_of(s).reference_draws)


def test_native_arrivals_are_poisson_by_default():
    """Exponential gaps: mean 1/rate and coefficient of variation 1 (the reference spaces
    requests evenly). 20,000 gaps: the CV's standard error is under 0.01."""
    s = resolve(scenario(workload={"num_requests": 20_000, "rate_per_s": 50,
                                   "prompt": {"mean": 8, "stdev": 0, "min": 8, "max": 8},
                                   "output": {"mean": 1, "stdev": 0, "min": 1, "max": 1}}))
    arrivals = np.array([r.arrival for r in workload_requests(s)])
    gaps = np.diff(arrivals)
    assert abs(gaps.mean() - 20_000) / 20_000 < 0.03
    assert abs(gaps.std() / gaps.mean() - 1) < 0.05


def test_compat_arrivals_are_constant_spacing_truncated():
    s = resolve(scenario(compat="blis", workload={"num_requests": 4, "rate_per_s": 10}))
    assert [r.arrival for r in workload_requests(s)] == [0, 99999, 199998, 299997]


def test_native_lengths_are_clamped_gaussians_never_zero():
    s = resolve(scenario(workload={"num_requests": 3000,
                                   "prompt": {"mean": 20, "stdev": 40, "min": 1, "max": 60}}))
    lengths = np.array([r.input_len for r in workload_requests(s)])
    assert lengths.min() == 1 and lengths.max() == 60
    assert 20 < lengths.mean() < 32  # clamping shifts the mean up


def test_round_half_away_from_zero_like_go():
    assert [round_half_away(x) for x in (0.5, 1.5, 2.5, -0.5, 2.4999999)] == [1, 2, 3, -1, 2]
    assert round_half_away(0.49999999999999994) == 0


def test_trace_arrivals_round_natively_and_truncate_in_compat(tmp_path):
    path = write_trace(tmp_path / "t.csv", [(1.001, [1, 2], 1)])  # 1.001 * 1e6 = 1000999.99..
    assert read_trace(str(path), None, truncate=False)[0].arrival == 1001000
    assert read_trace(str(path), None, truncate=True)[0].arrival == 1000999


def test_trace_stops_at_the_first_arrival_past_the_horizon(tmp_path):
    path = write_trace(tmp_path / "t.csv", [(0.1, [1], 1), (0.3, [2], 1), (0.2, [3], 1)])
    assert len(read_trace(str(path), 200_000, truncate=False)) == 1


@pytest.mark.parametrize("row, problem", [
    ('abc,r,m,"[1]","[2]"', "not a number"),
    ('0.1,r,m,"[1, x]","[2]"', "JSON list"),
    ("0.1,r,m", "expected 5 columns"),
    ('-1,r,m,"[1]","[2]"', "out of range"),
    ('inf,r,m,"[1]","[2]"', "out of range"),
    ('nan,r,m,"[1]","[2]"', "out of range"),
    ('1e300,r,m,"[1]","[2]"', "out of range"),
    ('0.1,r,m,"[]","[2]"', "not a token list"),
    ('0.1,r,m,"[-3]","[2]"', "not a token list"),
    ('0.1,r,m,"[1.5]","[2]"', "not a token list"),
    ('0.1,r,m,"[true]","[2]"', "not a token list"),
    ('0.1,r,m,"[1]","[99999999999999]"', "not a token list"),
])
def test_bad_trace_rows_name_the_line(tmp_path, row, problem):
    path = tmp_path / "t.csv"
    path.write_text("arrival_time,request_id,model,prefill_tokens,decode_tokens\n" + row + "\n")
    with pytest.raises(ScenarioError, match=f"line 2: .*{problem}"):
        read_trace(str(path), None, truncate=False)


def test_unsorted_trace_is_an_error(tmp_path):
    path = write_trace(tmp_path / "t.csv", [(0.2, [1], 1), (0.1, [2], 1)])
    with pytest.raises(ScenarioError, match="sorted"):
        read_trace(str(path), None, truncate=False)


# --- robustness defect 2: traces that used to crash or run silently ------------------------------


def test_trace_prompt_longer_than_the_csv_field_limit_replays(tmp_path):
    """The csv module refuses fields over 131,072 characters: about 20k tokens of JSON."""
    prompt = list(range(1000, 31000))  # 30k tokens, ~180k characters
    path = write_trace(tmp_path / "t.csv", [(0.0, prompt, 2)])
    requests = read_trace(str(path), None, truncate=False)
    assert len(requests) == 1 and requests[0].input_len == 30_000
    import csv
    assert csv.field_size_limit() == 131_072  # the process-wide limit is left as it was


@pytest.mark.parametrize("content", [bytes(range(256)) * 4, b"\x89PNG\r\n\x1a\n\x00\x00",
                                     "arrival_time\n0.1,é".encode("latin-1")])
def test_binary_or_wrongly_encoded_trace_names_the_file_and_line(tmp_path, content):
    path = tmp_path / "t.csv"
    path.write_bytes(content)
    with pytest.raises(ScenarioError) as err:
        read_trace(str(path), None, truncate=False)
    assert err.value.path == "workload.path"
    assert "line" in str(err.value) and "arrival_time" in str(err.value)


def test_trace_with_a_broken_quote_names_its_line(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b'arrival_time,request_id,model,prefill_tokens,decode_tokens\n'
                     b'0.1,r,m,"[1]","[2]"\n0.2,r,m,"[1],"[2]"\n0.3,r,m,"[1]","[2]"\n')
    with pytest.raises(ScenarioError, match="line 3: "):
        read_trace(str(path), None, truncate=False)


@pytest.mark.parametrize("text", ["", "arrival_time,request_id,model,prefill_tokens,"
                                      "decode_tokens\n"])
def test_empty_trace_runs_with_no_requests(tmp_path, text):
    import blis_simpy
    from tests.conftest import trace_run_scenario

    path = tmp_path / "t.csv"
    path.write_text(text)
    result = blis_simpy.run(trace_run_scenario(path))
    assert result.summary["arrived_requests"] == 0 and len(result.requests) == 0
    assert result.evaluation is not None and result.evaluation.fitness == 0.0
    assert result.warnings and "no request arrived" in result.warnings[0]
