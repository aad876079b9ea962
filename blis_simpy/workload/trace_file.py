"""What every trace format shares: reading the file (plain or gzip) as numbered lines of UTF-8
text, errors that name the file, the line, the bad value and what is accepted, and the checks
each row passes as it is read (`TraceColumns`).

A trace is read twice and never held: once whole before the run, checking every row, so a bad
row fails before any event (workload/trace.py: `Trace.check`); then again as the replay reaches
each row, which becomes a request (`Trace.requests`). Memory stays flat in the trace's length:
a production trace of tens of millions of rows replays like a short one.
"""

from __future__ import annotations

import csv
import gzip
import math
import zlib
from array import array
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol

import numpy as np

from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.files import MAX_TRACE_BYTES, open_input, reason
from blis_simpy.core.request import Request
from blis_simpy.core.units import (
    MAX_REQUESTS,
    MAX_SIM_S,
    MAX_TOKENS,
    MAX_TOTAL_TOKENS,
    US_PER_S,
)

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
        while raw := self.readline():
            self.number += 1
            if len(raw) > MAX_LINE_BYTES:
                raise self.error(f"longer than {MAX_LINE_BYTES:,} bytes",
                                 "one row per line; is this a trace file?")
            yield self.decode(raw)

    def readline(self) -> bytes:
        try:
            return self.handle.readline(MAX_LINE_BYTES + 1)
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:  # a damaged or cut gzip stream
            self.number += 1
            raise self.error(f"cannot be read: {exc}", "a whole gzip file, or plain text"
                             ) from None
        except OSError as exc:  # EIO from a failing disk or a /proc file
            raise ScenarioError(PATH, f"cannot read {self.path} after line {self.number}: "
                                f"{reason(exc)}") from None

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


GZIP_MAGIC = b"\x1f\x8b"


def open_trace(path: str) -> BinaryIO:
    """The trace file to read (a regular file of bounded size: core/files.open_input),
    decompressed as it is read when it is gzip (told by its first bytes, whatever its name)."""
    handle = open_input(path, PATH, "a trace file", MAX_TRACE_BYTES)
    try:
        packed = handle.read(2) == GZIP_MAGIC
        handle.seek(0)
    except OSError as exc:
        handle.close()
        raise ScenarioError(PATH, f"cannot read {path}: {reason(exc)}") from None
    if packed:
        return gzip.GzipFile(fileobj=handle, mode="rb")  # type: ignore[return-value]
    return handle


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
    def sequence(self, payload: object, input_len: int, output_len: int) -> np.ndarray:
        """A row's token ids (its prompt, then its output), from what its reader gave for it
        (`payload`: the row's own ids, its hash ids, or nothing)."""
        ...


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
    """The rows read so far, checked as they come: arrival order, the horizon (the first row
    after it ends the trace), the request limit, unique request names. Only the newest row
    is kept (`row`); the first reading (`checking`) keeps each name's 64-bit hash, enough to
    find a repeated name afterwards (`repeated`), and `watch`ed names with their lines."""

    lines: TraceLines
    horizon: int | None
    models: list[str]  # keep only rows naming one of these (all when empty)
    checking: bool = True
    # the newest row: arrival, prompt and output tokens, labels, and its own timestamp in ns
    # as the file gives it (published formats: Azure since 1970-01-01 UTC, BurstGPT and
    # Mooncake from the trace's start; -1 for the reference's CSV, whose arrival_time is the
    # arrival itself), which its request carries to the requests table (`trace_time_ns`)
    row: tuple[int, int, int, RowLabels | None, int] = (0, 0, 0, None, -1)
    count: int = 0
    last: int = 0  # the newest row's arrival
    hashes: array[int] = field(default_factory=lambda: array("q"))  # of the names (checking)
    watch: set[int] = field(default_factory=set)  # hashes of names that may repeat
    names: dict[str, int] = field(default_factory=dict)  # watched name -> its line
    skipped: Counter[str] = field(default_factory=Counter)  # why -> rows
    seen_models: set[str] = field(default_factory=set)
    tokens: int = 0  # prompt and output tokens of the rows kept
    kept_models: set[str] = field(default_factory=set)  # named by the rows replayed
    timed: bool = False  # the rows give their own timestamps
    empty_outputs: int = 0  # rows kept with 0 output tokens (the reference's CSV)

    def past_horizon(self, arrival: int) -> bool:
        """The row arrives after the horizon: it and every later row are not replayed."""
        return self.horizon is not None and arrival > self.horizon

    def wanted(self, model: str) -> bool:
        """Whether a row naming `model` passes the workload's model filter."""
        self.seen_models.add(model)
        return not self.models or model in self.models

    def add(self, arrival: int, input_len: int, output_len: int,
            labels: RowLabels | None = None, time_ns: int = -1) -> None:
        """Take a row (the reader has checked it is within the horizon and wanted);
        `time_ns`: its own timestamp, as the file gives it (published formats)."""
        if self.count and arrival < self.last:
            raise self.lines.error(
                f"arrives at {arrival / US_PER_S:g} s, before the previous row "
                f"({self.last / US_PER_S:g} s)", "rows sorted by arrival time")
        if self.count == MAX_REQUESTS:
            raise self.lines.error(f"more than {MAX_REQUESTS:,} requests",
                                   "a shorter trace, or a horizon (horizon_s)")
        self.tokens += input_len + output_len
        if self.tokens > MAX_TOTAL_TOKENS:
            raise self.lines.error(f"the rows so far hold more than {MAX_TOTAL_TOKENS:,} "
                                   "tokens", "a shorter trace, or a horizon (horizon_s)")
        if labels is not None and self.checking:
            self.check_name(labels.id or f"request_{self.count}")
            self.kept_models.add(labels.model)
        self.row = (arrival, input_len, output_len, labels, time_ns)
        self.last = arrival
        self.count += 1
        self.timed |= time_ns >= 0
        self.empty_outputs += output_len == 0

    def check_name(self, name: str) -> None:
        key = hash(name)
        self.hashes.append(key)
        if key in self.watch:
            first = self.names.setdefault(name, self.lines.number)
            if first != self.lines.number:
                raise self.lines.error(f"request id {shown(name)} is also on line {first}",
                                       "a unique request_id per row (or an empty one)")

    def repeated(self) -> set[int]:
        """The name hashes that occur more than once (a repeated name, or two names with one
        hash): a second reading watching them finds the repeat and its lines."""
        keys = np.sort(np.frombuffer(self.hashes, dtype=np.int64))
        return set(keys[1:][keys[1:] == keys[:-1]].tolist())

    def skip(self, why: str) -> None:
        self.skipped[why] += 1

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
