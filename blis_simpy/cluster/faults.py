"""The fault injector: the scenario's `faults:` section as SimPy processes.

Each crash, random-crash target and slowdown is one process, written as the breakdown process
of SimPy's machine-shop example: wait, then interrupt the victim's process
(`instance.fail`, i.e. `instance.process.interrupt(Failure(...))`). What a crash does is the
instance's own business (engine/instance.py) and its pool's (cluster/pool.py): its requests
are lost, its KV cache with them, it takes no traffic until repaired, and the gateway sends
the lost requests again or fails them (`faults.requests`).

Random crashes draw each instance's time to failure and time to repair from the "faults"
stream; they stop once nothing but background wake-ups is left to happen, so a run with no
horizon still ends. Every process's timers are background events for the same reason.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator, Sequence

import simpy

from blis_simpy.cluster.fleet import Fleet
from blis_simpy.cluster.pool import Pool
from blis_simpy.config.distributions import Distribution
from blis_simpy.config.faults import Crash, FaultsConfig, RandomCrashes, Slowdown, Targeted
from blis_simpy.core.clock import Environment
from blis_simpy.core.failure import Failure
from blis_simpy.core.ordering import Background, only_background_left
from blis_simpy.core.records import Recorder
from blis_simpy.core.snapshot import Lifecycle
from blis_simpy.core.units import US_PER_S
from blis_simpy.engine.instance import Instance
from blis_simpy.engine.latency import Scaled

DOWN = (Lifecycle.FAILED, Lifecycle.DEAD, Lifecycle.TERMINATED)

# Draws a duration (s) from a distribution, on the "faults" stream.
Draw = Callable[[Distribution], float]


class FaultInjector:
    """Starts one process per crash, per instance under random crashes, and per slowdown."""

    def __init__(self, env: Environment, config: FaultsConfig, fleet: Fleet,
                 pools: Sequence[Pool], recorder: Recorder, draw: Draw) -> None:
        self.env = env
        self.fleet = fleet
        self.pools = pools
        self.recorder = recorder
        self.draw = draw
        for crash in config.crashes:
            env.process(self.crash(crash))
        for spec in config.random_crashes:
            for inst in self.targets(spec):
                env.process(self.random_crashes(spec, inst))
            if not spec.instances:  # replicas that join later are in it too
                for pool in self.pools_of(spec):
                    pool.joined.append(functools.partial(self.joined, spec))
        for slowdown in config.slowdowns:
            env.process(self.slow(slowdown))

    def joined(self, spec: RandomCrashes, inst: Instance) -> None:
        self.env.process(self.random_crashes(spec, inst))

    def pools_of(self, target: Targeted) -> list[Pool]:
        config = target.config
        return [pool for pool in self.pools
                if config is None or pool.config == config or pool.config.startswith(
                    f"{config}/")]

    def targets(self, target: Targeted) -> list[Instance]:
        """The target's instances now, leaving out those already down or gone."""
        if target.instances:
            found = [self.fleet.get(name) for name in target.instances]
            chosen = [inst for inst in found if inst is not None]
        else:
            chosen = [inst for pool in self.pools_of(target) for inst in pool.members]
        return [inst for inst in chosen if inst.state not in DOWN]

    def seconds(self, value: float) -> int:
        return round(value * US_PER_S)

    # -- the processes ------------------------------------------------------------------------

    def crash(self, crash: Crash) -> Generator[simpy.Event, object, None]:
        """Crash the target's instances at `at_s` (a pool or the whole fleet at once)."""
        yield Background(self.env, self.seconds(crash.at_s))
        for inst in self.targets(crash):
            inst.fail(Failure(crash.repair_s, crash.reason))

    def random_crashes(self, spec: RandomCrashes, inst: Instance
                       ) -> Generator[simpy.Event, object, None]:
        """Serve for a time to failure, crash, be repaired; again, while work is left."""
        while True:
            yield Background(self.env, max(1, self.seconds(self.draw(spec.mtbf_s))))
            if only_background_left(self.env) or inst.state in DOWN:
                return
            repair = None if spec.mttr_s is None else self.draw(spec.mttr_s)
            inst.fail(Failure(repair, "random crash"))
            if repair is None:
                return
            yield Background(self.env, self.seconds(repair))

    def slow(self, slowdown: Slowdown) -> Generator[simpy.Event, object, None]:
        """The target's steps take `factor` times as long for `for_s`."""
        yield Background(self.env, self.seconds(slowdown.at_s))
        factor = slowdown.factor
        slowed = []
        for inst in self.targets(slowdown):
            scaled = Scaled(inst.latency, lambda: factor)
            inst.latency = scaled
            slowed.append((inst, scaled))
            self.recorder.faults.append((self.env.now, "slow", inst.id, "", f"{factor:g}"))
        yield Background(self.env, self.seconds(slowdown.for_s))
        for inst, scaled in slowed:
            if inst.latency is scaled:  # (a warm-up ending meanwhile put its own back)
                inst.latency = scaled.base
            self.recorder.faults.append((self.env.now, "normal", inst.id, "", ""))
