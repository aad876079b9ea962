"""Wire a scenario's deployment section: one DeploymentPool per config with its initial
replicas, one fleet per model when there are several, and the autoscaler when one is set.

Instances are named `instance_<n>` in the order they are created, across configs, so a
deployment of one config and no autoscaler runs exactly as the `cluster.instances` shorthand.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

from blis_simpy.cluster.actuation import DeploymentPool
from blis_simpy.cluster.autoscaler import Autoscaler, ConfigScaler
from blis_simpy.cluster.fleet import Fleet, ModelFleets
from blis_simpy.cluster.gateway import Gateway
from blis_simpy.config.deployment import Actuation, AutoscalerConfig
from blis_simpy.config.resolve import config_scenario
from blis_simpy.config.scenario import EngineConfig, Scenario
from blis_simpy.core.clock import Environment
from blis_simpy.core.records import Recorder
from blis_simpy.core.scale_log import ScaleLog
from blis_simpy.core.units import US_PER_S
from blis_simpy.engine.instance import Instance
from blis_simpy.engine.latency import LatencyModel, latency_model
from blis_simpy.policies.autoscale import AUTOSCALE, AutoscalePolicy
from blis_simpy.rng.streams import stream
from blis_simpy.workload.sampling import sample_seconds

MakeInstance = Callable[[str, LatencyModel, EngineConfig], Instance]


def deploy(scenario: Scenario, env: Environment, fleet: Fleet, gateway: Gateway,
           recorder: Recorder, make: MakeInstance) -> ScaleLog:
    section = scenario.deployment
    assert section is not None
    log = ScaleLog()
    autoscaler = section.autoscaler
    actuation = autoscaler.actuation if autoscaler is not None else Actuation()
    delays = actuation_delays(actuation, scenario.seed)
    several = len(section.models) > 1
    numbers = itertools.count()
    pools: list[DeploymentPool] = []
    fleets: dict[str, Fleet] = {}
    for model, config in section.configs():
        own = config_scenario(scenario, model, config)
        latency = latency_model(own)
        fleets.setdefault(model.name, Fleet() if several else fleet)
        pool = DeploymentPool(
            env, config.id, model.name, config.replicas,
            (fleet, fleets[model.name]) if several else (fleet,), gateway,
            spawner(make, numbers, latency, own.engine), actuation, delays, log)
        log.configs[config.id] = (model.name, config.cost_per_replica_hour)
        pool.start(config.replicas.start)
        pools.append(pool)
    if several:
        gateway.models = ModelFleets(
            fleets, {t: m.name for m in section.models for t in m.tenants}, scenario.model.name)
    if autoscaler is not None:
        scalers = []
        for pool in pools:
            policy = AUTOSCALE.create(autoscaler.policy, "deployment.autoscaler.policy")
            scalers.append(ConfigScaler(pool, policy, oscillation_window(autoscaler, policy)))
        Autoscaler(env, autoscaler, scalers, gateway, recorder, log,
                   "deployment.autoscaler.policy", not several)
    return log


def spawner(make: MakeInstance, numbers: Iterator[int], latency: LatencyModel,
            engine: EngineConfig) -> Callable[[], Instance]:
    """Makes the next instance of one config, numbered across the whole deployment."""
    def spawn() -> Instance:
        return make(f"instance_{next(numbers)}", latency, engine)
    return spawn


def oscillation_window(config: AutoscalerConfig, policy: AutoscalePolicy) -> int:
    """The scenario's window, else the policy's cooldown, else three poll intervals (µs)."""
    if config.oscillation_window_s is not None:
        return round(config.oscillation_window_s * US_PER_S)
    return policy.cooldown_us or round(3 * config.interval_s * US_PER_S)


def actuation_delays(actuation: Actuation, seed: int) -> Callable[[], tuple[int, int]]:
    """Draws (provisioning µs, load µs) per new replica from the "autoscaler" stream."""
    rng = stream(seed, "autoscaler")

    def draw() -> tuple[int, int]:
        provisioning = float(sample_seconds(actuation.provisioning_s, rng, 1)[0])
        load = float(sample_seconds(actuation.load_s, rng, 1)[0])
        return round(provisioning * US_PER_S), round(load * US_PER_S)
    return draw
