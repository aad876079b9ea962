"""Wire a resolved scenario into one SimPy environment: the recorder, the instances of the
fleet in their pools, the gateway, the autoscaler, the fault injector and the request source,
each with the policies the scenario names.

Policies are created here, once per run; an unknown or misconfigured one, a bad trace or an
unusable latency model fails here, before any event runs (EC-1).
"""

from __future__ import annotations

import functools
import gc
import itertools
import math
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from operator import itemgetter
from typing import TYPE_CHECKING

from blis_simpy.cluster.fleet import Fleet
from blis_simpy.cluster.gateway import Gateway
from blis_simpy.cluster.pool import Pool
from blis_simpy.config.resolve import kv_block_bytes, kv_catalog_note
from blis_simpy.config.scenario import EngineConfig, Scenario
from blis_simpy.config.workload import ClientTimeouts
from blis_simpy.core.clock import Environment
from blis_simpy.core.errors import InvariantError
from blis_simpy.core.loop import run_events
from blis_simpy.core.ordering import Background, only_background_left
from blis_simpy.core.records import Recorder, Records
from blis_simpy.core.scale_log import ScaleLog
from blis_simpy.core.snapshot import Role
from blis_simpy.core.units import MAX_SIM_US, US_PER_S
from blis_simpy.engine.adapters import AdapterSlots, ranks_of
from blis_simpy.engine.instance import Instance
from blis_simpy.engine.kv.checked import checked
from blis_simpy.engine.kv.tiered import TieredKVCache, tiered_pool
from blis_simpy.engine.latency import LatencyModel, bound, latency_model, latency_notes
from blis_simpy.engine.pd import DecodeInstance, PrefillInstance
from blis_simpy.metrics.conventions import Conventions
from blis_simpy.policies.admission import ADMISSION
from blis_simpy.policies.guard import guarded
from blis_simpy.policies.priority import PRIORITY
from blis_simpy.policies.registry import P, PolicySpec, Registry
from blis_simpy.policies.routing import ROUTING
from blis_simpy.policies.scheduler import SCHEDULER
from blis_simpy.rng.streams import stream
from blis_simpy.sim.modes import Mode, mode_of
from blis_simpy.workload import source
from blis_simpy.workload.source import PreparedRequests

if TYPE_CHECKING:
    from blis_simpy.cluster.autoscaler import ConfigScaler

EVENTS_PER_SLICE = 8192

# The instance class of each role (P/D pools use the prefill and decode ones: engine/pd.py).
ROLES: dict[Role, type[Instance]] = {Role.MONOLITHIC: Instance, Role.PREFILL: PrefillInstance,
                                     Role.DECODE: DecodeInstance}


@dataclass(frozen=True, slots=True)
class RunProgress:
    """How far a run is, for a progress report: read every few thousand events and once at
    the end (`done`)."""

    now_us: int
    arrived: int
    finished: int  # completed, rejected or timed out
    events: int
    wall_s: float
    done: bool = False


Progress = Callable[[RunProgress], None]


