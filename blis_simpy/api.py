"""The Python API: `run(scenario) -> Result`, the same line the CLI follows, and
`run_many(scenarios, policies, seeds) -> DataFrame` for sweeps and policy search.

The search functions are imported the first time they are read (PEP 562): a single run never
loads the search layer and its process pool."""

from __future__ import annotations

from typing import TYPE_CHECKING

from blis_simpy.core.lazy import lazy_names
from blis_simpy.sim.build import Progress, Simulation, build
from blis_simpy.sim.run import load, prepare, run, simulate

if TYPE_CHECKING:
    from blis_simpy.search.paired import compare_policies
    from blis_simpy.search.sweep import run_many

__all__ = ["Progress", "Simulation", "build", "compare_policies", "load", "prepare", "run",
           "run_many", "simulate"]

_SEARCH = {"compare_policies": "blis_simpy.search.paired", "run_many": "blis_simpy.search.sweep"}
__getattr__ = lazy_names(__name__, _SEARCH, globals())
