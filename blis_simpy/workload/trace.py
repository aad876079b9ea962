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
from pathlib import Path

import numpy as np

from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.request import Request
from blis_simpy.core.units import US_PER_S

PATH = "workload.path"


def read_trace(path: str, horizon: int | None, truncate: bool) -> list[Request]:
    """The trace's requests in file order (which must be arrival order). Read whole, up front,
    so a bad row fails before the simulation starts."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ScenarioError(PATH, f"cannot read {path}: {exc.strerror or exc}") from None
    rows = csv.reader(io.StringIO(text, newline=""))
    next(rows, None)
    requests: list[Request] = []
    last = 0
    for index, row in enumerate(rows):
        line = index + 2
        arrival, prompt, output = parse_row(row, line, truncate)
        if horizon is not None and arrival > horizon:
            break
        if arrival < last:
            raise ScenarioError(PATH, f"line {line}: arrival {row[0]} is before the previous "
                                "row's; the trace must be sorted by arrival time")
        last = arrival
        requests.append(Request(index, arrival, prompt, output))
    return requests


def parse_row(row: list[str], line: int, truncate: bool) -> tuple[int, np.ndarray, np.ndarray]:
    if len(row) < 5:
        raise ScenarioError(PATH, f"line {line}: expected 5 columns (arrival_time, request_id, "
                            f"model, prefill_tokens, decode_tokens), got {len(row)}")
    try:
        seconds = float(row[0])
    except ValueError:
        raise ScenarioError(PATH, f"line {line}: arrival_time {row[0]!r} is not a number") \
            from None
    if not seconds >= 0:
        raise ScenarioError(PATH, f"line {line}: arrival_time must be >= 0, got {row[0]}")
    micros = seconds * US_PER_S
    arrival = int(micros) if truncate else round(micros)
    return arrival, token_list(row[3], line, "prefill_tokens"), \
        token_list(row[4], line, "decode_tokens")


def token_list(text: str, line: int, column: str) -> np.ndarray:
    try:
        ids = json.loads(text)
    except json.JSONDecodeError:
        ids = None
    if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
        raise ScenarioError(PATH, f"line {line}: {column} must be a JSON list of token ids")
    return np.array(ids, dtype=np.int64)
