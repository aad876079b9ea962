"""Writing small trace files in every format `workload: {type: trace}` reads, and checking the
errors bad ones raise (tests/workload/test_trace.py, tests/workload/test_trace_fuzz.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import ScenarioError
from blis_simpy.workload.export import EXTRA_COLUMNS, REFERENCE_COLUMNS
from tests.conftest import BASE, merge

BLIS_HEADER = ",".join(REFERENCE_COLUMNS)
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"
BURSTGPT_HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"


def blis_text(rows: Sequence[tuple[Any, ...]], extra: bool = False) -> str:
    """Rows (arrival, id, model, prompt ids, output ids[, the export's extra columns])."""
    header = BLIS_HEADER + ("," + ",".join(EXTRA_COLUMNS) if extra else "")
    lines = [header]
    for arrival, rid, model, prompt, output, *rest in rows:
        ids = [f'"[{",".join(map(str, prompt))}]"', f'"[{",".join(map(str, output))}]"']
        lines.append(",".join([str(arrival), rid, model, *ids, *map(str, rest)]))
    return "\n".join(lines) + "\n"


def azure_text(rows: Sequence[tuple[str, Any, Any]]) -> str:
    return "\n".join([AZURE_HEADER, *(f"{t},{c},{g}" for t, c, g in rows)]) + "\n"


def burstgpt_text(rows: Sequence[tuple[Any, str, Any, Any]]) -> str:
    """Rows (seconds, model, request tokens, response tokens)."""
    lines = [BURSTGPT_HEADER]
    for t, model, request, response in rows:
        total = request + response if isinstance(request, int) and isinstance(response, int) \
            else 0
        lines.append(f"{t},{model},{request},{response},{total},Conversation log")
    return "\n".join(lines) + "\n"


def mooncake_text(records: Sequence[dict[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def write(path: Path, text: str | bytes) -> Path:
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def trace_dict(path: Path | str, workload: dict[str, Any] | None = None,
               **changes: Any) -> dict[str, Any]:
    """The base test scenario (explicit coefficients) replaying `path`."""
    data = merge(BASE, changes)
    data["workload"] = {"type": "trace", "path": str(path), **(workload or {})}
    return data


def trace_scenario(path: Path | str, workload: dict[str, Any] | None = None,
                   **changes: Any) -> Scenario:
    return Scenario.from_dict(trace_dict(path, workload, **changes))


def assert_trace_error(exc: ScenarioError, path: Path, line: int, *needles: str) -> None:
    """The error names workload.path, the trace file, the line, and what is accepted."""
    text = str(exc)
    assert exc.path == "workload.path", text
    assert exc.file == str(path) and text.startswith(f"{path}: workload.path: "), text
    assert f"line {line}: " in text, text
    assert exc.valid, text
    for needle in needles:
        assert needle in text, (needle, text)
