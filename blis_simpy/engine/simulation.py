"""Wire a resolved scenario into one SimPy environment and run it.

scenario -> workload source process -> gateway (admission, priority, routing) -> instances.
Policies are created here, once per run; an unknown or misconfigured one fails before any
event runs (EC-1).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Generator, Iterable, Iterator

import simpy

from blis_simpy.cluster.gateway import Gateway
from blis_simpy.cluster.ordering import CLUSTER_ARRIVAL, StageEvent
from blis_simpy.config.resolve import latency_model
from blis_simpy.config.scenario import DistributionWorkload, Scenario, TraceWorkload
from blis_simpy.engine.instance import Instance
from blis_simpy.engine.request import Request
from blis_simpy.engine.tokens import hash_requests
from blis_simpy.metrics.anomalies import AnomalyLog
from blis_simpy.policies.admission import ADMISSION
from blis_simpy.policies.priority import PRIORITY
from blis_simpy.policies.routing import ROUTING
from blis_simpy.policies.scheduler import SCHEDULER
from blis_simpy.workload.distribution import compat_requests, native_requests
from blis_simpy.workload.spec import TenantsWorkload
from blis_simpy.workload.tenants import TenantWorkload
from blis_simpy.workload.trace import read_trace

Progress = Callable[[int, int, float], None]  # (sim time µs, requests arrived, wall seconds)


def workload_requests(scenario: Scenario, prehash: bool = True) -> Iterable[Request]:
    """The scenario's requests in arrival order (generated lazily where possible), with their
    block hashes computed in vectorised chunks unless the token ids are wanted."""
    workload, horizon = scenario.workload, scenario.horizon_us
    compat = scenario.compat == "blis"
    if isinstance(workload, DistributionWorkload):
        make = compat_requests if compat else native_requests
        requests: Iterable[Request] = make(workload, scenario.seed, horizon)
        return hashed(requests, scenario.engine.block_size) if prehash else requests
    assert isinstance(workload, TraceWorkload)
    trace = read_trace(workload.path, horizon, truncate=compat)
    if prehash:
        hash_requests(trace, scenario.engine.block_size)
    return trace


def hashed(requests: Iterable[Request], block_size: int, chunk: int = 256
           ) -> Iterator[Request]:
    """Requests with their block hashes computed a chunk at a time (vectorised)."""
    batch: list[Request] = []
    for req in requests:
        batch.append(req)
        if len(batch) == chunk:
            hash_requests(batch, block_size)
            yield from batch
            batch = []
    hash_requests(batch, block_size)
    yield from batch


class Simulation:
    """One run of a resolved scenario: environment, source, gateway and instances."""

    def __init__(self, scenario: Scenario, keep_tokens: bool = False) -> None:
        """`keep_tokens` keeps every request's token ids (to export the workload)."""
        self.scenario = scenario
        self.env = simpy.Environment()
        policies, cluster = scenario.policies, scenario.cluster
        priority = PRIORITY.create(policies.priority, "policies.priority")
        admission = ADMISSION.create(policies.admission, "policies.admission")
        routing = ROUTING.create(policies.routing, "policies.routing",
                                 instances=cluster.instances)
        latency = latency_model(scenario)
        self.instances = [
            Instance(
                self.env, i, latency, scenario.engine,
                SCHEDULER.create(policies.scheduler, "policies.scheduler"), priority,
                idle_from_last_step_start=scenario.compat == "blis",
            )
            for i in range(cluster.instances)
        ]
        self.gateway = Gateway(self.env, self.instances, cluster, admission, priority, routing)
        self.gateway.keep_tokens = keep_tokens
        self.anomalies = AnomalyLog(scenario.evaluation.class_ranks)
        self.gateway.anomalies = self.anomalies
        for instance in self.instances:
            instance.anomalies = self.anomalies
        self.requests: list[Request] = []
        if isinstance(scenario.workload, TenantsWorkload):
            TenantWorkload(self.env, scenario.workload, scenario.seed, self._deliver)
        else:
            # Traces are read (and checked) here, before any event runs.
            self.env.process(self._source(workload_requests(scenario, not keep_tokens)))

    def _deliver(self, req: Request) -> None:
        self.requests.append(req)
        self.gateway.arrive(req)

    def _source(self, requests: Iterable[Request]) -> Generator[simpy.Event, None, None]:
        """Release each request into the gateway at its arrival time (BC-1: no pre-dispatch);
        it wakes with cluster-arrival priority, ahead of instance events at that time."""
        env = self.env
        arrive = self.gateway.arrive
        for req in requests:
            if req.arrival > env.now:
                yield StageEvent(env, req.arrival - env.now, CLUSTER_ARRIVAL)
            self.requests.append(req)
            arrive(req)

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
