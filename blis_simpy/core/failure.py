"""What an instance's process is interrupted with when the instance crashes.

`instance.process.interrupt(Failure(repair_s=30))` (or `instance.fail(...)`) crashes it, as a
breakdown interrupts a machine's process in SimPy's machine-shop example: every request in it
is lost (the gateway sends it again or fails it, `faults.requests`), its KV cache with them,
and it takes no traffic until it is repaired. Any other cause (`interrupt()` with none) is a
failure that is never repaired.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from blis_simpy.core.units import MAX_SIM_S, US_PER_S


@dataclass(frozen=True, slots=True)
class Failure:
    """A crash: the instance serves again `repair_s` seconds later (None: never; a pool under
    an autoscaler replaces it). `reason` labels it in the records."""

    repair_s: float | None = None
    reason: str = "crash"

    def __post_init__(self) -> None:
        if self.repair_s is not None and (
                isinstance(self.repair_s, bool) or not isinstance(self.repair_s, int | float)
                or not math.isfinite(self.repair_s) or not 0 <= self.repair_s <= MAX_SIM_S):
            raise ValueError(f"Failure.repair_s: got {self.repair_s!r}; a number of seconds in "
                             f"[0, {MAX_SIM_S:g}], or None (never repaired)")
        if not isinstance(self.reason, str):
            raise ValueError(f"Failure.reason: got {self.reason!r}; a string")

    @property
    def repair_us(self) -> int | None:
        return None if self.repair_s is None else round(self.repair_s * US_PER_S)
