"""blis-simpy: a fast, deterministic simulator of LLM inference serving, on SimPy.

Reading guide (docs/architecture.md has the whole tour, docs/extending.md the how-to):

* Where to start: `sim/run.py` (scenario -> `prepare` -> `simulate` -> Result) and
  `sim/build.py` (`build` wires one SimPy environment; `Simulation` exposes its parts).
* The processes, each a SimPy generator:
  - the workload source: `workload/release.py: release` (known workloads) and
    `workload/tenants.py` (a process per tenant, user and session);
  - each instance: `engine/instance.py: Instance.run`, kept as `instance.process`, stepping
    the step logic of `engine/step.py` (compat mode: `engine/reference_order.py` drives the
    steps, the process waits for failures);
  - the P/D handoff: `cluster/pd.py: PDHandoff._dispatch` and one `_handoff` per move;
  - the autoscaler: `cluster/autoscaler.py: Autoscaler._poll`, one per deployment config;
    a new replica's start-up: `cluster/actuation.py: DeploymentPool._bring_up`;
  - the fault injector: `cluster/faults.py` (crashes, random crashes, slowdowns).
  The gateway's stages (`cluster/gateway.py`) are priority callbacks, not processes: they
  hold no capacity and wait only for time (docs/architecture.md says why).
* Hand-overs: the gateway calls `instance.accept`; an instance's inbox is a SimPy Store; a
  P/D handoff waits on a Store and a link that is a SimPy Resource. SimPy's internals are
  read only in `core/loop.py`.
* Where a new process goes: one of your own, `sim.env.process(...)` between `prepare` and
  `simulate` (docs/extending.md); a built-in one, a class in its layer that starts its
  process, wired in `sim/build.py`, recording into the Recorder (`core/records.py`).

The names below are imported the first time they are read (PEP 562), so `blis-simpy --help`
and a single `blis-simpy run` do not load the search layer (process pools) or anything else
they do not use; `import blis_simpy; blis_simpy.run(...)` works as before.

Before any of its modules makes a dataclass, the package has `dataclasses` take the generated
methods' code from a table compiled by an earlier process (core/dataclass_code.py: compiling
them was a fifth of a 1,000-request run's whole process)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from blis_simpy.core import dataclass_code
from blis_simpy.core.lazy import lazy_names

dataclass_code.install()

if TYPE_CHECKING:
    from blis_simpy.api import compare_policies, load, prepare, run, run_many, simulate
    from blis_simpy.config.scenario import Scenario
    from blis_simpy.core.errors import InvariantError, ScenarioError
    from blis_simpy.core.failure import Failure
    from blis_simpy.core.records import Recorder
    from blis_simpy.sim.build import Simulation
    from blis_simpy.sim.result import Result

__all__ = ["Failure", "InvariantError", "Recorder", "Result", "Scenario", "ScenarioError",
           "Simulation", "compare_policies", "load", "prepare", "run", "run_many", "simulate"]
__version__ = "0.1.0"

# public name -> the module that defines it
_HOMES = {
    "compare_policies": "blis_simpy.search.paired",
    "run": "blis_simpy.sim.run",
    "load": "blis_simpy.sim.run",
    "prepare": "blis_simpy.sim.run",
    "simulate": "blis_simpy.sim.run",
    "Simulation": "blis_simpy.sim.build",
    "Failure": "blis_simpy.core.failure",
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
