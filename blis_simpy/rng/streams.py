"""Independent random streams per subsystem, derived from the master seed and the stream name.

The name enters through a stable hash (FNV-1a, never Python's per-process `hash()`), so a stream
depends only on (seed, name): adding draws to one subsystem never shifts another's.
"""

from __future__ import annotations

import numpy as np

from blis_simpy.rng.gomath import fnv1a64


def stream(seed: int, name: str) -> np.random.Generator:
    """The numpy Generator for subsystem `name` under master `seed`."""
    return np.random.default_rng([seed % (1 << 64), fnv1a64(name)])
