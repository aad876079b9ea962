"""The reference's trace CSV (format `blis`): a header, then
`arrival_time,request_id,model,prefill_tokens,decode_tokens` with the arrival in seconds and the
token columns JSON lists of token ids. `workload sample` adds tenant_id, slo_class, session_id,
turn and request_type after them; they are read by their header names when present.

The reference converts seconds with int64(s*1e6), which truncates (1.001 s becomes 1000999
µs); compat mode keeps that, the default rounds. Token ids are parsed by numpy, not as one
Python object per token, and kept as 32-bit integers when they fit.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np

from blis_simpy.core.units import MAX_INT, MAX_TOKENS, US_PER_S
from blis_simpy.workload.export import EXTRA_COLUMNS, REFERENCE_COLUMNS
from blis_simpy.workload.trace_file import (
    RowLabels,
    TraceColumns,
    TraceLines,
    shown,
    time_value,
    token_count,
)

TOKEN_IDS = f"a JSON list of integer token ids from 0 to 2**53, at most {MAX_TOKENS:,}"


def read_blis(lines: TraceLines, header: list[str], columns: TraceColumns, *,
              truncate: bool) -> Iterator[np.ndarray]:
    """Read the rows after the header (whose names only locate the extra columns: the
    reference reads columns by position), giving each row's token ids as it is taken."""
    names = [name.strip().lower() for name in header]
    extra = {name: names.index(name) for name in EXTRA_COLUMNS if name in names}
    for row in lines.csv_rows():
        if len(row) < len(REFERENCE_COLUMNS):
            raise lines.error(f"{len(row)} columns", f"at least {len(REFERENCE_COLUMNS)}: "
                              + ",".join(REFERENCE_COLUMNS))
        seconds = time_value(lines, row[0], "arrival_time")
        micros = seconds * US_PER_S
        arrival = int(micros) if truncate else round(micros)
        if columns.past_horizon(arrival):
            break
        if not columns.wanted(row[2]):
            continue
        prompt = token_ids(lines, row[3], "prefill_tokens")
        output = token_ids(lines, row[4], "decode_tokens")
        columns.add(arrival, len(prompt), len(output), labels(lines, row, extra))
        yield compact(np.concatenate((prompt, output)))


def labels(lines: TraceLines, row: list[str], extra: dict[str, int]) -> RowLabels:
    def column(name: str) -> str:
        where = extra.get(name)
        return row[where] if where is not None and where < len(row) else ""

    turn = column("turn")
    return RowLabels(id=row[1], model=row[2], tenant=column("tenant_id"),
                     slo_class=column("slo_class"), session=column("session_id"),
                     turn=token_count(lines, turn, "turn", "a turn number") if turn.strip() else 0,
                     request_type=column("request_type") or "completion")


def token_ids(lines: TraceLines, text: str, column: str) -> np.ndarray:
    """A JSON list of token ids. The reference writes them without spaces, which numpy parses
    directly; anything else goes through the JSON parser."""
    body = text.strip()
    if not (body.startswith("[") and body.endswith("]")):
        raise lines.error(f"{column} {shown(text)} is not a list", TOKEN_IDS)
    inner = body[1:-1]
    digits = inner.replace(",", "")
    if inner and digits.isascii() and digits.isdigit():
        try:
            ids = np.fromstring(inner, dtype=np.int64, sep=",")
        except ValueError:
            ids = None
        if ids is None or len(ids) != inner.count(",") + 1:
            raise lines.error(f"{column} {shown(text)} is not a list of integers", TOKEN_IDS)
    else:
        ids = json_ids(lines, body, column)
    if len(ids) > MAX_TOKENS or (len(ids) and not 0 <= ids.min() <= ids.max() <= MAX_INT):
        raise lines.error(f"{column} has {len(ids):,} ids from {ids.min()} to {ids.max()}",
                          TOKEN_IDS)
    return ids


def json_ids(lines: TraceLines, body: str, column: str) -> np.ndarray:
    try:
        ids = json.loads(body)
    except (ValueError, RecursionError):  # JSONDecodeError, or an int of > 4300 digits
        ids = None
    if not isinstance(ids, list) or not all(type(t) is int for t in ids):
        raise lines.error(f"{column} {shown(body)} is not a list of integers", TOKEN_IDS)
    if ids and not 0 <= min(ids) <= max(ids) <= MAX_INT:
        raise lines.error(f"{column} has ids from {min(ids)} to {max(ids)}", TOKEN_IDS)
    return np.array(ids, dtype=np.int64)


def compact(tokens: np.ndarray) -> np.ndarray:
    """32-bit ids when they fit (every real vocabulary does): half the memory."""
    if len(tokens) == 0 or tokens.max() < 2**32:
        return tokens.astype(np.uint32)
    return tokens
