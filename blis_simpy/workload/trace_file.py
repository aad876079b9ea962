"""What every trace format shares: reading the file as numbered lines of UTF-8 text, errors
that name the file, the line, the bad value and what is accepted, and the checked columns the
rows become (`TraceColumns`, then a `Trace`).

A trace is read whole before the run, so a bad row fails before any event; the rows are kept
as arrays and the requests made one by one as the replay reaches them (`Trace.requests`).
"""

from __future__ import annotations

import csv
import math
from array import array
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol

import numpy as np

from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.request import Request
from blis_simpy.core.units import MAX_REQUESTS, MAX_SIM_S, MAX_TOKENS, US_PER_S

PATH = "workload.path"
# The longest line read: a row of MAX_TOKENS token ids of up to 19 digits and a comma each.
MAX_LINE_BYTES = 20 * MAX_TOKENS


class TraceLines:
    """A trace file's lines as text, counted from 1, each checked to be UTF-8 text of bounded
    length (a binary or wrongly encoded file fails on its first bad line)."""

    def __init__(self, path: str, handle: BinaryIO) -> None:
        self.path = path
        self.handle = handle
        self.number = 0

    def error(self, problem: str, valid: str | None = None) -> ScenarioError:
        """A ScenarioError about the current line."""
        return ScenarioError(PATH, f"line {self.number}: {problem}", valid, file=self.path)

    def __iter__(self) -> Iterator[str]:
        while raw := self.handle.readline(MAX_LINE_BYTES + 1):
            self.number += 1
            if len(raw) > MAX_LINE_BYTES:
                raise self.error(f"longer than {MAX_LINE_BYTES:,} bytes",
                                 "one row per line; is this a trace file?")
            yield self.decode(raw)

    def decode(self, raw: bytes) -> str:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.error(f"byte {raw[exc.start]:#04x} at column {exc.start + 1} is not "
                             "UTF-8 text", "a UTF-8 text file (re-save it as UTF-8)") from None
        if "\x00" in text:
            raise self.error("contains a NUL byte: binary data, not a text trace",
                             "a UTF-8 text file")
        return text.removeprefix("\ufeff") if self.number == 1 else text

    def csv_rows(self) -> Iterator[list[str]]:
        """The remaining lines as CSV rows (blank lines skipped), however long a field is."""
        with field_limit(MAX_LINE_BYTES):
            rows = csv.reader(self)
            while True:
                try:
                    row = next(rows)
                except StopIteration:
                    return
                except csv.Error as exc:
                    raise self.error(f"not valid CSV: {exc}") from None
                if row:
                    yield row


@contextmanager
def field_limit(limit: int) -> Iterator[None]:
    """The csv module's field size limit (131,072 characters by default, process-wide) raised
    while a trace is read: a 20k-token prompt is a longer field."""
    old = csv.field_size_limit()
    csv.field_size_limit(max(old, limit))
    try:
        yield
    finally:
        csv.field_size_limit(old)


def shown(value: object, width: int = 40) -> str:
    """A value for a message: its repr, shortened (a bad field can be megabytes long)."""
    text = repr(value)
    return text if len(text) <= width else text[: width - 4] + "..." + text[-1]


def token_count(lines: TraceLines, text: object, column: str, what: str = "a token count"
                ) -> int:
    """A count: an integer in [0, MAX_TOKENS], given as text or a JSON number."""
    value: object = text
    if isinstance(text, str):
        digits = text.strip()
        if digits.isascii() and digits.isdigit() and len(digits) <= len(str(MAX_TOKENS)):
            value = int(digits)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_TOKENS:
        raise lines.error(f"{column} {shown(text)} is not {what}",
                          f"an integer from 0 to {MAX_TOKENS:,}")
    return value


def time_value(lines: TraceLines, text: object, column: str, unit: str = "seconds",
               per_second: int = 1) -> float:
    """A finite, non-negative time in `unit` (`per_second` of them to a second), given as
    text or a JSON number."""
    value = math.nan
    if isinstance(text, str | int | float) and not isinstance(text, bool):
        try:
            value = float(text)
        except (ValueError, OverflowError):  # not a number; an integer beyond floats
            value = math.nan
    limit = MAX_SIM_S * per_second
    if not 0 <= value <= limit:
        raise lines.error(f"{column} {shown(text)} is not a time",
                          f"{unit} from 0 to {limit:g}")
    return value


@dataclass(frozen=True, slots=True)
class RowLabels:
    """What a trace row says about its request beyond time and lengths."""

    id: str = ""  # the trace's request id; request_<row> when empty
    model: str = ""
    tenant: str = ""
    slo_class: str = ""
    session: str = ""
    turn: int = 0
    request_type: str = "completion"


class TokenSource(Protocol):
    def sequence(self, row: int, input_len: int, output_len: int) -> np.ndarray:
        """Request `row`'s token ids: its prompt, then its output."""
        ...


