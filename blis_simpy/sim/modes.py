"""Native and compat runs: everything that differs between them, in one object chosen at build
time instead of `if compat` branches spread through the layers.

Native mode follows real serving; compat mode (`compat: blis`) reproduces the reference Go
BLIS's reported numbers exactly, including its conventions and quirks (spec engine.md §9;
docs/differences-from-blis.md lists each).
"""

from __future__ import annotations

from dataclasses import dataclass

from blis_simpy.config.scenario import Scenario
from blis_simpy.engine.kv.cache import KVCache
from blis_simpy.engine.kv.reference import ReferenceKVCache
from blis_simpy.metrics.conventions import Conventions, ReferenceConventions


@dataclass(frozen=True, slots=True)
class Mode:
    name: str
    # Synthetic requests drawn with the reference's generator (Go's math/rand), trace arrival
    # times truncated to µs as the reference converts them.
    reference_draws: bool
    # Each instance's events at one tick run in the order of the reference's event heap
    # (engine/reference_order.py), which also makes an instance idle from the start of a step
    # that empties its batch.
    reference_order: bool
    # The KV block pool's type: the reference's block accounting differs from the exact one
    # (engine/kv/reference.py).
    pool: type[KVCache]
    # How records become reported numbers.
    reference_reporting: bool

    def conventions(self, output_delay: int) -> Conventions:
        return ReferenceConventions(output_delay) if self.reference_reporting else Conventions()


NATIVE = Mode("native", reference_draws=False, reference_order=False, pool=KVCache,
              reference_reporting=False)
REFERENCE = Mode("blis", reference_draws=True, reference_order=True, pool=ReferenceKVCache,
                 reference_reporting=True)


def mode_of(scenario: Scenario) -> Mode:
    return REFERENCE if scenario.compat == "blis" else NATIVE
