"""Trace replay: which format a file is in, checking it whole, then replaying it row by row.

`workload.format: auto` (the default) tells the formats apart by the first line: a JSON object
is Mooncake's, a header naming Azure's or BurstGPT's columns is theirs, and the reference's
header (`arrival_time,request_id,model,prefill_tokens,decode_tokens`) is the reference's CSV of
token ids. Any other first line is an error listing the formats; a file written for the
reference with another header is read with `format: blis` (the reference ignores its header).
Any of them may be gzip-compressed. docs/traces.md describes each format and how lengths
become token ids.

A trace is never held in memory: it is read once before the run, every row checked (a bad
row fails before any event) and counted, and once more as the replay goes, each row made a
request when it is due (workload/trace_file.py).
"""

from __future__ import annotations

import csv
import itertools
from collections.abc import Iterator

from blis_simpy.config.workload import TraceWorkload
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.request import Request
from blis_simpy.workload.export import REFERENCE_COLUMNS
from blis_simpy.workload.trace_csv import read_blis
from blis_simpy.workload.trace_file import (
    MAX_LINE_BYTES,
    TokenSource,
    TraceColumns,
    TraceLines,
    field_limit,
    label,
    open_trace,
    shown,
)
from blis_simpy.workload.trace_published import (
    AZURE_COLUMNS,
    BURSTGPT_COLUMNS,
    MOONCAKE_BLOCK,
    read_azure,
    read_burstgpt,
    read_mooncake,
)
from blis_simpy.workload.trace_tokens import (
    GivenTokens,
    HashBlockTokens,
    TokenMaker,
    UniqueTokens,
)

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
    """Check the whole trace (up to the first row after `horizon`, µs), keeping none of it.
    `truncate`: convert the reference CSV's seconds to µs as the reference does (compat
    mode)."""
    trace = Trace(workload, seed, horizon, truncate)
    trace.check()
    return trace


class Trace:
    """A trace file checked whole; its requests made as the replay reads it again."""

    def __init__(self, workload: TraceWorkload, seed: int, horizon: int | None,
                 truncate: bool) -> None:
        self.workload, self.seed, self.horizon, self.truncate = workload, seed, horizon, truncate
        self.count = 0  # the rows replayed
        self.notes: list[str] = []  # rows skipped and why, for the run's warnings
        self.models: set[str] = set()  # the models the replayed rows name
        self.timed = False  # the rows give their own timestamps (published formats)

    def __len__(self) -> int:
        return self.count

    def check(self) -> None:
        """Read every row, checking it; a repeated request id is found in a second reading
        that watches the names whose hashes repeat."""
        columns = self.read(checking=True)
        repeated = columns.repeated()
        if repeated:
            self.read(checking=True, watch=repeated)
        self.count, self.notes = columns.count, columns.notes()
        self.models, self.timed = columns.kept_models, columns.timed

    def read(self, checking: bool, watch: set[int] | None = None) -> TraceColumns:
        columns = TraceColumns(None, self.horizon, self.workload.models,  # type: ignore[arg-type]
                               checking=checking, watch=watch or set())
        for _ in self.rows(columns, TokenMaker(self.seed)):
            pass
        return columns

    def requests(self) -> Iterator[Request]:
        """The requests, made one at a time as the file is read again."""
        columns = TraceColumns(None, self.horizon, self.workload.models,  # type: ignore[arg-type]
                               checking=False)
        for row, (payload, tokens) in enumerate(self.rows(columns, TokenMaker(self.seed))):
            arrival, n_in, n_out, labels, time_ns = columns.row
            sequence = tokens.sequence(payload, n_in, n_out)
            req = Request(row, arrival, sequence[:n_in], sequence[n_in:])
            if labels is not None:
                label(req, labels)
            req.trace_time = time_ns
            yield req

    def rows(self, columns: TraceColumns, maker: TokenMaker
             ) -> Iterator[tuple[object, TokenSource]]:
        """Read the file: for each row taken (now `columns.row`), what its token ids are made
        from and how."""
        path, workload = self.workload.path, self.workload
        with open_trace(path) as handle:
            lines = columns.lines = TraceLines(path, handle)
            first = next((line for line in lines if line.strip()), None)
            if first is None:  # nothing but blank lines, if anything: an empty trace
                return
            fmt = detect(lines, first) if workload.format == "auto" else workload.format
            if workload.models and fmt not in WITH_MODELS:
                raise ScenarioError("workload.models", f"a {fmt} trace names no model per row",
                                    f"no models (only {' and '.join(WITH_MODELS)} traces name "
                                    "models)", file=path)
            payloads: Iterator[object]
            tokens: TokenSource
            if fmt == "mooncake":
                payloads = read_mooncake(lines, itertools.chain([first], lines), columns)
                tokens = HashBlockTokens(maker, MOONCAKE_BLOCK)
            else:
                header = header_cells(lines, first)
                tokens = UniqueTokens(maker)
                if fmt == "azure":
                    payloads = read_azure(lines, header, columns)
                elif fmt == "burstgpt":
                    payloads = read_burstgpt(lines, header, columns)
                else:
                    payloads = read_blis(lines, header, columns, truncate=self.truncate)
                    tokens = GivenTokens()
            for payload in payloads:
                yield payload, tokens


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
