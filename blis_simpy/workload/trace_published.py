"""Published production traces, read as published: lengths, not token ids (docs/traces.md).

* `azure`: the Azure LLM inference traces 2023 and 2024, `TIMESTAMP,ContextTokens,
  GeneratedTokens`, timestamps like `2023-11-16 18:17:03.9799600` (2024: with a UTC offset,
  `2024-05-10 00:00:00.009930+00:00`), or as seconds since 1970-01-01 UTC in the same layout
  (`1700158623.9799600`); arrival is the offset from the first row. Rows with 0
  GeneratedTokens produced nothing and are skipped (counted in the run's warnings).
* `burstgpt`: BurstGPT, `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`,
  seconds from the start; rows with 0 response tokens are failed requests and are skipped
  (counted in the run's warnings).
* `mooncake`: Mooncake / FAST'25 JSON lines, `{"timestamp": ms, "input_length",
  "output_length", "hash_ids": [...]}` with one hash id per 512-token prompt block; rows with
  0 output_length are skipped as Azure's are.

Each row's own timestamp is kept, in ns, for the requests table (`trace_time_ns`). Token ids
are synthesised from the scenario seed (`trace_tokens.py`). Each reader gives, for each row it
takes, what its token ids are made from: nothing, or Mooncake's hash ids.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from blis_simpy.core.units import MAX_SIM_S, US_PER_S
from blis_simpy.workload.trace_file import (
    RowLabels,
    TraceColumns,
    TraceLines,
    shown,
    time_value,
    token_count,
)

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BURSTGPT_COLUMNS = ("Timestamp", "Model", "Request tokens", "Response tokens")
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length")
MOONCAKE_BLOCK = 512  # prompt tokens per hash id
NS_PER_US = 1000
# The UTC offsets in use: Baker Island (-12:00) to Kiribati's Line Islands (+14:00).
MAX_WEST, MAX_EAST = 12 * 3600, 14 * 3600

# 2023: `2023-11-16 18:17:03.9799600`; 2024: `2024-05-10 00:00:00.009930+00:00`, or without
# the fraction when it is 0.
AZURE_TIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
                        r"(Z|[+-]\d{2}:?\d{2})?")
AZURE_TIME_TEXT = ("YYYY-MM-DD hh:mm:ss, up to 9 fractional digits and an optional UTC offset, "
                   "e.g. 2023-11-16 18:17:03.9799600 or 2024-05-10 00:00:00.009930+00:00; or "
                   "seconds since 1970-01-01 UTC, e.g. 1700158623.9799600")
EPOCH_TIME = re.compile(r"(\d{1,11})(?:\.(\d{1,9}))?")  # seconds since 1970, up to year 5138
UNIX_DAY = datetime.date(1970, 1, 1).toordinal()
NO_OUTPUT = "0 output tokens (requests that produced nothing)"


def locate(lines: TraceLines, header: list[str], wanted: Sequence[str], fmt: str
           ) -> list[int]:
    """The positions of the `wanted` columns in the header (names compared ignoring case and
    surrounding spaces)."""
    names = [name.strip().lower() for name in header]
    missing = [name for name in wanted if name.lower() not in names]
    if missing:
        raise lines.error(f"the header has no {missing[0]!r} column",
                          f"a {fmt} header: {','.join(wanted)}")
    return [names.index(name.lower()) for name in wanted]


def fields(lines: TraceLines, row: list[str], at: list[int]) -> list[str]:
    if len(row) <= max(at):
        raise lines.error(f"{len(row)} columns", f"at least {max(at) + 1}, as in the header")
    return [row[i] for i in at]


def read_azure(lines: TraceLines, header: list[str], columns: TraceColumns
               ) -> Iterator[None]:
    at = locate(lines, header, AZURE_COLUMNS, "azure")
    first: int | None = None
    for row in lines.csv_rows():
        stamp, context, generated = fields(lines, row, at)
        ns = unix_ns(lines, stamp)
        first = ns if first is None else first
        arrival = (ns - first + NS_PER_US // 2) // NS_PER_US  # nearest µs
        if arrival > MAX_SIM_S * US_PER_S:
            raise lines.error(f"TIMESTAMP {shown(stamp)} is more than {MAX_SIM_S:g} s after the "
                              "first row's", "a trace spanning less time")
        if columns.past_horizon(arrival):
            break
        prompt = token_count(lines, context, "ContextTokens")
        output = token_count(lines, generated, "GeneratedTokens")
        if output == 0:
            columns.skip(NO_OUTPUT)
            continue
        columns.add(arrival, prompt, output, time_ns=ns)
        yield None


def unix_ns(lines: TraceLines, text: str) -> int:
    """An Azure TIMESTAMP, a date and time or seconds since the epoch, as UTC nanoseconds
    since 1970-01-01 (read as integers: the 7th fractional digit is kept)."""
    match = EPOCH_TIME.fullmatch(text.strip())
    if match is not None:
        return int(match.group(1)) * 10**9 + int((match.group(2) or "").ljust(9, "0"))
    return azure_ns(lines, text) - UNIX_DAY * 86_400 * 10**9


def azure_ns(lines: TraceLines, text: str) -> int:
    """An Azure timestamp as UTC nanoseconds since year 1 (only differences matter)."""
    match = AZURE_TIME.fullmatch(text.strip())
    if match is None:
        raise lines.error(f"TIMESTAMP {shown(text)} is not a date and time", AZURE_TIME_TEXT)
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    try:
        days = datetime.date(year, month, day).toordinal()
    except ValueError:
        days = -1
    if days < 0 or hour > 23 or minute > 59 or second > 59:
        raise lines.error(f"TIMESTAMP {shown(text)} is not a valid date and time",
                          AZURE_TIME_TEXT)
    offset = utc_offset_s(match.group(8))
    if offset is None:
        raise lines.error(f"TIMESTAMP {shown(text)} has no real UTC offset",
                          f"offsets from {-MAX_WEST // 3600:+03d}:00 to "
                          f"{MAX_EAST // 3600:+03d}:00, minutes below 60")
    whole = ((days * 24 + hour) * 60 + minute) * 60 + second - offset
    return whole * 10**9 + int((match.group(7) or "").ljust(9, "0"))


def utc_offset_s(text: str | None) -> int | None:
    """`+01:00`, `-0530` or `Z` as seconds east of UTC (0 when absent); None for an offset
    no clock uses (`+99:00`, `+05:75`), which would shift the replay by hours or days."""
    if not text or text == "Z":
        return 0
    digits = text[1:].replace(":", "")
    hours, minutes = int(digits[:2]), int(digits[2:])
    seconds = (hours * 60 + minutes) * 60 if text[0] == "+" else -(hours * 60 + minutes) * 60
    if minutes > 59 or not -MAX_WEST <= seconds <= MAX_EAST:
        return None
    return seconds


def read_burstgpt(lines: TraceLines, header: list[str], columns: TraceColumns
                  ) -> Iterator[None]:
    at = locate(lines, header, BURSTGPT_COLUMNS, "burstgpt")
    for row in lines.csv_rows():
        stamp, model, request, response = fields(lines, row, at)
        seconds = time_value(lines, stamp, "Timestamp")
        arrival = round(seconds * US_PER_S)
        if columns.past_horizon(arrival):
            break
        prompt = token_count(lines, request, "Request tokens")
        output = token_count(lines, response, "Response tokens")
        if not columns.wanted(model):
            continue
        if output == 0:
            columns.skip("0 response tokens (failed requests)")
            continue
        columns.add(arrival, prompt, output, RowLabels(model=model), round(seconds * 10**9))
        yield None


def read_mooncake(lines: TraceLines, rows: Iterable[str], columns: TraceColumns
                  ) -> Iterator[np.ndarray]:
    """`rows`: the file's lines from the first (which detection may have read already). Each
    row's hash ids are given as it is taken."""
    for text in rows:
        if not text.strip():
            continue
        record = json_record(lines, text)
        stamp = time_value(lines, record["timestamp"], "timestamp", "milliseconds", 1000)
        arrival = round(stamp * 1000)
        if columns.past_horizon(arrival):
            break
        prompt = token_count(lines, record["input_length"], "input_length")
        output = token_count(lines, record["output_length"], "output_length")
        blocks = block_ids(lines, record.get("hash_ids", []), prompt)
        if output == 0:
            columns.skip(NO_OUTPUT)
            continue
        columns.add(arrival, prompt, output, time_ns=round(stamp * 10**6))
        yield blocks


