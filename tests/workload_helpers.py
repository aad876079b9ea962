"""Helpers shared by the tests of workload files: sampling a run to a trace CSV
(tests/workload/test_export.py, tests/sim/test_sample.py) and converting foreign workload
formats (tests/compat/test_workload_spec.py, tests/workload/test_inference_perf.py)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from blis_simpy.api import run
from blis_simpy.cli import app
from blis_simpy.config.scenario import Scenario
from tests.conftest import BASE, DATA, merge

WORKLOAD = DATA / "workload"
RUNNER = CliRunner()
LLAMA = "meta-llama/llama-3.1-8b-instruct"

TENANTS: dict[str, Any] = {
    "type": "tenants", "rate_per_s": 20, "duration_s": 2,
    "tenants": [
        {"id": "chat", "slo_class": "interactive", "request_type": "chat",
         "chat": {"turns": {"type": "constant", "value": 3},
                  "think_time_s": {"type": "constant", "value": 0.2}},
         "prompt": {"type": "gaussian", "mean": 50, "stdev": 10, "min": 5, "max": 100},
         "output": {"type": "gaussian", "mean": 20, "stdev": 5, "min": 1, "max": 40}},
        # Shorter than one KV block (16 tokens): the engine re-hashes these on admission.
        {"id": "tiny,batch", "slo_class": "batch", "rate_fraction": 0.5,
         "prompt": {"type": "constant", "value": 3}, "output": {"type": "constant", "value": 1}},
    ],
}


def scenario_dict(workload: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """The shared test scenario around a workload section."""
    data = merge(BASE, {"cluster": {"instances": 2}, **changes})
    data["workload"] = workload
    return data


def write_yaml(path: Path, data: Any) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def cli(*args: Any):
    return RUNNER.invoke(app, [str(a) for a in args])


def assert_usage_error(result, *needles: str) -> None:
    """Exit 2, one `error:` line naming the problem, no traceback, nothing on stdout."""
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for needle in needles:
        assert needle in lines[0]
    assert "Traceback" not in result.output
    assert result.stdout == ""


def read_rows(path: Path) -> list[list[str]]:
    with path.open(newline="") as f:
        return list(csv.reader(f))


def run_quickly(workload: dict[str, Any], max_requests: int = 30) -> Any:
    """Load the converted section in a minimal scenario and run a few requests of it."""
    small = {**workload, "max_requests": max_requests}
    result = run(Scenario.from_dict(scenario_dict(small)))
    assert result.summary["completed_requests"] > 0
    return result

