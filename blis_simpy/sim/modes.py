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
from blis_simpy.metrics.conventions import Conventions, ReferenceConventions


@dataclass(frozen=True, slots=True)
class Mode:
    name: str
    # Synthetic requests drawn with the reference's generator (Go's math/rand), trace arrival
    # times truncated to µs as the reference converts them.
    reference_draws: bool
    # The reference marks an instance idle when its last step starts, not when it ends.
    idle_from_last_step_start: bool
    # The KV block pool's type (the reference's hash-map rules differ from the exact ones).
    pool: type[KVCache]
    # How records become reported numbers.
    reference_reporting: bool

    def conventions(self, output_delay: int) -> Conventions:
        return ReferenceConventions(output_delay) if self.reference_reporting else Conventions()


NATIVE = Mode("native", reference_draws=False, idle_from_last_step_start=False, pool=KVCache,
              reference_reporting=False)
REFERENCE = Mode("blis", reference_draws=True, idle_from_last_step_start=True, pool=KVCache,
                 reference_reporting=True)


def mode_of(scenario: Scenario) -> Mode:
    return REFERENCE if scenario.compat == "blis" else NATIVE
