"""Wire a resolved scenario into one SimPy environment and run it.

scenario -> workload source process -> instance(s) -> finished requests and step rows.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Generator, Iterable

import simpy

from blis_simpy.config.resolve import latency_model
from blis_simpy.config.scenario import DistributionWorkload, Scenario
from blis_simpy.engine.instance import Instance
from blis_simpy.engine.request import Request
from blis_simpy.workload.distribution import compat_requests, native_requests
from blis_simpy.workload.trace import read_trace

Progress = Callable[[int, int, float], None]  # (sim time µs, requests arrived, wall seconds)


def workload_requests(scenario: Scenario) -> Iterable[Request]:
    """The scenario's requests in arrival order (generated lazily where possible)."""
    workload, horizon = scenario.workload, scenario.horizon_us
    compat = scenario.compat == "blis"
    if isinstance(workload, DistributionWorkload):
        make = compat_requests if compat else native_requests
        return make(workload, scenario.seed, horizon)
    return read_trace(workload.path, horizon, truncate=compat)


class Simulation:
    """One run of a resolved scenario: environment, source and instances."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.env = simpy.Environment()
        engine = scenario.engine
        latency = latency_model(scenario)
        self.instances = [
            Instance(
                self.env, 0, latency,
                kv_blocks=engine.kv_blocks or 0,
                block_size=engine.block_size,
                max_running=engine.max_running_requests,
                token_budget=engine.max_scheduled_tokens,
                long_prefill_threshold=engine.long_prefill_threshold,
                max_model_len=engine.max_model_len,
                idle_from_last_step_start=scenario.compat == "blis",
            )
        ]
        self.requests: list[Request] = []
        # Traces are read (and checked) here, before any event runs.
        self.env.process(self._source(workload_requests(scenario)))

    def _source(self, requests: Iterable[Request]) -> Generator[simpy.Event, None, None]:
        """Deliver each request at its arrival time."""
        env = self.env
        instance = self.instances[0]
        for req in requests:
            if req.arrival > env.now:
                yield env.timeout(req.arrival - env.now)
            self.requests.append(req)
            instance.last_event = env.now
            instance.accept(req)

    def run(self, progress: Progress | None = None, every: int = 8192) -> float:
        """Process every event up to the horizon; returns the wall time spent (s)."""
        env = self.env
        horizon = self.scenario.horizon_us
        until = math.inf if horizon is None else horizon
        step, peek = env.step, env.peek
        started = time.perf_counter()
        count = 0
        while (now := peek()) <= until and now != math.inf:
            step()
            count += 1
            if progress is not None and count % every == 0:
                progress(env.now, len(self.requests), time.perf_counter() - started)
        for instance in self.instances:
            instance.finish()
        return time.perf_counter() - started

    @property
    def ended_at(self) -> int:
        """The time of the last event that ran (capped at the horizon)."""
        last = max(inst.last_event for inst in self.instances)
        horizon = self.scenario.horizon_us
        return last if horizon is None else min(last, horizon)
