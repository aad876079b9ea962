"""A streaming run's records: its tables written as it runs, its figures kept as running totals.

An in-memory run holds every request, every step row and then every table until it ends: a
few hundred bytes a request, gigabytes for tens of millions. A streaming run (docs/scale.md)
hands its finished requests and its step rows here as it goes (`Recorder.stream`):

* each chunk of finished requests is written to the requests table and added to running
  totals per instance, SLO class and tenant (counts and integer sums); its latencies go to
  scratch files of samples whose order statistics are found exactly at the end
  (order_stats.py), so no value is kept in memory;
* each chunk of an instance's step rows is written to the steps table and added to the
  instance's time-weighted levels; the steps' durations and ends are held only while a
  request still pending may read them (its token gaps, its last step's duration), then
  folded into the instance's inter-token gaps: a histogram of step durations weighted by the
  tokens that followed one in that step (metrics/gaps.py), never a value per token.

The summary is the in-memory one to the last bit: the same counts, integer sums, order
statistics and weighted gaps; the measurement window (metrics/window.py) is applied as the
requests come (who arrived within it, what completed within it, the tokens emitted within it);
vLLM's metrics' spreads come from exact sums (metrics/moments.py), and the saturation verdict
counts the requests' arrival, service and leaving times in a scratch file of them. So is
RawMetrics, but for the instances' mean KV use: a sum of floats over every step, taken chunk
by chunk rather than in numpy's pairwise order (equal to about 1e-15 relative).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from blis_simpy.config.scenario import Scenario
from blis_simpy.config.step_models import describe as step_model_of
from blis_simpy.config.step_models import outside_fit
from blis_simpy.core.records import (
    STEP_FIELDS,
    Anomaly,
    InstanceLog,
    InstanceRecord,
    Records,
    RequestColumns,
)
from blis_simpy.core.request import State
from blis_simpy.core.units import US_PER_MS, US_PER_S
from blis_simpy.metrics.anomalies import episodes, slo_violations
from blis_simpy.metrics.columns import Coded, Table, TableWriter
from blis_simpy.metrics.conventions import Conventions, RequestLatencies
from blis_simpy.metrics.evaluation import EvaluationResult, evaluation, request_targets
from blis_simpy.metrics.imbalance import held_back, imbalance_anomaly, interchangeable, waited
from blis_simpy.metrics.moments import float_sum, square_sum
from blis_simpy.metrics.order_stats import ALL, Cell, SampleFile, pairwise_sum
from blis_simpy.metrics.raw import (
    STATS,
    GroupCounts,
    Totals,
    assemble,
    clipped,
    group_dict,
    interpolate,
    levels,
    linear,
    meets,
    stats,
    targeted,
)
from blis_simpy.metrics.saturation import (
    Started,
    StepSums,
    capacity,
    count_between,
    count_by,
    leaving_times,
    saturation,
    ttft_counts,
    unserved,
)
from blis_simpy.metrics.serving import PERCENTILES as SERVING_PERCENTILES
from blis_simpy.metrics.serving import (
    FloatSelected,
    ServingFigures,
    breakdown,
    squares,
)
from blis_simpy.metrics.summary import PERCENTILES, Samples, Selected, ranks
from blis_simpy.metrics.tables import (
    ScopeFigures,
    request_table,
    scope_end,
    scoped_summary,
    series_columns,
    steps_of,
)
from blis_simpy.metrics.warnings import run_warnings
from blis_simpy.metrics.window import Window

# the latencies whose order statistics are asked: the summary's and RawMetrics', then vLLM's
# (the cluster's completed requests: TTFT, TPOT in µs, E2EL)
SERIES = ("e2e", "ttft", "delay", "tpot", "vllm_ttft", "vllm_tpot", "vllm_e2el")
SERVING = {"vllm_ttft": "ttft", "vllm_tpot": "tpot", "vllm_e2el": "e2el"}
FLOATS = ("tpot", "vllm_tpot")
SUMMED = ("arrived", "completed", "queued", "running", "rejected", "timed_out",
          "input_tokens", "output_tokens", "preemptions",  # per instance, in the summary
          "served", "cached", "prompt",  # and with a measurement window
          "finished_output", "finished_input")  # vLLM's throughputs
GROUPED = GroupCounts.__slots__  # per SLO class and tenant, in RawMetrics
TIMES = ("arrived", "left", "completed", "entered", "first_token")  # per request, for the
# saturation verdict


class Histogram:
    """Weighted integer values (µs), merged as they come: as many entries as distinct
    values (step durations are few), however many samples."""

    def __init__(self) -> None:
        self.values = np.zeros(0, dtype=np.int64)
        self.weights = np.zeros(0, dtype=np.int64)

    def add(self, values: np.ndarray, weights: np.ndarray) -> None:
        keep = weights > 0
        if not keep.any():
            return
        values = np.concatenate((self.values, values[keep]))
        weights = np.concatenate((self.weights, weights[keep]))
        self.values, inverse = np.unique(values, return_inverse=True)
        self.weights = np.zeros(len(self.values), dtype=np.int64)
        np.add.at(self.weights, inverse, weights)

    def samples(self) -> Samples:
        return Samples(self.values, self.weights)

    @staticmethod
    def merged(parts: Sequence[Histogram]) -> Samples:
        return Samples(np.concatenate([p.values for p in parts] or [np.zeros(0, np.int64)]),
                       np.concatenate([p.weights for p in parts] or [np.zeros(0, np.int64)]))


class InstanceSteps:
    """One instance's steps as a streaming run sees them: the rows from step `base` on that
    pending requests may still read, the token-gap weights of the completed requests (a
    difference array over those rows), and the inter-token gaps folded so far."""

    def __init__(self, gap_delay: int) -> None:
        self.gap_delay = gap_delay
        self.base = 0  # the step number of the first row held
        self.count = 0  # rows handed over
        self.start = np.zeros(0, dtype=np.int64)
        self.duration = np.zeros(0, dtype=np.int64)
        self.new = np.zeros(0, dtype=np.int64)
        self.diff = np.zeros(1, dtype=np.int64)  # one more than the rows held
        self.itl = Histogram()
        # ITL's breakdown (metrics/serving.py): gaps ending in steps that prefilled, in all
        # steps, spanning several steps, and the gaps of the steps that only decoded
        self.in_prefill_steps = self.in_steps = self.spans = 0
        self.decode_only = Histogram()
        self.sums = StepSums()  # for the step-cost fit (metrics/saturation.py)

    def add(self, rows: np.ndarray) -> None:
        self.start = np.concatenate((self.start, rows[:, START]))
        self.duration = np.concatenate((self.duration, rows[:, DURATION]))
        self.new = np.concatenate((self.new, rows[:, NEW]))
        self.diff = np.concatenate((self.diff, np.zeros(len(rows), dtype=np.int64)))
        self.count += len(rows)
        self.sums = self.sums + StepSums.of(rows[:, NEW], rows[:, DECODES], rows[:, DURATION],
                                            rows[:, KV], rows[:, BATCH], None)

    def durations(self, steps: np.ndarray) -> np.ndarray:
        return self.duration[steps - self.base]

    def ends(self, steps: np.ndarray) -> np.ndarray:
        at = steps - self.base
        return self.start[at] + self.duration[at]

    def completed(self, first: np.ndarray, last: np.ndarray, before: np.ndarray,
                  after: np.ndarray, closing: bool) -> None:
        """Completed requests' gaps: each adds a follow-on token to steps first+1..last, less
        the multi-step gaps (before, after), which are samples of their own; and with the
        reference's conventions one more gap each, its last step's duration (+ a2)."""
        base, delay = self.base, self.gap_delay
        np.add.at(self.diff, first + 1 - base, 1)
        np.add.at(self.diff, last + 1 - base, -1)
        np.add.at(self.diff, before + 1 - base, -1)
        np.add.at(self.diff, after + 1 - base, 1)
        spans = self.ends(after) - self.ends(before) + delay
        self.itl.add(spans, np.ones(len(spans), dtype=np.int64))
        self.spans += len(spans)
        if closing:
            self.itl.add(self.durations(last) + delay, np.ones(len(last), dtype=np.int64))

    def fold(self, until: int) -> None:
        """Steps before `until` are final: their weighted durations join the gaps and their
        rows are let go."""
        cut = min(until, self.count) - self.base
        if cut <= 0:
            return
        weights = np.cumsum(self.diff[:cut])
        self.itl.add(self.duration[:cut] + self.gap_delay, weights)
        mixed = self.new[:cut] > 0
        self.in_prefill_steps += int(weights[mixed].sum())
        self.in_steps += int(weights.sum())
        self.decode_only.add(self.duration[:cut][~mixed], weights[~mixed])
        carry = int(weights[-1])
        self.start, self.duration = self.start[cut:].copy(), self.duration[cut:].copy()
        self.new = self.new[cut:].copy()
        self.diff = self.diff[cut:].copy()
        self.diff[0] += carry
        self.base += cut


class StepFile:
    """Every step row of a streaming run, in a scratch file of int64 rows (chunks as they
    were handed over, each instance's in order), read back one instance at a time or all
    merged by time at the end: the steps and instances tables and the time-weighted levels
    come from it as from rows in memory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.handle = path.open("wb")
        self.chunks: dict[int, list[tuple[int, int]]] = {}  # position -> (offset, rows)
        self.size = 0

    def add(self, position: int, rows: np.ndarray) -> None:
        self.chunks.setdefault(position, []).append((self.size, len(rows)))
        data = np.ascontiguousarray(rows, dtype=np.int64).tobytes()
        self.handle.write(data)
        self.size += len(data)

    def count(self, position: int) -> int:
        return sum(rows for _, rows in self.chunks.get(position, []))

    def rows(self, position: int, group: int = 2) -> Iterator[np.ndarray]:
        """The instance's rows in order, `group` chunks at a time."""
        self.handle.flush()
        chunks = self.chunks.get(position, [])
        width = len(STEP_FIELDS)
        with self.path.open("rb") as f:
            for i in range(0, len(chunks), group):
                parts = []
                for offset, rows in chunks[i:i + group]:
                    f.seek(offset)
                    parts.append(np.fromfile(f, dtype=np.int64, count=rows * width))
                yield np.concatenate(parts).reshape(-1, width)

    def close(self) -> None:
        self.handle.close()
        self.path.unlink(missing_ok=True)


class WaitingFile:
    """The requests that waited in a queue (metrics/imbalance.py: `waited`), in scratch files:
    their instance's position, queued and scheduled times (µs) and where their name is, as
    int64 rows, and the names (UTF-8) in a second file. Read back a chunk at a time at the
    end, so a long run does not hold them."""

    WIDTH = 5  # position, queued, scheduled, name offset, name length

    def __init__(self, folder: Path) -> None:
        self.paths = folder / ".waiting.rows", folder / ".waiting.names"
        self.handles = [path.open("wb") for path in self.paths]
        self.rows = 0
        self.name_bytes = 0

    def add(self, position: np.ndarray, queued: np.ndarray, scheduled: np.ndarray,
            names: Sequence[str]) -> None:
        encoded = [name.encode() for name in names]
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        ends = self.name_bytes + np.cumsum(lengths)
        rows = np.column_stack((position, queued, scheduled, ends - lengths, lengths))
        self.handles[0].write(np.ascontiguousarray(rows, dtype=np.int64).tobytes())
        self.handles[1].write(b"".join(encoded))
        self.rows += len(encoded)
        self.name_bytes += int(lengths.sum())

    def chunks(self, size: int) -> Iterator[tuple[np.ndarray, bytes]]:
        """The rows in order, `size` at a time, with their names' bytes (the rows' name
        offsets made relative to them: `name`)."""
        for handle in self.handles:
            handle.flush()
        with self.paths[0].open("rb") as rows_file, self.paths[1].open("rb") as names_file:
            while len(rows := np.fromfile(rows_file, dtype=np.int64,
                                          count=size * self.WIDTH)):
                rows = rows.reshape(-1, self.WIDTH)
                start = int(rows[0, 3])
                names_file.seek(start)
                text = names_file.read(int(rows[-1, 3] + rows[-1, 4]) - start)
                rows[:, 3] -= start
                yield rows, text

    @staticmethod
    def name(rows: np.ndarray, text: bytes, row: int) -> str:
        """A row's name, decoded only for the few that are reported."""
        offset, length = int(rows[row, 3]), int(rows[row, 4])
        return text[offset:offset + length].decode()

    def earliest(self, size: int) -> list[int]:
        """For each chunk of `size` rows, the earliest queued time in it or any later one: no
        step that ended before it is asked for again."""
        self.handles[0].flush()
        minima: list[int] = []
        with self.paths[0].open("rb") as f:
            while len(rows := np.fromfile(f, dtype=np.int64, count=size * self.WIDTH)):
                minima.append(int(rows.reshape(-1, self.WIDTH)[:, 1].min()))
        return list(itertools.accumulate(reversed(minima), min))[::-1]

    def close(self) -> None:
        for handle, path in zip(self.handles, self.paths, strict=True):
            handle.close()
            path.unlink(missing_ok=True)


class StepWindow:
    """One instance's step spans (starts, ends) from its step file, in order, holding only
    those a chunk of waiting requests can overlap."""

    def __init__(self, rows: Iterator[np.ndarray]) -> None:
        self.rows = rows
        self.starts = self.ends = np.zeros(0, dtype=np.int64)
        self.exhausted = False

    def span(self, low: int, high: int) -> tuple[np.ndarray, np.ndarray]:
        """Every step that ends after `low` and starts before `high`, with the ones read past
        it (earlier steps are dropped: no later chunk asks for them)."""
        cut = int(np.searchsorted(self.ends, low, side="right"))
        starts, ends = [self.starts[cut:]], [self.ends[cut:]]
        last = int(starts[0][-1]) if len(starts[0]) else None
        while not self.exhausted and (last is None or last < high):
            rows = next(self.rows, None)
            if rows is None:
                self.exhausted = True
                break
            starts.append(rows[:, START].copy())
            ends.append(starts[-1] + rows[:, DURATION])
            last = int(starts[-1][-1]) if len(starts[-1]) else last
        self.starts, self.ends = np.concatenate(starts), np.concatenate(ends)
        return self.starts, self.ends


def merged_by_time(parts: Sequence[Iterator[np.ndarray]]) -> Iterator[tuple[np.ndarray,
                                                                             np.ndarray]]:
    """Rows of several instances' streams (each in time order) as (rows, stream index), in
    time order, same-time rows in stream order: a stable sort of everything by time, a
    window at a time (rows up to the earliest last time any stream has buffered)."""
    buffers: list[np.ndarray | None] = [next(p, None) for p in parts]
    while any(b is not None for b in buffers):
        until = min(float(b[-1, START]) for b in buffers if b is not None)
        taken, owner = [], []
        for i, buffer in enumerate(buffers):
            if buffer is None:
                continue
            cut = int(np.searchsorted(buffer[:, START], until, side="right"))
            taken.append(buffer[:cut])
            owner.append(np.full(cut, i, dtype=np.int64))
            rest = buffer[cut:]
            buffers[i] = rest if len(rest) else next(parts[i], None)
        rows, who = np.concatenate(taken), np.concatenate(owner)
        order = np.argsort(rows[:, START] / US_PER_S, kind="stable")
        yield rows[order], who[order]


@dataclass
class Codes:
    """Small integer codes for the values of a text column (SLO classes, tenants), in the
    order they appear."""

    index: dict[str, int] = field(default_factory=dict)

    def of(self, values: list[str]) -> np.ndarray:
        index = self.index
        return np.fromiter((index.setdefault(v, len(index)) for v in values), dtype=np.int32,
                           count=len(values))

    def by_name(self) -> list[tuple[str, int]]:
        """(value, code) in order of the value, as metrics/raw.py groups them."""
        return sorted(self.index.items(), key=lambda item: str(item[0]))


class Sums:
    """Exact integer sums by code, grown as codes appear."""

    def __init__(self) -> None:
        self.values = np.zeros(0, dtype=np.int64)

    def add(self, codes: np.ndarray, values: np.ndarray) -> None:
        if not len(codes):
            return
        size = int(codes.max()) + 1
        if len(self.values) < size:
            self.values = np.concatenate((self.values,
                                          np.zeros(size - len(self.values), dtype=np.int64)))
        np.add.at(self.values, codes, values.astype(np.int64))

    def __getitem__(self, code: int) -> int:
        return int(self.values[code]) if code < len(self.values) else 0

    def total(self) -> int:
        return int(self.values.sum())


class Series:
    """One latency's samples: a scratch file of them, their count and sum per group of each
    partition (the whole run is group 0 of ALL), and the order statistics asked for."""

    def __init__(self, path: Path, floats: bool) -> None:
        self.file = SampleFile(path)
        self.floats = floats  # keys are the bits of float ms, else integer µs
        self.count: dict[str, Sums] = {}
        self.sum: dict[str, Sums] = {}  # integer µs
        self.selected: dict[Cell, dict[int, int]] = {}

    def add(self, values: np.ndarray, groups: dict[str, np.ndarray]) -> None:
        keys = values.view(np.uint64)
        self.file.add(keys, groups["instance"], groups["klass"], groups["tenant"])
        for partition, codes in groups.items():
            self.count.setdefault(partition, Sums()).add(codes, np.ones(len(codes), np.int64))
            if not self.floats:
                self.sum.setdefault(partition, Sums()).add(codes, values)

    def n(self, cell: Cell) -> int:
        sums = self.count.get(cell[0])
        return 0 if sums is None else sums[cell[1]]

    def select(self, wanted: dict[Cell, set[int]]) -> None:
        self.selected = self.file.select({cell: sorted(r) for cell, r in wanted.items()})

    def at(self, cell: Cell, k: int) -> float:
        """The k-th smallest sample of a cell (-1: the largest) as RawMetrics reads it: in
        ms, as a float."""
        key = self.selected[cell][k if k >= 0 else self.n(cell) - 1]
        if self.floats:
            return float(np.array([key], dtype=np.uint64).view(np.float64)[0])
        return key / US_PER_MS

    def samples(self, cell: Cell) -> Samples:
        """The summary's samples of a cell (integer µs)."""
        return Selected(self.n(cell), self.sum[cell[0]][cell[1]], self.selected.get(cell, {}))

    def mean_ms(self, cell: Cell) -> float:
        """The mean in ms as RawMetrics reports it: numpy's mean of the ms values in arrival
        order, reproduced addition for addition (order_stats.pairwise_sum)."""
        n = self.n(cell)
        ms = (chunk.view(np.float64) if self.floats else chunk.astype(np.int64) / US_PER_MS
              for chunk in self.file.in_order(cell))
        return pairwise_sum(ms, n) / n

    def distribution(self, prefix: str, cell: Cell) -> dict[str, float | None]:
        def percentile(p: int) -> float:
            below, above, gamma = linear(n, p)
            return interpolate(self.at(cell, below), self.at(cell, above), gamma)

        n = self.n(cell)
        return stats(prefix, n, lambda: self.mean_ms(cell), percentile)


class Timeline:
    """The requests' arrival, leaving, completion and entry-into-service times (µs, -1:
    none), one scratch file each, counted at the end for the saturation verdict
    (metrics/saturation.py: `Timeline`)."""

    def __init__(self, folder: Path, window: Window) -> None:
        self.files = {name: folder / f".{name}.times" for name in TIMES}
        self.handles = {name: path.open("wb") for name, path in self.files.items()}
        self.window = window
        # measured arrivals, the last one's time, those not served (saturation.py `unserved`)
        self.count, self.last, self.unserved = 0, -1, 0

    def add(self, req: RequestColumns) -> None:
        for name, values in (("arrived", req.arrival), ("left", leaving_times(req)),
                             ("completed", req.completed_at), ("entered", req.first_scheduled),
                             ("first_token", req.first_token_at)):
            self.handles[name].write(np.ascontiguousarray(values, dtype=np.int64).tobytes())
        within = self.window.arrived(req.arrival)
        measured = req.arrival[within]
        if len(measured):
            self.count += len(measured)
            self.last = max(self.last, int(measured.max()))
            self.unserved += int((unserved(req) & within).sum())

    def column(self, name: str) -> Iterator[np.ndarray]:
        self.handles[name].flush()
        with self.files[name].open("rb") as f:
            while len(values := np.fromfile(f, dtype=np.int64, count=CHUNK_VALUES)):
                yield values

    def measured(self) -> tuple[int, int, int]:
        return self.count, self.last, self.unserved

    def between(self, column: str, low: float, high: float) -> int:
        return sum(count_between(values, low, high) for values in self.column(column))

    def ttfts(self, times: np.ndarray, edges: np.ndarray) -> np.ndarray:
        total = np.zeros((len(times) - 1, len(edges) - 1), dtype=np.int64)
        for arrived, first in zip(self.column("arrived"), self.column("first_token"),
                                  strict=True):
            total += ttft_counts(arrived, first, times, edges)
        return total

    def by(self, column: str, times: np.ndarray) -> np.ndarray:
        total: np.ndarray | int = 0
        for values in self.column(column):
            total = total + count_by(values, times)
        return np.asarray(total)

    def close(self) -> None:
        for name, handle in self.handles.items():
            handle.close()
            self.files[name].unlink(missing_ok=True)


WAITING_CHUNK = 1 << 18  # waiting requests judged at a time (metrics/imbalance.py)
CHUNK_VALUES = 1 << 21  # times read at a time (16 MiB)


class Tokens:
    """The output tokens emitted within a measurement window (metrics/window.py `tokens`),
    per instance position + 1: the whole ones, the shares of the requests spanning an edge,
    and the requests still running at the end, whose last token's time is the end of the
    scope that asks."""

    def __init__(self, window: Window) -> None:
        self.window = window
        self.whole = Sums()
        self.shares: dict[int, list[np.ndarray]] = {}
        self.open: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, req: RequestColumns, position: np.ndarray) -> None:
        first, done, out = req.first_token_at, req.completed_at, req.timed_out_at
        running = (first >= 0) & (done < 0) & (out < 0)
        if running.any():
            self.open.append((position[running], first[running], req.emitted[running]))
        last = np.where(done >= 0, done, out)
        for code in np.unique(position[~running]).tolist():
            mine = (position == code) & ~running
            whole, shares = self.window.token_shares(first[mine], req.emitted[mine],
                                                     last[mine])
            self.whole.add(np.array([code]), np.array([whole]))
            if len(shares):
                self.shares.setdefault(code, []).append(shares)

    def within(self, codes: list[int], ended: int) -> float:
        """The tokens of the requests at positions `codes`, with the run ending at `ended`."""
        whole = sum(self.whole[c] for c in codes)
        shares = [part for c in codes for part in self.shares.get(c, [])]
        for position, first, emitted in self.open:
            mine = np.isin(position, codes)
            if mine.any():
                more, part = self.window.token_shares(first[mine], emitted[mine],
                                                      np.full(int(mine.sum()), ended))
                whole += more
                shares.append(part)
        return self.window.total(whole, np.concatenate(shares) if shares
                                 else np.zeros(0))


