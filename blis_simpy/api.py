"""The Python API: `run(scenario) -> Result`, the same line the CLI follows, and
`run_many(scenarios, policies, seeds) -> DataFrame` for sweeps and policy search.

The search functions are imported the first time they are read (PEP 562): a single run never
loads the search layer and its process pool."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from blis_simpy.sim.build import Progress, Simulation, build
from blis_simpy.sim.run import load, prepare, run, simulate

if TYPE_CHECKING:
    from blis_simpy.search.paired import compare_policies
    from blis_simpy.search.sweep import run_many

__all__ = ["Progress", "Simulation", "build", "compare_policies", "load", "prepare", "run",
           "run_many", "simulate"]

_SEARCH = {"compare_policies": "blis_simpy.search.paired", "run_many": "blis_simpy.search.sweep"}


def __getattr__(name: str) -> Any:
    home = _SEARCH.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
