"""The Python API: `run(scenario) -> Result`, the same line the CLI follows, and
`run_many(scenarios, policies, seeds) -> DataFrame` for sweeps and policy search."""

from blis_simpy.search.paired import compare_policies
from blis_simpy.search.sweep import run_many
from blis_simpy.sim.build import Progress, Simulation, build
from blis_simpy.sim.run import load, prepare, run, simulate

__all__ = ["Progress", "Simulation", "build", "compare_policies", "load", "prepare", "run",
           "run_many", "simulate"]
