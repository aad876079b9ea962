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
from blis_simpy.cluster.pd import PDHandoff, PoolChoice
from blis_simpy.cluster.placement import Placement, Seats
from blis_simpy.config.deployment import (
    Actuation,
    AutoscalerConfig,
    DeploymentConfig,
    DeploymentSection,
    ModelDeployment,
)
from blis_simpy.config.node_pools import NodePool
from blis_simpy.config.pd import Disaggregation
from blis_simpy.config.resolve import config_scenario, kv_block_bytes, kv_layers, pool_config
from blis_simpy.config.scenario import EngineConfig, ModelConfig, Scenario
from blis_simpy.core.clock import Environment
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.records import Recorder
from blis_simpy.core.scale_log import ScaleLog
from blis_simpy.core.snapshot import Role
from blis_simpy.core.units import US_PER_S
from blis_simpy.engine.instance import Instance
from blis_simpy.engine.latency import LatencyModel, latency_model
from blis_simpy.engine.pd import DecodeInstance, PrefillInstance
from blis_simpy.policies.autoscale import AUTOSCALE, AutoscalePolicy
from blis_simpy.policies.routing import RoutingPolicy
from blis_simpy.rng.streams import stream
from blis_simpy.workload.sampling import sample_seconds

MakeInstance = Callable[[str, LatencyModel, EngineConfig, Role], Instance]


def deploy(scenario: Scenario, env: Environment, fleet: Fleet, gateway: Gateway,
           recorder: Recorder, make: MakeInstance, log: ScaleLog, checks: bool = False,
           routing: Callable[[], RoutingPolicy] | None = None
           ) -> tuple[list[DeploymentPool], list[ConfigScaler]]:
    """The pools (in config order, a P/D config's prefill then decode pool) and the
    autoscaler's per-config scalers (none without an autoscaler). `routing` makes the
    routing policy object of a P/D config's decode pool."""
    section = scenario.deployment
    assert section is not None
    autoscaler = section.autoscaler
    actuation = autoscaler.actuation if autoscaler is not None else Actuation()
    delays = actuation_delays(actuation, scenario.jitter_seed)
    several = len(section.models) > 1
    numbers = itertools.count()
    pools: list[DeploymentPool] = []
    fleets: dict[str, Fleet] = {}
    choice = PoolChoice()
    placement = Placement(env, section.node_pools, log, node_provisioning(scenario.jitter_seed)) \
        if section.node_pools else None
    for model, config in section.configs():
        fleets.setdefault(model.name, Fleet() if several else fleet)
        homes = (fleet, fleets[model.name]) if several else (fleet,)
        pd = config.disaggregation
        if pd is not None:
            assert routing is not None
            prefill = pool_scenario(scenario, model, config, pd, "prefill")
            handoff = PDHandoff(env, config.id, pd, gateway, Fleet(), Fleet(), recorder,
                                kv_block_bytes(prefill), prefill.engine.block_size, routing(),
                                checks, kv_layers(prefill))
            choice.by_fleet[id(homes[-1])] = handoff
            pools += disaggregated(scenario, model, config, pd, env, homes, gateway,
                                   make, numbers, actuation, delays, log, handoff,
                                   placement, section)
            continue
        own = config_scenario(scenario, model, config)
        latency = named_latency(own, config_path(section, config))
        pool = DeploymentPool(
            env, config.id, model.name, config.replicas, homes, gateway,
            spawner(make, numbers, latency, own.engine), actuation, delays, log)
        log.configs[config.id] = (model.name, config.cost_per_replica_hour)
        start(pool, config.replicas.start, placement, section, config, gpus(own.model))
        pools.append(pool)
    if choice.by_fleet:
        gateway.pools = choice
    if several:
        gateway.models = ModelFleets(
            fleets, {t: m.name for m in section.models for t in m.tenants}, scenario.model.name)
    scalers = []
    if autoscaler is not None:
        for pool in pools:
            policy = AUTOSCALE.create(autoscaler.policy, "deployment.autoscaler.policy")
            log.windows[pool.config] = oscillation_window(autoscaler, policy)
            scalers.append(ConfigScaler(pool, policy))
        Autoscaler(env, autoscaler, scalers, gateway, recorder, log,
                   "deployment.autoscaler.policy", not several, scenario.slo_targets())
    return pools, scalers


def spawner(make: MakeInstance, numbers: Iterator[int], latency: LatencyModel,
            engine: EngineConfig, role: Role = Role.MONOLITHIC,
            handoff: PDHandoff | None = None) -> Callable[[], Instance]:
    """Makes the next instance of one config (or P/D pool), numbered across the whole
    deployment."""
    def spawn() -> Instance:
        instance = make(f"instance_{next(numbers)}", latency, engine, role)
        if handoff is not None:
            assert isinstance(instance, PrefillInstance | DecodeInstance)
            instance.handoff = handoff
            if isinstance(instance, PrefillInstance):
                instance.bound = handoff.pd.max_held
        return instance
    return spawn


