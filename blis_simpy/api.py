"""The Python API: `run(scenario) -> Result`, the same line the CLI follows."""

from blis_simpy.sim.build import Progress, Simulation, build
from blis_simpy.sim.run import load, prepare, run, simulate

__all__ = ["Progress", "Simulation", "build", "load", "prepare", "run", "simulate"]
