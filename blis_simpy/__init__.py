"""blis-simpy: a fast, deterministic simulator of LLM inference serving, on SimPy."""

from blis_simpy.api import compare_policies, run, run_many
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import InvariantError, ScenarioError
from blis_simpy.core.records import Recorder
from blis_simpy.sim.result import Result

__all__ = ["InvariantError", "Recorder", "Result", "Scenario", "ScenarioError",
           "compare_policies", "run", "run_many"]
__version__ = "0.1.0"