def json_record(lines: TraceLines, text: str) -> dict[str, object]:
    valid = ('one JSON object per line: {"timestamp": ms, "input_length": n, '
             '"output_length": n, "hash_ids": [...]}')
    try:
        record = json.loads(text)
    except (ValueError, RecursionError):  # JSONDecodeError, or an int of > 4300 digits
        record = None
    if not isinstance(record, dict):
        raise lines.error(f"{shown(text.strip())} is not a JSON object", valid)
    for key in MOONCAKE_KEYS:
        if key not in record:
            raise lines.error(f"no {key!r}", valid)
        value = record[key]
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise lines.error(f"{key} {shown(value)} is not a number", valid)
    return record


def block_ids(lines: TraceLines, ids: object, prompt: int) -> np.ndarray:
    """The prompt's hash ids: non-negative 64-bit integers, at most one per 512 tokens."""
    most = -(-prompt // MOONCAKE_BLOCK)
    valid = (f"a list of at most ceil(input_length / {MOONCAKE_BLOCK}) = {most} integers "
             "from 0 to 2**64 - 1")
    if not isinstance(ids, list) or not all(type(i) is int and 0 <= i < 2**64 for i in ids):
        raise lines.error(f"hash_ids {shown(ids)} is not a list of hash ids", valid)
    if len(ids) > most:
        raise lines.error(f"{len(ids)} hash_ids for an input_length of {prompt}", valid)
    return np.array(ids, dtype=np.uint64)