class StreamingRecords:
    """The sink of a streaming run (core/records.py: `RecordSink`), writing into `folder`
    (the output folder being staged) and keeping its scratch files there until `close`."""

    def __init__(self, folder: Path, fmt: str, scenario: Scenario,
                 conventions: Conventions, trace_times: bool = False) -> None:
        self.scenario, self.conventions = scenario, conventions
        self.folder, self.format = folder, fmt
        self.trace_times = trace_times
        self.window = window = Window.of(scenario.evaluation.window)
        self.request_file = TableWriter(folder / f"requests.{fmt}")
        self.simulated = 0  # every request handed over, within the window or not
        self.step_rows = StepFile(folder / ".steps.rows")
        self.instances: dict[int, InstanceSteps] = {}  # by position
        self.series = {name: Series(folder / f".{name}.samples", floats=name in FLOATS)
                       for name in SERIES}
        # vLLM's metrics: the exact sums of their values and of their squares (µs)
        self.moments: dict[str, list[int | Fraction]] = {
            name: [Fraction(0), Fraction(0)] if name in FLOATS else [0, 0]
            for name in SERVING}
        self.timeline = Timeline(folder, window)
        self.tokens = Tokens(window)
        self.started = Started()
        self.classes, self.tenants = Codes(), Codes()
        self.by_instance = {name: Sums() for name in SUMMED}  # by instance position + 1
        self.by_class = {name: Sums() for name in GROUPED}
        self.by_tenant = {name: Sums() for name in GROUPED}
        self.reject_codes: dict[int, Counter[str]] = {}  # by instance position + 1
        self.totals: Counter[str] = Counter()
        self.violations: list[Anomaly] = []
        self.waiting = WaitingFile(folder)  # a fixed cluster's, for load_imbalance at the end
        self.logs: Sequence[InstanceRecord] = ()  # the instances' final records

    # -- the sink ---------------------------------------------------------------------------

    def steps(self, log: InstanceLog, rows: np.ndarray) -> None:
        steps = self.instances.get(log.position)
        if steps is None:
            steps = self.instances[log.position] = InstanceSteps(self.conventions.gap_delay)
        steps.add(rows)
        self.step_rows.add(log.position, rows)

    def requests(self, chunk: RequestColumns, floors: dict[int, int]) -> None:
        lat = self.conventions.latencies(chunk, self.durations)
        table = request_table(chunk, lat, self.trace_times)
        self.request_file.write(table)
        self.simulated += len(chunk)
        self.gaps(chunk)
        self.count(chunk, lat, table)
        for position, steps in self.instances.items():
            steps.fold(floors.get(position, steps.count))

    def durations(self, where: np.ndarray, steps: np.ndarray) -> np.ndarray:
        out = np.zeros(len(steps), dtype=np.int64)
        for position in np.unique(where).tolist():
            mine = where == position
            out[mine] = self.instances[position].durations(steps[mine])
        return out

    def gaps(self, req: RequestColumns) -> None:
        done = req.in_state(State.COMPLETED) & self.window.arrived(req.arrival)
        where = req.instance_index
        gap_where = where[req.gap_request]
        gap_done = done[req.gap_request]
        for position in np.unique(where[done]).tolist():
            mine = done & (where == position)
            spans = gap_done & (gap_where == position)
            self.instances[position].completed(
                req.first_token_step[mine], req.last_emit_step[mine], req.gap_before[spans],
                req.gap_after[spans], self.conventions.closing_gap)

    def count(self, req: RequestColumns, lat: RequestLatencies, table: Table) -> None:
        """Add a chunk to the running totals and the samples: the requests that arrived
        within the measurement window, and what happened within it."""
        window = self.window
        position = req.instance_index + 1  # 0: never routed
        state = req.state_array
        measured = window.arrived(req.arrival)
        completed = state == str(State.COMPLETED)
        done = completed & measured
        rejected = (state == str(State.REJECTED)) & measured
        timed_out = (state == str(State.TIMED_OUT)) & measured
        served = completed if window.whole else window.within(req.completed_at)
        scheduled = measured & (req.cached_tokens >= 0)
        for name, values in (
                ("arrived", measured), ("completed", done),
                ("queued", (state == str(State.QUEUED)) & measured),
                ("running", np.isin(state, self.conventions.in_service) & measured),
                ("rejected", rejected), ("timed_out", timed_out),
                ("input_tokens", np.where((req.queued_at >= 0) & measured, req.input_len, 0)),
                ("output_tokens", np.where(measured, self.conventions.counted_tokens(req), 0)),
                ("preemptions", np.where(measured, req.preemptions, 0)),
                ("served", served),
                ("cached", np.where(scheduled, req.cached_tokens, 0)),
                ("prompt", np.where(scheduled, req.input_len, 0)),
                ("finished_output", np.where(done, req.emitted, 0)),
                ("finished_input", np.where(done, req.input_len, 0))):
            self.by_instance[name].add(position, values)
        for row, code in enumerate(req.reject_code):
            if code and measured[row]:
                self.reject_codes.setdefault(int(position[row]), Counter())[code] += 1
        targets = request_targets(self.scenario, table)
        good, judged = meets(table, targets), targeted(targets)
        self.violations += slo_violations(table, targets)
        if self.scenario.deployment is None:
            keep, queued, scheduled = waited(table)
            self.waiting.add(req.instance_index[keep], queued[keep], scheduled[keep],
                             np.asarray(table["id"], dtype=object)[keep].tolist())
        ended = done | rejected | timed_out
        klass, tenant = self.classes.of(req.slo_class), self.tenants.of(req.tenant)
        for sums, codes in ((self.by_class, klass), (self.by_tenant, tenant)):
            for name, values in (("requests", measured), ("completed", done),
                                 ("rejected", rejected), ("timed_out", timed_out),
                                 ("served", served), ("targeted", measured & judged),
                                 ("targeted_ended", ended & judged),
                                 ("targeted_good", good & ended & judged),
                                 ("any_targeted", judged),
                                 ("good_served", good & judged & served)):
                sums[name].add(codes, values)
        self.totals.update(input_served=int(req.input_len[served].sum()),
                           generated=int(req.emitted.sum()))
        if not window.whole:
            self.tokens.add(req, position)
        self.timeline.add(req)
        self.started = self.started + Started.of(req)
        tpot = table.array("itl_mean_ms")
        first, arrival, last, out = (req.first_token_at, req.arrival, req.completed_at,
                                     req.output_len)
        many = done & (out > 1)
        vllm_tpot = (last[many] - first[many]) / (out[many] - 1)
        groups = {ALL: np.zeros(len(req), dtype=np.int32), "instance": position,
                  "klass": klass, "tenant": tenant}
        for name, values, keep in (
                ("e2e", lat.e2e, (lat.e2e >= 0) & measured),
                ("ttft", lat.ttft,
                 (lat.ttft >= 0) & self.conventions.ttft_population(measured, done)),
                ("delay", lat.scheduling_delay, (lat.scheduling_delay >= 0) & measured),
                ("tpot", tpot, many),
                ("vllm_ttft", first - arrival, done), ("vllm_tpot", None, many),
                ("vllm_e2el", last - arrival, done)):
            kept = vllm_tpot if values is None else np.ascontiguousarray(values[keep])
            self.series[name].add(kept, {part: codes[keep] for part, codes in groups.items()})
            if name in SERVING:
                total, squared = self.moments[name]
                if name in FLOATS:
                    self.moments[name] = [total + float_sum(kept),
                                          squared + float_sum(kept * kept)]
                else:
                    self.moments[name] = [total + int(kept.sum()),
                                          squared + square_sum(kept)]

    # -- the end ----------------------------------------------------------------------------

    def finish(self, records: Records, wall_s: float, notes: list[str]
               ) -> tuple[dict[str, Any], dict[str, Any], EvaluationResult, list[Anomaly]]:
        """The summary, RawMetrics, the evaluation and the anomalies, once the recorder has
        closed (every request and step handed over); the steps and instances tables are
        written from the step rows."""
        logs = self.logs = records.instances
        for position in range(len(logs)):
            self.steps_of(position).fold(self.steps_of(position).count)
        self.select(len(logs))
        scenario, window = self.scenario, self.window
        stats = scoped_summary(logs, scenario.horizon_us, self.conventions, window,
                               self.figures)
        stats["saturation"] = saturation(self.timeline, window, lambda: capacity(
            scenario, [log.role for log in logs], self.step_sums(), self.started),
            scenario.evaluation.saturation.window_s)
        stats["warnings"] = run_warnings(stats, set(self.tenants.index),
                                         set(self.classes.index), scenario,
                                         self.simulated) + notes
        stats["step_model"] = step_model_of(scenario)  # streamed runs are native
        stats["warnings"].extend(outside_fit(scenario))
        seconds = window.seconds(records.ended_at)
        metrics = assemble(
            self.group(ALL, 0, seconds), self.whole_totals(records.ended_at), seconds,
            self.hit_rate(logs, list(range(len(logs) + 1))),
            {name: self.group("klass", code, seconds) for name, code in self.classes.by_name()},
            {name: self.group("tenant", code, seconds) for name, code in self.tenants.by_name()},
            {log.id: self.levels(i, log, seconds * US_PER_S) for i, log in enumerate(logs)})
        anomalies = [*records.anomalies, *self.violations,
                     *episodes(records, scenario.evaluation, scenario.engine.kv_tiers)]
        if scenario.deployment is None:  # as metrics/evaluation.py: evaluate
            anomalies += self.imbalance(logs, records.ended_at)
        self.write_steps(logs)
        return (stats, *evaluation(scenario, metrics, stats, anomalies, seconds, wall_s,
                                   window))

    def step_sums(self) -> StepSums:
        """The step-cost fit's sums over every instance's steps, with the smallest KV pool
        of an instance that stepped."""
        total = StepSums()
        for position, log in enumerate(self.logs):
            steps = self.steps_of(position)
            if steps.count:
                total = total + replace(steps.sums, kv_blocks=log.kv_total)
        return total

    def hit_rate(self, logs: Sequence[InstanceRecord], codes: list[int]) -> float:
        """The prefix cache's hit rate over the measured requests of `codes`."""
        cached, prompt = (sum(self.by_instance[name][c] for c in codes)
                          for name in ("cached", "prompt"))
        return self.conventions.hit_rate(logs, cached, prompt)

    def select(self, instances: int) -> None:
        """Find every order statistic the summary and RawMetrics read, a few passes over
        each scratch file."""
        cells: list[Cell] = [(ALL, 0), *(("instance", i + 1) for i in range(instances)),
                             *(("klass", c) for c in self.classes.index.values()),
                             *(("tenant", t) for t in self.tenants.index.values())]
        for name, series in self.series.items():
            wanted: dict[Cell, set[int]] = {}
            for cell in cells:
                n = series.n(cell)
                if not n:
                    continue
                if name in SERVING:  # the cluster's only
                    if cell == (ALL, 0):
                        wanted[cell] = {k for p in SERVING_PERCENTILES for k in ranks(n, p)}
                    continue
                ks = wanted.setdefault(cell, set())
                if cell[0] in (ALL, "instance") and name != "tpot":  # the summary's
                    for p in ((99,) if name == "delay" else PERCENTILES):
                        ks.update(ranks(n, p))
                if cell[0] != "instance" and name != "delay":  # RawMetrics'
                    for _, q in STATS:
                        if q is not None:
                            below, above, _ = linear(n, q)
                            ks.update(k if k >= 0 else n - 1 for k in (below, above))
            series.select(wanted)

    def imbalance(self, instances: Sequence[InstanceRecord], ended_at: int) -> list[Anomaly]:
        """`load_imbalance` (metrics/imbalance.py) over the waiting requests' file, a chunk at
        a time, against the steps each chunk's waits overlap: found in the in-memory run's
        order (by instance, then as the requests were handed over)."""
        logs = interchangeable(instances)
        if not logs or not self.waiting.rows:
            return []
        windows = [StepWindow(self.step_rows.rows(position)) for position in range(len(logs))]
        found = []
        for k, ((rows, text), low) in enumerate(zip(self.waiting.chunks(WAITING_CHUNK),
                                                     self.waiting.earliest(WAITING_CHUNK),
                                                     strict=True)):
            where, queued, scheduled = rows[:, 0], rows[:, 1], rows[:, 2]
            high = int(np.where(scheduled < 0, ended_at, scheduled).max())
            spans = {log.id: window.span(low, high) for log, window in zip(logs, windows,
                                                                            strict=True)}
            found += [(position, k * WAITING_CHUNK + row,
                       imbalance_anomaly(logs, position, self.waiting.name(rows, text, row),
                                         q, s, idle))
                      for position, row, q, s, idle
                      in held_back(logs, spans, where, queued, scheduled, ended_at)]
        found.sort(key=lambda item: item[:2])
        return [anomaly for *_, anomaly in found]

    def steps_of(self, position: int) -> InstanceSteps:
        steps = self.instances.get(position)
        if steps is None:  # an instance that never stepped
            steps = self.instances[position] = InstanceSteps(self.conventions.gap_delay)
        return steps

    def levels(self, position: int, log: InstanceRecord, span_us: float) -> dict[str, float]:
        """The instance's time-weighted levels as metrics/raw.py computes them from its rows
        in memory (time_weighted), the same sums to the last bit (pairwise_sum)."""
        n = self.step_rows.count(position)

        start = self.window.start

        def total(level: Callable[[np.ndarray], np.ndarray]) -> float:
            return pairwise_sum((level(rows) * clipped(rows[:, START], rows[:, DURATION],
                                                       start, span_us)
                                 for rows in self.step_rows.rows(position)), n)

        return levels(span_us, total(lambda rows: np.ones(len(rows))),
                      total(lambda rows: rows[:, QUEUE]), total(lambda rows: rows[:, BATCH]),
                      total(lambda rows: rows[:, KV] / log.kv_total) if log.kv_total else None)

    def write_steps(self, logs: Sequence[InstanceRecord]) -> None:
        """The steps table (instance after instance) and the instances table (every step
        by time, same-time steps in instance id order), as in memory."""
        with TableWriter(self.folder / f"steps.{self.format}") as out:
            for position, log in enumerate(logs):
                first = 0
                for rows in self.step_rows.rows(position):
                    out.write(steps_of([as_record(log, rows)], [first]))
                    first += len(rows)
            if not out.started:
                out.write(steps_of([as_record(logs[0], np.zeros((0, len(STEP_FIELDS)),
                                                                 np.int64))]))
        ranked = sorted(range(len(logs)), key=lambda i: logs[i].id)
        with TableWriter(self.folder / f"instances.{self.format}") as out:
            for rows, who in merged_by_time([self.step_rows.rows(i) for i in ranked]):
                where = np.array(ranked, dtype=np.int64)[who]
                out.write(instance_series(rows, where, logs))
            if not out.started:
                out.write(instance_series(np.zeros((0, len(STEP_FIELDS)), np.int64),
                                          np.zeros(0, np.int64), logs))

    def figures(self, members: list[int]) -> ScopeFigures:
        whole = len(members) == len(self.logs)
        codes = [0, *(m + 1 for m in members)] if whole else [m + 1 for m in members]
        cell: Cell = (ALL, 0) if whole else ("instance", members[0] + 1)

        def total(name: str) -> int:
            return sum(self.by_instance[name][c] for c in codes)

        reject_codes: Counter[str] = Counter()
        for c in codes:
            reject_codes.update(self.reject_codes.get(c, {}))
        series = self.series
        itl = Histogram.merged([self.steps_of(m).itl for m in members])
        served = served_tokens = None
        if not self.window.whole:
            served = total("served")
            served_tokens = self.tokens.within(codes, scope_end(
                [self.logs[m] for m in members], self.scenario.horizon_us))
        return ScopeFigures(
            whole=whole, arrived=total("arrived"), completed=total("completed"),
            queued=total("queued"), running=total("running"), rejected=total("rejected"),
            timed_out=total("timed_out"), input_tokens=total("input_tokens"),
            output_tokens=total("output_tokens"), preemptions=total("preemptions"),
            reject_codes={code: reject_codes[code] for code in sorted(reject_codes)},
            e2e=series["e2e"].samples(cell), ttft=series["ttft"].samples(cell), itl=itl,
            scheduling_delay=series["delay"].samples(cell), cached_tokens=total("cached"),
            prompt_tokens=total("prompt"), served=served, served_tokens=served_tokens,
            serving=self.serving(total("completed"), total("finished_output"),
                                 total("finished_input"), itl) if whole else None)

    def serving(self, completed: int, output: int, prompt: int, itl: Samples
                ) -> ServingFigures:
        """vLLM's metrics' figures, the cluster's (`itl`: its inter-token gaps)."""
        steps = [self.steps_of(m) for m in range(len(self.logs))]

        def samples(name: str) -> Samples:
            series = self.series[name]
            n, total = series.n((ALL, 0)), self.moments[name][0]
            keys = series.selected.get((ALL, 0), {})
            if name in FLOATS:
                return FloatSelected(n, Fraction(total), {k: float(np.array(
                    [v], dtype=np.uint64).view(np.float64)[0]) for k, v in keys.items()})
            return Selected(n, int(total), keys)

        tpot = samples("vllm_tpot")
        assert isinstance(tpot, FloatSelected)
        return ServingFigures(
            completed=completed, output_tokens=output, input_tokens=prompt,
            ttft=samples("vllm_ttft"), tpot=tpot, itl=itl, e2el=samples("vllm_e2el"),
            squares={"ttft": self.moments["vllm_ttft"][1],
                     "tpot": self.moments["vllm_tpot"][1], "itl": squares(itl),
                     "e2el": self.moments["vllm_e2el"][1]},
            breakdown=breakdown(sum(s.in_prefill_steps for s in steps),
                                sum(s.in_steps for s in steps), sum(s.spans for s in steps),
                                Histogram.merged([s.decode_only for s in steps])))

    def group(self, partition: str, code: int, seconds: float) -> dict[str, Any]:
        """A group's RawMetrics entry (ALL: the whole run)."""
        sums = self.by_class if partition in (ALL, "klass") else self.by_tenant

        def count(name: str) -> int:
            return sums[name].total() if partition == ALL else sums[name][code]

        counts = GroupCounts(*(count(name) for name in GROUPED))
        cell = (partition, code)
        return group_dict(counts, seconds, {
            **self.series["ttft"].distribution("ttft", cell),
            **self.series["tpot"].distribution("tpot", cell),
            **self.series["e2e"].distribution("e2e", cell)})

    def whole_totals(self, ended: int) -> Totals:
        """RawMetrics' totals: the measured requests', and the tokens emitted within the
        window by every request, the run having ended at `ended`."""
        tokens = float(self.totals["generated"]) if self.window.whole else \
            self.tokens.within(list(range(len(self.logs) + 1)), ended)
        return Totals(self.by_instance["arrived"].total(), self.by_instance["completed"].total(),
                      self.totals["input_served"], tokens,
                      self.by_instance["preemptions"].total())

    def close(self) -> None:
        """Close the requests table and delete the scratch files."""
        self.request_file.close()
        self.step_rows.close()
        self.waiting.close()
        self.timeline.close()
        for series in self.series.values():
            series.file.close()


START, DURATION, NEW, DECODES, QUEUE, BATCH, KV = (STEP_FIELDS.index(name) for name in (
    "start", "duration", "new_tokens", "decodes", "queue_depth", "batch_size", "kv_used"))


def instance_series(rows: np.ndarray, where: np.ndarray, logs: Sequence[InstanceRecord]
                    ) -> Table:
    """Instances table rows: step `rows` of the instances at positions `where`."""
    ids = Coded([log.id for log in logs], where)
    kv_total = np.array([log.kv_total or 1 for log in logs], dtype=np.int64)[where]
    return Table(series_columns(ids, rows[:, START], rows[:, QUEUE], rows[:, BATCH],
                                rows[:, KV], kv_total, rows[:, DURATION]))


def as_record(log: InstanceRecord, rows: np.ndarray) -> InstanceRecord:
    """Step rows of an instance as the record they would be part of in memory."""
    return InstanceRecord(log.id, log.role, log.kv_total, log.kv_hits, log.kv_misses,
                          log.kv_failures, log.last_event,
                          *(rows[:, i] for i in range(len(STEP_FIELDS))))
