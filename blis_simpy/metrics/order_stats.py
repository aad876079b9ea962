"""Exact order statistics of more samples than a run keeps in memory.

A streaming run (metrics/stream.py) appends each finished request's latencies to a scratch
file instead of holding them; at the end the k-th smallest value of any group of them (the
cluster, one instance, one SLO class, one tenant) is found in a few passes over that file,
with memory bounded by the number of groups asked about, never by the number of samples.
The answer is the same value a sort in memory gives, so a streaming run reports the same
percentiles as an in-memory one, to the last bit (no sketch error to state).

Each pass narrows, for every rank asked about, the interval of keys known to hold it: the
first pass finds each group's smallest and largest key; each later pass counts the group's
keys inside the interval in 4,096 equal buckets and keeps the bucket holding the rank (so an
interval of 2^36 keys, 19 hours in µs, takes at most three such passes); once an interval
holds few enough keys they are read out and sorted. Keys are unsigned 64-bit integers:
latencies in µs, or the bits of non-negative floats, which sort as their values do.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

# One sample: its key and its group in each partition (instance, SLO class, tenant).
RECORD = np.dtype([("key", "<u8"), ("instance", "<i4"), ("klass", "<i4"), ("tenant", "<i4")])
PARTITIONS = ("instance", "klass", "tenant")
ALL = ""  # the partition name of the whole population (every group)
CHUNK = 1 << 20  # records read at a time (20 MiB)
BUCKET_BITS = 12  # buckets per narrowing pass: 4,096
GATHER = 1 << 16  # an interval holding at most this many keys is read out and sorted

Cell = tuple[str, int]  # (partition or ALL, group): a population of samples


class SampleFile:
    """Samples of one series (say TTFT), appended as the run goes, their order statistics
    asked for once at the end. The file is scratch: deleted by `close`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.handle = path.open("wb")
        self.count = 0

    def add(self, keys: np.ndarray, instance: np.ndarray, klass: np.ndarray,
            tenant: np.ndarray) -> None:
        rows = np.empty(len(keys), dtype=RECORD)
        rows["key"], rows["instance"] = keys, instance
        rows["klass"], rows["tenant"] = klass, tenant
        self.handle.write(rows.tobytes())
        self.count += len(rows)

    def chunks(self) -> Iterator[np.ndarray]:
        self.handle.flush()
        with self.path.open("rb") as f:
            while len(rows := np.fromfile(f, dtype=RECORD, count=CHUNK)):
                yield rows

    def close(self) -> None:
        self.handle.close()
        self.path.unlink(missing_ok=True)

    def select(self, wanted: dict[Cell, Sequence[int]]) -> dict[Cell, dict[int, int]]:
        """For each cell, the key of each rank asked for (0-based, below the cell's count)."""
        bounds = self.bounds(set(wanted))
        # per (cell, rank): [low key, high key, keys of the cell below low]
        open_: dict[tuple[Cell, int], list[int]] = {}
        for cell, ranks in wanted.items():
            for rank in ranks:
                low, high = bounds[cell]
                open_[(cell, rank)] = [low, high, 0]
        found: dict[Cell, dict[int, int]] = {cell: {} for cell in wanted}
        while open_:
            counts = self.count_in(open_)
            for target, (inside, histogram) in list(counts.items()):
                low, high, below = open_[target]
                rank = target[1]
                if low == high:
                    found[target[0]][rank] = low
                    del open_[target]
                elif inside is not None:  # read out: the interval's keys, sorted
                    found[target[0]][rank] = int(inside[rank - below])
                    del open_[target]
                else:
                    assert histogram is not None
                    shift = bucket_shift(low, high)
                    cumulative = np.cumsum(histogram)
                    bucket = int(np.searchsorted(cumulative, rank - below, side="right"))
                    before = int(cumulative[bucket - 1]) if bucket else 0
                    new_low = low + (bucket << shift)
                    open_[target] = [new_low, min(high, new_low + (1 << shift) - 1),
                                     below + before]
        return found

    def bounds(self, cells: set[Cell]) -> dict[Cell, tuple[int, int]]:
        """Each cell's smallest and largest key, in one pass."""
        low: dict[Cell, int] = {}
        high: dict[Cell, int] = {}
        for rows in self.chunks():
            for cell, keys in members(rows, cells):
                if len(keys):
                    low[cell] = min(low.get(cell, 2**64), int(keys.min()))
                    high[cell] = max(high.get(cell, -1), int(keys.max()))
        missing = cells - low.keys()
        if missing:
            raise ValueError(f"no samples for {sorted(missing)}")
        return {cell: (low[cell], high[cell]) for cell in cells}

    def count_in(self, open_: dict[tuple[Cell, int], list[int]]
                 ) -> dict[tuple[Cell, int], tuple[np.ndarray | None, np.ndarray | None]]:
        """One pass: for each open target, the bucket counts of its cell's keys inside its
        interval, or, when the interval holds few enough keys (known from the pass before,
        else counted now), those keys sorted. Targets sharing a cell and an interval share
        the work."""
        intervals: dict[tuple[Cell, int, int], list[tuple[Cell, int]]] = {}
        for target, (low, high, _) in open_.items():
            intervals.setdefault((target[0], low, high), []).append(target)
        width = 1 << BUCKET_BITS
        histograms = {key: np.zeros(width, dtype=np.int64) for key in intervals
                      if key[1] != key[2]}
        gathered: dict[tuple[Cell, int, int], list[np.ndarray] | None] = {
            key: [] for key in intervals}
        for rows in self.chunks():
            for cell, keys in members(rows, {key[0] for key in intervals}):
                for key in intervals:
                    if key[0] != cell or key[1] == key[2]:
                        continue
                    low, high = key[1], key[2]
                    inside = keys[(keys >= low) & (keys <= high)]
                    buckets = (inside - np.uint64(low)) >> np.uint64(bucket_shift(low, high))
                    histograms[key] += np.bincount(buckets.astype(np.intp), minlength=width)
                    parts = gathered[key]
                    if parts is not None:
                        parts.append(inside)
                        if sum(map(len, parts)) > GATHER:
                            gathered[key] = None  # too many to read out: narrow first
        out: dict[tuple[Cell, int], tuple[np.ndarray | None, np.ndarray | None]] = {}
        for key, targets in intervals.items():
            parts = gathered[key]
            sorted_keys = None if parts is None or key[1] == key[2] else np.sort(
                np.concatenate(parts) if parts else np.zeros(0, np.uint64))
            for target in targets:
                out[target] = (sorted_keys, None if sorted_keys is not None or key[1] == key[2]
                               else histograms[key])
        return out


    def in_order(self, cell: Cell) -> Iterator[np.ndarray]:
        """The cell's keys in the order they were added, a chunk at a time."""
        for rows in self.chunks():
            for _, keys in members(rows, {cell}):
                yield keys


