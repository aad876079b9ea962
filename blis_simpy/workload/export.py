"""Write requests as a trace CSV in the reference's format, replayable by `workload: {type: trace}`
and by the reference itself. The five reference columns come first, because the reference's
reader (and blis-simpy's) reads columns 0, 3 and 4 and ignores the rest; the tenant columns
follow for analysis.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from blis_simpy.core.files import check_replaceable, replacing
from blis_simpy.core.request import Request
from blis_simpy.core.units import US_PER_S

REFERENCE_COLUMNS = ("arrival_time", "request_id", "model", "prefill_tokens", "decode_tokens")
EXTRA_COLUMNS = ("tenant_id", "slo_class", "session_id", "turn", "request_type")

def seconds_text(micros: int) -> str:
    """µs as seconds with exactly 6 decimals, from the integer (no float rounding)."""
    return f"{micros // US_PER_S}.{micros % US_PER_S:06d}"


def csv_text(text: str) -> str:
    """A CSV field, quoted only when it must be (as Go's encoding/csv and Python's do)."""
    if any(c in text for c in ',"\r\n'):
        return '"' + text.replace('"', '""') + '"'
    return text


def token_column(ids: Any) -> str:
    """Token ids as a quoted JSON list without spaces, as the reference writes them."""
    return '"[' + ",".join(map(str, ids.tolist())) + ']"'


def trace_line(req: Request, tokens: np.ndarray, model: str) -> str:
    """One row; the model column is the one the request's own trace row named, if any, else
    the served `model`."""
    prompt, output = tokens[: req.input_len], tokens[req.input_len:]
    fields = [seconds_text(req.arrival), csv_text(req.name), csv_text(req.model or model),
              token_column(prompt), token_column(output), csv_text(req.tenant_id),
              csv_text(req.slo_class), csv_text(req.session_id), str(req.turn),
              csv_text(req.request_type)]
    return ",".join(fields) + "\n"


TARGET = "a trace file path, e.g. trace.csv"


def check_target(path: Path, force: bool = False) -> None:
    check_replaceable(path, "--out", TARGET, force)


def write_trace(requests: Iterable[tuple[Request, np.ndarray]], model: str, path: Path,
                force: bool = False) -> int:
    """Write the trace atomically (a temporary file beside it, then a rename), so a failure
    never leaves a half-written file; returns the number of rows."""
    count = 0
    with replacing(Path(path), "--out", TARGET, force) as temp, temp.open("x", newline="") as out:
        out.write(",".join(REFERENCE_COLUMNS + EXTRA_COLUMNS) + "\n")
        for req, tokens in requests:
            out.write(trace_line(req, tokens, model))
            count += 1
    return count
