"""`workload sample`: run a scenario and write every request that arrived as a trace CSV, so a
workload whose timing depends on the system (chat sessions and closed-loop users wait for
their responses) can be frozen and replayed elsewhere, or by the reference itself.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from blis_simpy.config.resolve import resolve
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.request import Request
from blis_simpy.sim.build import build
from blis_simpy.workload.export import check_target, write_trace

Sampled = list[tuple[Request, np.ndarray]]


def sample_requests(scenario: Scenario) -> Sampled:
    """Run the scenario and return every request that arrived with its token ids (prompt,
    then output), in arrival order. A real run, because session turns and closed-loop users
    arrive only after earlier responses complete."""
    sim = build(resolve(scenario), keep_tokens=True)
    sim.run()
    # stable: ties keep issue order
    ordered = sorted(sim.recorder.requests, key=lambda r: r.arrival)
    return [(req, req.tokens) for req in ordered if req.tokens is not None]



def sample(scenario: Scenario, path: Path, force: bool = False) -> int:
    """Run `scenario` and write its arrivals to `path` as a trace CSV; returns the row count.
    The target is checked before the run too, so a bad --out fails at once, not after it."""
    check_target(Path(path), force)
    return write_trace(sample_requests(scenario), scenario.model.name, Path(path), force)
