"""Writing a run's arrivals as a trace CSV in the reference's format (workload/export.py),
through `workload sample`."""

from __future__ import annotations

import pytest

from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import ScenarioError
from blis_simpy.sim.sample import sample, sample_requests
from blis_simpy.workload import export
from blis_simpy.workload.export import EXTRA_COLUMNS, REFERENCE_COLUMNS
from tests.workload_helpers import LLAMA, TENANTS, cli, read_rows, scenario_dict, write_yaml


def test_sample_writes_reference_columns_then_tenant_columns(tmp_path):
    scenario = write_yaml(tmp_path / "s.yaml", scenario_dict(TENANTS))
    out = tmp_path / "trace.csv"
    result = cli("workload", "sample", scenario, "--out", out)
    assert result.exit_code == 0, result.output
    rows = read_rows(out)
    assert tuple(rows[0]) == REFERENCE_COLUMNS + EXTRA_COLUMNS
    expected = sample_requests(Scenario.from_dict(scenario_dict(TENANTS)))
    assert len(rows) - 1 == len(expected) > 20
    assert {len(r) for r in rows} == {10}
    arrivals = [float(r[0]) for r in rows[1:]]
    assert arrivals == sorted(arrivals)
    assert all(len(r[0].partition(".")[2]) == 6 for r in rows[1:])
    for row, (req, tokens) in zip(rows[1:], expected, strict=True):
        assert row[1] == req.name and row[2] == LLAMA
        assert len(eval_list(row[3])) == req.input_len and len(eval_list(row[4])) == req.output_len
        assert eval_list(row[3]) + eval_list(row[4]) == tokens.tolist()
    chat = [r for r in rows[1:] if r[5] == "chat"]
    assert {r[8] for r in chat} == {"0", "1", "2"} and all(r[7] and r[9] == "chat" for r in chat)
    tiny = [r for r in rows[1:] if r[5] == "tiny,batch"]
    assert tiny and all(r[6] == "batch" and r[9] == "completion" for r in tiny)
    text = out.read_text()
    assert '"[' in text and ',"tiny,batch",' in text  # token lists and commas quoted


def eval_list(text: str) -> list[int]:
    assert text.startswith("[") and " " not in text
    return [int(t) for t in text[1:-1].split(",") if t]


def test_sample_failure_leaves_no_file(tmp_path, monkeypatch):
    out = tmp_path / "trace.csv"
    out.write_text("old\n")
    calls = []

    def failing(req, tokens, model):
        calls.append(req)
        if len(calls) > 3:
            raise RuntimeError("boom")
        return "x\n"

    monkeypatch.setattr(export, "trace_line", failing)
    with pytest.raises(RuntimeError):
        sample(Scenario.from_dict(scenario_dict(TENANTS)), out, force=True)
    assert out.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["trace.csv"]


def test_sample_refuses_an_existing_file_without_force(tmp_path):
    out = tmp_path / "notes.csv"
    out.write_text("a user's own file\n")
    with pytest.raises(ScenarioError, match=r"already exists.*--force"):
        sample(Scenario.from_dict(scenario_dict(TENANTS)), out)
    assert out.read_text() == "a user's own file\n"

