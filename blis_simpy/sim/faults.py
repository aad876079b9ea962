"""Wire a scenario's `faults:` section: the fault injector with its "faults" stream."""

from __future__ import annotations

from collections.abc import Sequence

from blis_simpy.cluster.faults import FaultInjector
from blis_simpy.cluster.fleet import Fleet
from blis_simpy.cluster.pool import Pool
from blis_simpy.config.distributions import Distribution
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.clock import Environment
from blis_simpy.core.records import Recorder
from blis_simpy.core.units import MAX_SIM_S
from blis_simpy.rng.streams import stream
from blis_simpy.workload.sampling import sample_seconds


def inject(scenario: Scenario, env: Environment, fleet: Fleet, pools: Sequence[Pool],
           recorder: Recorder) -> FaultInjector:
    assert scenario.faults is not None
    rng = stream(scenario.sim_seed, "faults")

    def draw(dist: Distribution) -> float:
        """One duration, at most MAX_SIM_S (a long tail never overflows the clock)."""
        return min(float(sample_seconds(dist, rng, 1)[0]), MAX_SIM_S)

    return FaultInjector(env, scenario.faults, fleet, pools, recorder, draw)
