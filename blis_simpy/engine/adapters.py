"""An instance's LoRA adapter slots: which adapters are in its GPU memory, which of them
running requests hold, and what a request needing an absent one costs.

A vLLM-like engine serves a request with a LoRA adapter only while the adapter sits in one of
its `max_loras` GPU slots, and every request of a batch needs its adapter there at once. So:

* an admitted request holds its adapter's slot until it leaves the batch (completes, is
  preempted, abandoned or lost); a slot held by none is free to be evicted, least recently
  used first;
* a waiting request whose adapter is absent while every slot is held waits (it is passed
  over; requests behind it whose adapters are resident, or that can take a free slot, go on);
* a request admitted with its adapter absent loads it into its slot: the load's time is added
  to the step that admits it (vLLM loads adapters inside the step), so the whole batch waits
  for it, as it does on a real engine.

`engine/step.py` asks `can_take` before admitting and calls `hold` / `release` as requests
enter and leave the batch. A scenario without `engine.lora` has no AdapterSlots at all.
"""

from __future__ import annotations

from collections import OrderedDict

from blis_simpy.config.lora import LoraConfig
from blis_simpy.config.workload import TenantsWorkload, Workload

DEFAULT_RANK = 16  # the rank of an adapter the workload did not declare (a trace's)

# One adapter load: (time µs, instance, adapter, adapter evicted for it or "").
AdapterLoad = tuple[int, str, str, str]


class AdapterSlots:
    """One instance's adapter slots (LRU order, least recently admitted first)."""

    def __init__(self, instance_id: str, config: LoraConfig, ranks: dict[str, int],
                 loads: list[AdapterLoad], hits: dict[str, int]) -> None:
        self.instance = instance_id
        self.capacity = config.slots
        self.config = config
        self.ranks = ranks
        self.load_time: dict[str, int] = {}  # adapter -> its load time (µs), when first known
        # resident adapter -> running requests holding it, least recently admitted first
        self.resident: OrderedDict[str, int] = OrderedDict()
        self.loads = loads  # the recorder's: one row per load
        self.hits = hits  # the recorder's: admissions that found their adapter resident

    def can_take(self, adapter: str) -> bool:
        """A request with this adapter may be admitted now: resident, or a slot is free or
        held by no running request."""
        resident = self.resident
        return (adapter in resident or len(resident) < self.capacity
                or any(n == 0 for n in resident.values()))

    def hold(self, adapter: str, now: int) -> int:
        """A request with this adapter is admitted (`can_take` said it may be): it holds the
        slot. Returns the load time (µs) if the adapter had to be loaded, else 0."""
        resident = self.resident
        held = resident.get(adapter)
        if held is not None:
            resident[adapter] = held + 1
            resident.move_to_end(adapter)
            self.hits[adapter] = self.hits.get(adapter, 0) + 1
            return 0
        evicted = ""
        if len(resident) >= self.capacity:
            evicted = next(name for name, n in resident.items() if n == 0)
            del resident[evicted]
        resident[adapter] = 1
        self.loads.append((now, self.instance, adapter, evicted))
        return self.load_us(adapter)

    def release(self, adapter: str) -> None:
        """A request holding this adapter left the batch."""
        self.resident[adapter] -= 1

    def wipe(self) -> None:
        """The instance failed: its GPU memory, adapters included, is gone."""
        self.resident.clear()

    def load_us(self, adapter: str) -> int:
        us = self.load_time.get(adapter)
        if us is None:
            us = self.load_time[adapter] = self.config.load_us(
                self.ranks.get(adapter, DEFAULT_RANK))
        return us

    def holders(self) -> int:
        """Running requests holding a slot (the invariant checks read it)."""
        return sum(self.resident.values())


def ranks_of(workload: Workload) -> dict[str, int]:
    """The rank of each adapter the workload's tenants name."""
    if not isinstance(workload, TenantsWorkload):
        return {}
    return {name: tenant.adapters.rank for tenant in workload.tenants
            if tenant.adapters is not None for name in tenant.adapters.names(tenant.id)}