# numpy sums float64 pairwise: blocks of at most 128 values, each summed in 8 interleaved
# accumulators, the halves of a longer run summed separately (a split at a multiple of 8).
PAIRWISE_BLOCK = 128


def pairwise_sum(chunks: Iterator[np.ndarray], n: int) -> float:
    """`np.sum` of the n float64 values `chunks` hold, in order, to the last bit (the same
    additions in the same order), without holding them all: a long run's mean in RawMetrics
    is then the in-memory run's."""
    reader = Reader(chunks)

    def total(count: int) -> float:
        if count > PAIRWISE_BLOCK:
            half = count // 2
            half -= half % 8
            return total(half) + total(count - half)
        block = reader.take(count)
        if count < 8:
            result = 0.0
            for value in block.tolist():
                result += value
            return result
        lanes = block[:8].copy()
        whole = count - count % 8
        for i in range(8, whole, 8):
            lanes += block[i:i + 8]
        r = lanes.tolist()
        result = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        for value in block[whole:].tolist():
            result += value
        return result

    return total(n) if n else 0.0


class Reader:
    """Values taken in order from a stream of arrays."""

    def __init__(self, chunks: Iterator[np.ndarray]) -> None:
        self.chunks = chunks
        self.buffer = np.zeros(0)
        self.at = 0

    def take(self, count: int) -> np.ndarray:
        while len(self.buffer) - self.at < count:
            self.buffer = np.concatenate((self.buffer[self.at:], next(self.chunks)))
            self.at = 0
        self.at += count
        return self.buffer[self.at - count:self.at]


def bucket_shift(low: int, high: int) -> int:
    """The bits below a bucket of an interval split into 2^BUCKET_BITS buckets."""
    return max(0, (high - low).bit_length() - BUCKET_BITS)


def members(rows: np.ndarray, cells: set[Cell]) -> Iterator[tuple[Cell, np.ndarray]]:
    """The keys of `rows` in each of `cells`: one sort of the chunk per partition asked
    about, then a slice per group."""
    if any(partition == ALL for partition, _ in cells):
        yield (ALL, 0), rows["key"]
    for partition in PARTITIONS:
        groups = sorted(group for p, group in cells if p == partition)
        if not groups:
            continue
        column = rows[partition]
        order = np.argsort(column, kind="stable")
        ordered = column[order]
        keys = rows["key"][order]
        starts = np.searchsorted(ordered, groups, side="left")
        ends = np.searchsorted(ordered, groups, side="right")
        for group, start, end in zip(groups, starts.tolist(), ends.tolist(), strict=True):
            yield (partition, group), keys[start:end]
