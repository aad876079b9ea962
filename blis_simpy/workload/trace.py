"""Trace replay in the reference's CSV format.

Header row, then `arrival_time,request_id,model,prefill_tokens,decode_tokens` where the token
columns are JSON arrays of ids. Requests are renamed `request_<row>`; reading stops at the first
arrival past the horizon. The reference converts seconds with int64(s*1e6), which truncates
(1.001 s becomes 1000999 µs); compat mode keeps that, the default rounds.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.request import Request
from blis_simpy.core.units import MAX_REQUESTS, MAX_SIM_S, MAX_TOKENS, US_PER_S

PATH = "workload.path"
HEADER = "arrival_time,request_id,model,prefill_tokens,decode_tokens"
# A token column holds up to MAX_TOKENS ids of up to 11 characters each ("2147483647, ").
MAX_FIELD = MAX_TOKENS * 12
MAX_TOKEN_ID = 2**31 - 1


def read_trace(path: str, horizon: int | None, truncate: bool) -> list[Request]:
    """The trace's requests in file order (which must be arrival order). Read whole, up front,
    so a bad row fails before the simulation starts; an empty trace (header only) is valid."""
    text = trace_text(path)
    limit = csv.field_size_limit()
    csv.field_size_limit(MAX_FIELD)  # the default (131,072) is ~20k tokens of JSON
    try:
        return parse_rows(csv.reader(io.StringIO(text, newline="")), horizon, truncate)
    finally:
        csv.field_size_limit(limit)


def trace_text(path: str) -> str:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ScenarioError(PATH, f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ScenarioError(PATH, f"{path} line {line}: not UTF-8 text (byte {exc.start}); "
                            "is it a trace CSV?", HEADER) from None


def parse_rows(rows: Iterator[list[str]], horizon: int | None, truncate: bool
               ) -> list[Request]:
    requests: list[Request] = []
    last = 0
    line = 1
    try:
        next(rows, None)
        for index, row in enumerate(rows):
            line = index + 2
            if len(requests) >= MAX_REQUESTS:
                raise ScenarioError(PATH, f"line {line}: more than {MAX_REQUESTS:,} requests "
                                    "(the limit per run)")
            arrival, prompt, output = parse_row(row, line, truncate)
            if horizon is not None and arrival > horizon:
                break
            if arrival < last:
                raise ScenarioError(PATH, f"line {line}: arrival {row[0]} is before the "
                                    "previous row's; the trace must be sorted by arrival time")
            last = arrival
            requests.append(Request(index, arrival, prompt, output))
    except csv.Error as exc:
        raise ScenarioError(PATH, f"line {line + 1}: not a valid CSV row ({exc})", HEADER) \
            from None
    return requests


def parse_row(row: list[str], line: int, truncate: bool) -> tuple[int, np.ndarray, np.ndarray]:
    if len(row) < 5:
        raise ScenarioError(PATH, f"line {line}: expected 5 columns, got {len(row)}", HEADER)
    try:
        seconds = float(row[0])
    except ValueError:
        raise ScenarioError(PATH, f"line {line}: arrival_time {row[0]!r} is not a number",
                            "seconds from the start, a finite number >= 0") from None
    if not 0 <= seconds <= MAX_SIM_S:
        raise ScenarioError(PATH, f"line {line}: arrival_time {row[0]!r} is out of range",
                            f"seconds from the start, a finite number in [0, {MAX_SIM_S:g}]")
    micros = seconds * US_PER_S
    arrival = int(micros) if truncate else round(micros)
    return arrival, token_list(row[3], line, "prefill_tokens"), \
        token_list(row[4], line, "decode_tokens")


def token_list(text: str, line: int, column: str) -> np.ndarray:
    try:
        ids = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        ids = None
    if not isinstance(ids, list) or not ids or len(ids) > MAX_TOKENS \
            or not all(type(t) is int and 0 <= t <= MAX_TOKEN_ID for t in ids):
        raise ScenarioError(PATH, f"line {line}: {column} {shorten(text)} is not a token list",
                            f"a JSON list of 1 to {MAX_TOKENS:,} token ids in "
                            f"[0, {MAX_TOKEN_ID}]")
    return np.array(ids, dtype=np.int64)


def shorten(text: str) -> str:
    return repr(text) if len(text) <= 40 else repr(text[:37] + "...")
