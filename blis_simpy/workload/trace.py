"""Trace replay: which format a file is in, and reading it into a checked `Trace`.

`workload.format: auto` (the default) tells the formats apart by the first line: a JSON object
is Mooncake's, a header naming Azure's or BurstGPT's columns is theirs, and the reference's
header (`arrival_time,request_id,model,prefill_tokens,decode_tokens`) is the reference's CSV of
token ids. Any other first line is an error listing the formats; a file written for the
reference with another header is read with `format: blis` (the reference ignores its header).
docs/traces.md describes each format and how lengths become token ids.
"""

from __future__ import annotations

import csv
import itertools

from blis_simpy.config.workload import TraceWorkload
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.files import MAX_TRACE_BYTES, open_input
from blis_simpy.workload.export import REFERENCE_COLUMNS
from blis_simpy.workload.trace_csv import read_blis
from blis_simpy.workload.trace_file import (
    MAX_LINE_BYTES,
    PATH,
    Trace,
    TraceColumns,
    TraceLines,
    field_limit,
    shown,
)
from blis_simpy.workload.trace_published import (
    AZURE_COLUMNS,
    BURSTGPT_COLUMNS,
    read_azure,
    read_burstgpt,
    read_mooncake,
)
from blis_simpy.workload.trace_tokens import TokenMaker, UniqueTokens

# What each format's first line looks like, for detection and for the error that lists them.
SIGNATURES = {
    "blis": ",".join(REFERENCE_COLUMNS),
    "azure": ",".join(AZURE_COLUMNS),
    "burstgpt": ",".join(BURSTGPT_COLUMNS) + ",Total tokens,Log Type",
    "mooncake": '{"timestamp": ..., "input_length": ..., "output_length": ..., "hash_ids": '
                '[...]} (JSON lines)',
}
WITH_MODELS = ("blis", "burstgpt")  # formats whose rows name a model


def load_trace(workload: TraceWorkload, *, seed: int, horizon: int | None,
               truncate: bool) -> Trace:
    """Read and check the whole trace (up to the first row after `horizon`, µs). `truncate`:
    convert the reference CSV's seconds to µs as the reference does (compat mode)."""
    path = workload.path
    with open_input(path, PATH, "a trace file", MAX_TRACE_BYTES) as handle:
        lines = TraceLines(path, handle)
        maker = TokenMaker(seed)
        columns = TraceColumns(lines, horizon, workload.models)
        first = next((line for line in lines if line.strip()), None)
        if first is None:  # nothing but blank lines, if anything: an empty trace
            return columns.trace(UniqueTokens(maker))
        fmt = detect(lines, first) if workload.format == "auto" else workload.format
        if workload.models and fmt not in WITH_MODELS:
            raise ScenarioError("workload.models", f"a {fmt} trace names no model per row",
                                f"no models (only {' and '.join(WITH_MODELS)} traces name "
                                "models)", file=path)
        if fmt == "mooncake":
            return columns.trace(read_mooncake(lines, itertools.chain([first], lines),
                                               columns, maker))
        header = header_cells(lines, first)
        if fmt == "azure":
            return columns.trace(read_azure(lines, header, columns, maker))
        if fmt == "burstgpt":
            return columns.trace(read_burstgpt(lines, header, columns, maker))
        return columns.trace(read_blis(lines, header, columns, truncate=truncate))


def header_cells(lines: TraceLines, first: str) -> list[str]:
    with field_limit(MAX_LINE_BYTES):
        try:
            return next(csv.reader([first]), [])
        except csv.Error as exc:
            raise lines.error(f"the header is not valid CSV: {exc}") from None


def detect(lines: TraceLines, first: str) -> str:
    """The format whose first line `first` is."""
    if first.lstrip().startswith("{"):
        return "mooncake"
    names = [name.strip().lower() for name in header_cells(lines, first)]
    for fmt, wanted in (("azure", AZURE_COLUMNS), ("burstgpt", BURSTGPT_COLUMNS)):
        if {name.lower() for name in wanted} <= set(names):
            return fmt
    if names[:len(REFERENCE_COLUMNS)] == list(REFERENCE_COLUMNS):
        return "blis"
    raise lines.error(f"the first line {shown(first.strip(), 60)} is no known trace header; set "
                      "workload.format to read it as one",
                      "; ".join(f"{fmt}: {text}" for fmt, text in SIGNATURES.items()))
