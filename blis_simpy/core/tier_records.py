"""What an instance's KV tiers below the GPU did: counters and level changes, written while the
run goes (`TierLog`) and frozen at its end (`TierRecord`). Metrics read only the record."""

from __future__ import annotations

from dataclasses import dataclass


class TierLog:
    """One instance's lower-tier activity. Counts are in blocks; times in µs."""

    __slots__ = ("block_bytes", "cpu_hits", "cpu_total", "evictions", "levels", "offload_us",
                 "offloads", "reload_us", "reloads", "storage_hits", "storage_total",
                 "thrashes", "transfers")

    def __init__(self, cpu_total: int, storage_total: int, block_bytes: int) -> None:
        self.cpu_total = cpu_total
        self.storage_total = storage_total
        self.block_bytes = block_bytes  # per GPU of the TP group; 0 when not known
        self.cpu_hits = 0  # prefix blocks found on the CPU tier (and reloaded)
        self.storage_hits = 0
        self.offloads = 0  # blocks copied down a tier (GPU -> CPU, CPU -> storage)
        self.reloads = 0  # blocks copied up to the GPU
        self.offload_us = 0  # link time of the offloads (off the step: they overlap compute)
        self.reload_us = 0  # link time of the reloads, waiting included (charged to steps)
        self.evictions = 0  # hashed blocks the GPU dropped to make room
        self.thrashes: list[int] = []  # times of reloads of blocks evicted within the window
        self.levels: list[tuple[int, int, int]] = [(0, 0, 0)]  # (time, cpu used, storage used)
        # seed 001 §10's KVTransferRecord, one per transfer queued on a link: (time, from tier,
        # to tier, blocks, latency µs: until it ends, waiting for the link included)
        self.transfers: list[tuple[int, str, str, int, int]] = []

    def transfer(self, now: int, source: str, target: str, blocks: int, end: int) -> None:
        self.transfers.append((now, source, target, blocks, end - now))

    def level(self, now: int, cpu: int, storage: int) -> None:
        """The tiers' use changed at `now` (the last change at one time wins)."""
        levels = self.levels
        if levels[-1][0] == now:
            levels[-1] = (now, cpu, storage)
        elif levels[-1][1:] != (cpu, storage):
            levels.append((now, cpu, storage))


@dataclass(frozen=True, slots=True)
class TierRecord:
    cpu_total: int
    storage_total: int
    block_bytes: int
    cpu_hits: int
    storage_hits: int
    offloads: int
    reloads: int
    offload_us: int
    reload_us: int
    evictions: int
    thrashes: tuple[int, ...]
    levels: tuple[tuple[int, int, int], ...]
    transfers: tuple[tuple[int, str, str, int, int], ...]

    @classmethod
    def of(cls, log: TierLog) -> TierRecord:
        return cls(log.cpu_total, log.storage_total, log.block_bytes, log.cpu_hits,
                   log.storage_hits, log.offloads, log.reloads, log.offload_us, log.reload_us,
                   log.evictions, tuple(log.thrashes), tuple(log.levels),
                   tuple(log.transfers))
