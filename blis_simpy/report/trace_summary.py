"""`blis-simpy summarize OUTDIR`: the trace summary of a finished run, read back from its
output folder (the same text `Result.summary_text` gives for the run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.files import read_text
from blis_simpy.core.yamlio import load_yaml
from blis_simpy.metrics.trace.summary import TEXT_COLUMNS, TraceInputs, summary_text
from blis_simpy.report import TABLE_FORMATS, json_object, load_summary, read_file, run_folder


def summarize(path: Path, max_tokens: int = 1000, strategy: str = "issue_focused") -> str:
    """The Markdown summary of the run in `path`."""
    return summary_text(load_inputs(path), max_tokens, strategy)


def load_inputs(path: Path) -> TraceInputs:
    summary = load_summary(path)
    folder = run_folder(path)
    requests = table(folder, "requests")
    if requests is None:
        raise ScenarioError(str(folder), "no requests.csv or requests.parquet here")
    return TraceInputs.of(summary, json_object(folder / "metrics.json"), requests,
                          table(folder, "anomalies"), table(folder, "decisions"),
                          scenario(folder / "scenario.yaml"))


def scenario(file: Path) -> dict[str, Any]:
    data = load_yaml(read_text(file, str(file), "a scenario.yaml written by blis-simpy run"),
                     str(file))
    if not isinstance(data, dict):
        raise ScenarioError(str(file), "not a mapping")
    return data


def table(folder: Path, name: str) -> pd.DataFrame | None:
    """`name`.parquet or .csv, or None when the run wrote neither."""
    for fmt in TABLE_FORMATS:
        file = folder / f"{name}.{fmt}"
        if file.is_file():
            return read_file(file, TEXT_COLUMNS[name])
    return None