@dataclass(frozen=True, slots=True)
class Trace:
    """A trace read and checked: one entry per request, in arrival order, as arrays."""

    arrival: np.ndarray  # µs
    input_len: np.ndarray
    output_len: np.ndarray
    labels: list[RowLabels]  # one per row, or empty when the format has none
    tokens: TokenSource
    notes: list[str]  # rows skipped and why, for the run's warnings
    # the rows' own timestamps in ns as the file gives them (Azure: since 1970-01-01 UTC;
    # BurstGPT, Mooncake: from the trace's start), kept for the requests table; None for the
    # reference's CSV, whose arrival_time is the arrival itself
    times: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.arrival)

    def requests(self) -> Iterator[Request]:
        """The requests, made one at a time (once: a token-id trace releases each row's ids
        as its request is made)."""
        lengths = zip(self.arrival.tolist(), self.input_len.tolist(),
                      self.output_len.tolist(), strict=True)
        for row, (arrival, n_in, n_out) in enumerate(lengths):
            tokens = self.tokens.sequence(row, n_in, n_out)
            req = Request(row, arrival, tokens[:n_in], tokens[n_in:])
            if self.labels:
                label(req, self.labels[row])
            yield req


def label(req: Request, labels: RowLabels) -> None:
    req.name = labels.id or req.name
    req.model = labels.model
    req.tenant_id = labels.tenant
    req.slo_class = labels.slo_class
    req.session_id = labels.session
    req.turn = labels.turn
    req.request_type = labels.request_type


@dataclass
class TraceColumns:
    """The rows kept so far, checked as they come: arrival order, the horizon (the first row
    after it ends the trace), the request limit, unique request names."""

    lines: TraceLines
    horizon: int | None
    models: list[str]  # keep only rows naming one of these (all when empty)
    # 8 bytes a value (a list of Python ints would take 36): traces can be millions of rows
    arrival: array[int] = field(default_factory=lambda: array("q"))
    input_len: array[int] = field(default_factory=lambda: array("q"))
    output_len: array[int] = field(default_factory=lambda: array("q"))
    labels: list[RowLabels] = field(default_factory=list)
    names: dict[str, int] = field(default_factory=dict)  # request name -> its line
    skipped: Counter[str] = field(default_factory=Counter)  # why -> rows
    seen_models: set[str] = field(default_factory=set)
    times: array[int] = field(default_factory=lambda: array("q"))  # ns, as the file says
    empty_outputs: int = 0  # rows kept with 0 output tokens (the reference's CSV)

    def past_horizon(self, arrival: int) -> bool:
        """The row arrives after the horizon: it and every later row are not replayed."""
        return self.horizon is not None and arrival > self.horizon

    def wanted(self, model: str) -> bool:
        """Whether a row naming `model` passes the workload's model filter."""
        self.seen_models.add(model)
        return not self.models or model in self.models

    def add(self, arrival: int, input_len: int, output_len: int,
            labels: RowLabels | None = None, time_ns: int | None = None) -> None:
        """Keep a row (the reader has checked it is within the horizon and wanted);
        `time_ns`: its own timestamp, as the file gives it (published formats)."""
        if self.arrival and arrival < self.arrival[-1]:
            raise self.lines.error(
                f"arrives at {arrival / US_PER_S:g} s, before the previous row "
                f"({self.arrival[-1] / US_PER_S:g} s)", "rows sorted by arrival time")
        if len(self.arrival) == MAX_REQUESTS:
            raise self.lines.error(f"more than {MAX_REQUESTS:,} requests",
                                   "a shorter trace, or a horizon (horizon_s)")
        if labels is not None:
            self.check_name(labels.id or f"request_{len(self.arrival)}")
            self.labels.append(labels)
        self.arrival.append(arrival)
        self.input_len.append(input_len)
        self.output_len.append(output_len)
        if time_ns is not None:
            self.times.append(time_ns)
        self.empty_outputs += output_len == 0

    def check_name(self, name: str) -> None:
        first = self.names.setdefault(name, self.lines.number)
        if first != self.lines.number:
            raise self.lines.error(f"request id {shown(name)} is also on line {first}",
                                   "a unique request_id per row (or an empty one)")

    def skip(self, why: str) -> None:
        self.skipped[why] += 1

    def trace(self, tokens: TokenSource) -> Trace:
        return Trace(np.asarray(self.arrival, dtype=np.int64),
                     np.asarray(self.input_len, dtype=np.int64),
                     np.asarray(self.output_len, dtype=np.int64),
                     self.labels, tokens, self.notes(),
                     np.asarray(self.times, dtype=np.int64) if self.times else None)

    def notes(self) -> list[str]:
        """Rows skipped, and models of the filter that no row replayed names. The file is named
        without its folder: warnings land in summary.json, which must not depend on where the
        scenario was run from."""
        name = Path(self.lines.path).name
        notes = [f"skipped {n:,} rows of {name}: {why}"
                 for why, n in sorted(self.skipped.items())]
        models = sorted(self.seen_models)
        seen = ", ".join(models[:10]) + (f" and {len(models) - 10:,} more" if len(models) > 10
                                         else "") or "none"
        notes += [f"workload.models: no row of {name} names {model!r} (rows "
                  f"name: {seen})" for model in self.models if model not in self.seen_models]
        if self.empty_outputs:
            notes.append(f"{self.empty_outputs:,} rows of {name} have no output tokens: each "
                         "runs as a request generating one token, as the reference replays "
                         "them (a server always returns the first token)")
        return notes
