"""blis-simpy: a fast, deterministic simulator of LLM inference serving, on SimPy.

The names below are imported the first time they are read (PEP 562), so `blis-simpy --help`
and a single `blis-simpy run` do not load the search layer (process pools) or anything else
they do not use; `import blis_simpy; blis_simpy.run(...)` works as before."""

from __future__ import annotations

from typing import TYPE_CHECKING

from blis_simpy.core.lazy import lazy_names

if TYPE_CHECKING:
    from blis_simpy.api import compare_policies, load, run, run_many
    from blis_simpy.config.scenario import Scenario
    from blis_simpy.core.errors import InvariantError, ScenarioError
    from blis_simpy.core.records import Recorder
    from blis_simpy.sim.result import Result

__all__ = ["InvariantError", "Recorder", "Result", "Scenario", "ScenarioError",
           "compare_policies", "load", "run", "run_many"]
__version__ = "0.1.0"

# public name -> the module that defines it
_HOMES = {
    "compare_policies": "blis_simpy.search.paired",
    "run": "blis_simpy.sim.run",
    "load": "blis_simpy.sim.run",
    "run_many": "blis_simpy.search.sweep",
    "Scenario": "blis_simpy.config.scenario",
    "InvariantError": "blis_simpy.core.errors",
    "ScenarioError": "blis_simpy.core.errors",
    "Recorder": "blis_simpy.core.records",
    "Result": "blis_simpy.sim.result",
}


__getattr__ = lazy_names(__name__, _HOMES, globals())


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