def pool_scenario(scenario: Scenario, model: ModelDeployment, config: DeploymentConfig,
                  pd: Disaggregation, role: str) -> Scenario:
    """The one-model scenario a P/D pool's replicas run (checked when resolved)."""
    return config_scenario(scenario, model, pool_config(config, getattr(pd, role)))


def disaggregated(scenario: Scenario, model: ModelDeployment, config: DeploymentConfig,
                  pd: Disaggregation, env: Environment, homes: tuple[Fleet, ...],
                  gateway: Gateway, make: MakeInstance, numbers: Iterator[int],
                  actuation: Actuation, delays: Callable[[], tuple[int, int]], log: ScaleLog,
                  handoff: PDHandoff, placement: Placement | None,
                  section: DeploymentSection) -> list[DeploymentPool]:
    """A disaggregated_pd config's prefill and decode pools (`<id>/prefill`, `<id>/decode`,
    scaled independently), joined by its handoff."""
    pools = []
    path = config_path(section, config)
    for role, split in (("prefill", handoff.prefill), ("decode", handoff.decode)):
        own = pool_scenario(scenario, model, config, pd, role)
        spec = getattr(pd, role)
        pool = DeploymentPool(
            env, f"{config.id}/{role}", model.name, spec.replicas, (*homes, split), gateway,
            spawner(make, numbers, named_latency(own, f"{path}.pd.{role}"), own.engine,
                    Role(role), handoff),
            actuation, delays, log)
        log.configs[pool.config] = (model.name, config.cost_per_replica_hour)
        start(pool, spec.replicas.start, placement, section, config, gpus(own.model))
        pools.append(pool)
    return pools


def config_path(section: DeploymentSection, config: DeploymentConfig) -> str:
    """Where a config is in the scenario, for the errors of its one-model scenario."""
    for i, model in enumerate(section.models):
        for j, own in enumerate(model.configs):
            if own is config:
                return f"deployment.models[{i}].configs[{j}]"
    return "deployment"


def named_latency(own: Scenario, path: str) -> LatencyModel:
    """The step model of a config (or P/D pool); its errors speak of the config's one-model
    scenario (`model.tp`), so they are named after the config as well."""
    try:
        return latency_model(own)
    except ScenarioError as exc:
        raise ScenarioError(path, exc.text) from None


def gpus(model: ModelConfig) -> int:
    """The GPUs one replica takes: its data-parallel ranks' tensor-parallel groups."""
    return (model.tp or 1) * model.dp


def start(pool: DeploymentPool, count: int, placement: Placement | None,
          section: DeploymentSection | None, config: DeploymentConfig, tp: int) -> None:
    """A pool's initial replicas, placed on its node pool's ready nodes when there are node
    pools (they must fit: a scenario whose initial replicas do not is an error)."""
    if placement is not None:
        assert section is not None and config.node_pool is not None
        nodes = next(p for p in section.node_pools if p.id == config.node_pool)
        pool.seats = Seats(placement, nodes, pool.config, tp)
    placed = pool.start(count)
    if placed < count:
        raise ScenarioError("deployment.node_pools", f"the {count} initial replicas of "
                            f"{pool.config!r} ({tp} GPUs each) do not fit on the ready nodes "
                            f"of pool {config.node_pool!r}: {placed} placed",
                            "more nodes, or fewer initial replicas")


def oscillation_window(config: AutoscalerConfig, policy: AutoscalePolicy
                       ) -> tuple[int, bool]:
    """The scenario's window (µs), else the policy's cooldown plus three poll intervals, to
    which the config's time-to-ready is added when the run ends (metrics/anomalies.py)."""
    if config.oscillation_window_s is not None:
        return round(config.oscillation_window_s * US_PER_S), False
    return (policy.cooldown_us or 0) + round(3 * config.interval_s * US_PER_S), True


def node_provisioning(seed: int) -> Callable[[NodePool], int]:
    """Draws a new node's provisioning time (µs) from the "nodes" stream."""
    rng = stream(seed, "nodes")
    return lambda pool: round(float(sample_seconds(pool.provisioning_s, rng, 1)[0]) * US_PER_S)


def actuation_delays(actuation: Actuation, seed: int) -> Callable[[], tuple[int, int]]:
    """Draws (provisioning µs, load µs) per new replica from the "autoscaler" stream."""
    rng = stream(seed, "autoscaler")

    def draw() -> tuple[int, int]:
        provisioning = float(sample_seconds(actuation.provisioning_s, rng, 1)[0])
        load = float(sample_seconds(actuation.load_s, rng, 1)[0])
        return round(provisioning * US_PER_S), round(load * US_PER_S)
    return draw