class Simulation:
    """One wired run of a resolved scenario, before and after it runs: its environment, the
    fleet (every instance by id, `fleet.get("instance_0")`), the pools the instances belong
    to (their public lifecycle: `drain`, `terminate`; and `instance.fail`), the gateway, the
    autoscaler's per-config scalers (each with its poll `process`) and the recorder. Add a
    process of your own with `sim.env.process(...)` before `run`; `after` and `work_left`
    let it wait without keeping the run alive (docs/extending.md)."""

    def __init__(self, scenario: Scenario, env: Environment, mode: Mode,
                 recorder: Recorder, fleet: Fleet, gateway: Gateway,
                 conventions: Conventions, checks: bool, input_notes: list[str],
                 scale_log: ScaleLog, pools: list[Pool],
                 autoscalers: list[ConfigScaler] | None = None) -> None:
        self.scenario = scenario
        self.env = env
        self.mode = mode
        self.recorder = recorder
        self.fleet = fleet
        self.gateway = gateway
        self.conventions = conventions
        self.checks = checks
        # what the run noted beyond its metrics (trace rows skipped, the clock's limit)
        self.input_notes = input_notes
        self.scale_log = scale_log  # lifecycle transitions and scale actions
        self.pools = pools
        self.autoscalers = autoscalers or []
        self.expected: int | None = None  # requests the workload will send, when known
        self.trace_times = False  # requests carry their trace rows' own timestamps
        self.stop_source: Callable[[], None] | None = None  # a producer process, if any

    def run(self, progress: Progress | None = None, every: int = 0) -> float:
        """Process every event up to the horizon, `every` events at a time (default
        EVENTS_PER_SLICE) when something is done between slices (progress reports, a
        streaming run's hand-over); returns the wall time spent (s)."""
        every = every or EVENTS_PER_SLICE
        horizon = self.scenario.horizon_us
        until = MAX_SIM_US if horizon is None else min(horizon, MAX_SIM_US)
        started = time.perf_counter()
        count = 0
        recorder = self.recorder
        streaming = recorder.sink is not None  # hands finished requests over between slices
        try:
            with sparse_collection():
                if progress is None and not streaming:
                    count = run_events(self.env, until, sys.maxsize, self.checks)
                else:
                    while (ran := run_events(self.env, until, every, self.checks)) == every:
                        count += ran
                        if streaming:
                            recorder.sweep(self.env.now)
                        if progress is not None:
                            progress(self.progress(count, started))
                    count += ran
        finally:  # the workload's producer, if any, is not needed any more
            if self.stop_source is not None:
                self.stop_source()
        if until == MAX_SIM_US and self.work_left():
            self.input_notes.append(
                f"the simulated clock reached its limit ({MAX_SIM_US // US_PER_S:,} s) with "
                "work still to do: the run ends there as at a horizon (a delay or think time "
                "that long is probably a mistake)")
        for instance in self.fleet:
            instance.finish()
        if recorder.events:  # a step under way at the horizon logs its progress as it ends
            recorder.events.sort(key=itemgetter(0))  # (at its start): back in time order
        if self.checks:
            self.check_counts()
        if progress is not None:
            progress(self.progress(count, started, done=True))
        return time.perf_counter() - started

    def after(self, seconds: float) -> Background:
        """An event `seconds` from now for a process of your own to wait on (`yield
        sim.after(5)`) that keeps no run alive: with no horizon, a run ends once only such
        wake-ups are left (`work_left`)."""
        if not (isinstance(seconds, int | float) and math.isfinite(seconds) and seconds >= 0):
            raise ValueError(f"after: got {seconds!r}; a number of seconds >= 0")
        return Background(self.env, round(seconds * US_PER_S))

    def work_left(self) -> bool:
        """Whether anything but background wake-ups is left to happen: requests still to come
        or in flight. A process that would go on for ever stops when this is False."""
        return not only_background_left(self.env)

    def check_counts(self) -> None:
        """The gateway's per-instance counts agree with the requests themselves: each one
        unfinished is in flight where it is counted, and nowhere else (checks=True)."""
        counted: dict[str, int] = {}
        for req in self.recorder.requests:
            if req.counted:
                counted[req.counted] = counted.get(req.counted, 0) + 1
        drifted = {name: (count, counted.get(name, 0))
                   for name, count in self.gateway.in_flight.items()
                   if count != counted.get(name, 0)}
        if drifted:
            raise InvariantError(f"in-flight counts drifted (counted, requests): {drifted}")

    def progress(self, events: int, started: float, done: bool = False) -> RunProgress:
        recorder = self.recorder
        finished = (sum(inst.completions for inst in self.fleet) + len(recorder.rejections)
                    + self.gateway.timed_out)
        return RunProgress(self.env.now, recorder.arrived, finished, events,
                           time.perf_counter() - started, done)

    @property
    def ended_at(self) -> int:
        """The time of the last event that ran (capped at the horizon)."""
        last = max(inst.last_event for inst in self.fleet)
        horizon = self.scenario.horizon_us
        return last if horizon is None else min(last, horizon)

    def records(self) -> Records:
        """The run's records as columns (after `run`)."""
        return self.recorder.close(self.ended_at)


def policy(registry: Registry[P], config: PolicySpec, path: str) -> P:
    """One policy object; a user's `module:Class` behind a guard that checks what it returns
    and names it in any error (templates are trusted and run bare)."""
    created = registry.create(config, path)
    if registry.is_user(config):
        return guarded(created, registry.base, path, config.type)
    return created


@contextmanager
def sparse_collection() -> Iterator[None]:
    """Fewer garbage collections while the event loop runs: what exists before it (modules,
    the scenario, the workload) is frozen out of every collection, and the youngest
    generation is collected every 50,000 allocations instead of 700. A run creates few
    reference cycles; collecting them late costs little memory and saves several percent of
    the run. Collection is on while the loop runs even if the caller had it off (the command
    line does while it loads); the interpreter's settings are restored afterwards."""
    threshold, enabled = gc.get_threshold(), gc.isenabled()
    gc.freeze()
    gc.set_threshold(50_000, threshold[1], threshold[2])
    gc.enable()
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()
        if not enabled:
            gc.disable()


