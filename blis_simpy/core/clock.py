"""The simulation clock: SimPy's environment, with time in integer microseconds.

Every delay the package schedules is an int (the reference's int64 ticks), so the clock never
holds a float; this subclass says so to the type checker and changes nothing at run time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import simpy


class Environment(simpy.Environment):
    _now: int  # only ints are ever scheduled (core/loop.py reads it without the property)

    if TYPE_CHECKING:
        @property
        def now(self) -> int:
            """The current simulated time (µs)."""