def build(scenario: Scenario, *, recorder: Recorder | None = None, checks: bool = False,
          keep_tokens: bool = False, prepared: PreparedRequests | None = None) -> Simulation:
    """Wire a resolved scenario. `recorder` chooses what is recorded beyond the essentials
    (default: what `cluster.trace_level` asks for); `checks` verifies invariants while
    running (KV conservation after every block operation, clock monotonicity) and raises
    InvariantError; `keep_tokens` keeps every request's token ids (to export the workload);
    `prepared`: the scenario's requests drawn and hashed already (a sweep's runs share them,
    `workload/prepared.py`)."""
    env = Environment()
    mode = mode_of(scenario)
    policies, cluster, engine = scenario.policies, scenario.cluster, scenario.engine
    if recorder is None:
        recorder = Recorder(decisions=cluster.trace_level != "none",
                            events=cluster.trace_level == "full")
    priority = policy(PRIORITY, policies.priority, "policies.priority")
    admission = policy(ADMISSION, policies.admission, "policies.admission")
    routing = policy(ROUTING, policies.routing, "policies.routing")
    latency = latency_model(scenario)
    draft = None
    if engine.speculative is not None:  # imported only by scenarios that speculate
        from blis_simpy.engine.speculative import draft_model, speculate

        draft = draft_model(scenario, latency)
    pool_type = checked(mode.pool) if checks else mode.pool
    ranks = scenario.evaluation.ranks()
    fleet = Fleet()
    faults = scenario.faults
    gateway = Gateway(env, fleet, cluster, admission, priority, routing, recorder,
                      engine.block_size, ClientTimeouts.of(scenario.workload),
                      None if faults is None else faults.requests, checks)
    gateway.keep_tokens = keep_tokens
    if cluster.flow_control is not None:  # the gateway queue, built only when configured
        from blis_simpy.cluster.flow import FlowControl, ttft_targets

        gateway.flow = FlowControl(env, cluster.flow_control, gateway,
                                   ttft_targets(scenario))
    # one GPU's bytes per KV block, read once when a pool has tiers (the default model's)
    tier_bytes = functools.cache(lambda: kv_block_bytes(scenario))
    adapter_ranks = ranks_of(scenario.workload)  # LoRA: each adapter's rank, by name

    def make(name: str, latency: LatencyModel, engine: EngineConfig,
             role: Role = Role.MONOLITHIC) -> Instance:
        pool = (tiered_pool(engine, lambda: env.now, tier_bytes(), checks)
                if engine.kv_tiers.enabled
                else pool_type(engine.kv_blocks or 0, engine.block_size,
                               defer_index=role is Role.MONOLITHIC))  # P/D publishes handoffs
        instance = ROLES[role](
            env, name, bound(latency, env), engine, pool,
            policy(SCHEDULER, policies.scheduler, "policies.scheduler"), priority, recorder,
            class_ranks=ranks, reference_order=mode.reference_order)
        if isinstance(pool, TieredKVCache):
            instance.log.tiers = pool.log
        if engine.lora is not None:
            instance.adapters = AdapterSlots(name, engine.lora, adapter_ranks,
                                             recorder.adapter_loads, recorder.adapter_hits)
        if engine.speculative is not None:  # a stream per instance: no other draws move
            speculate(instance, engine.speculative, draft,
                      stream(scenario.sim_seed, f"speculation:{name}"))
        instance.observer = gateway
        return instance

    scale_log = ScaleLog()
    scalers: list[ConfigScaler] = []
    if scenario.deployment is None:  # the shorthand: one pool of fixed replicas
        numbers = itertools.count()
        pool = Pool(env, "default", scenario.model.name, (fleet,), gateway,
                    lambda: make(f"instance_{next(numbers)}", latency, engine), scale_log)
        pool.start(cluster.instances)
        pools = [pool]
    else:  # replica pools and autoscaling, imported only by scenarios that deploy
        from blis_simpy.sim.deploy import deploy

        deployed, scalers = deploy(scenario, env, fleet, gateway, recorder, make, scale_log,
                                   checks, lambda: policy(ROUTING, policies.routing,
                                                          "policies.routing"))
        pools = list(deployed)
    if faults is not None:  # imported only by scenarios with faults
        from blis_simpy.sim.faults import inject

        inject(scenario, env, fleet, pools, recorder)
    corrected = kv_catalog_note(scenario)
    started = source.start(env, scenario, gateway.arrive, reference_draws=mode.reference_draws,
                           keep_tokens=keep_tokens, prepared=prepared)
    sim = Simulation(scenario, env, mode, recorder, fleet, gateway,
                     mode.conventions(latency.output_delay), checks,
                     ([corrected] if corrected else []) + latency_notes(latency) + started.notes,
                     scale_log, pools, scalers)
    sim.expected, sim.trace_times = started.expected, started.timed
    sim.stop_source = started.stop
    return sim
