"""The deployment model (seed 001 §2, §4): models, each served by one or more deployment
configs (hardware, step-time model, KV size, a replica pool and its price), and the autoscaler
that resizes the pools, with how its decisions take effect (actuation).

A scenario without a `deployment` section is the one-model, one-config shorthand: `model:`
served by `cluster.instances` fixed replicas. With one, the pools replace `cluster.instances`,
and `model:` names the default model: the one a request serves when its trace row or tenant
names none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from blis_simpy.config.distributions import Constant, Distribution
from blis_simpy.config.node_pools import NodePool, check_pools
from blis_simpy.config.pd import Disaggregation
from blis_simpy.config.replicas import ReplicaPool
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.schema import join, spec
from blis_simpy.core.units import MAX_FLOAT, MAX_SIM_S


@dataclass(frozen=True, slots=True)
class DeploymentConfig:
    """One way of serving a model: hardware, architecture and a replica pool. `latency` and
    `engine` default to the scenario's own sections (the catalog fills the rest per GPU/TP)."""

    id: str = spec(help="config id, unique in the scenario, e.g. llama8b-h100")
    gpu: str | None = spec(None, help="GPU type; default: `model.gpu` for the default model, "
                           "else the catalog's")
    tp: int | None = spec(None, help="tensor parallelism; default as gpu", ge=1)
    architecture: Literal["monolithic", "disaggregated_pd"] = spec(
        "monolithic", help="monolithic: one engine per replica; disaggregated_pd: a prefill "
        "and a decode pool (`pd`), KV handed over between them")
    latency: dict[str, Any] | None = spec(
        None, help="step-time model of this config (like `latency:`); default: the scenario's")
    engine: dict[str, Any] | None = spec(
        None, help="engine limits of this config (like `engine:`); default: the scenario's")
    replicas: ReplicaPool = spec(factory=ReplicaPool, help="min/max/initial replicas")
    cost_per_replica_hour: float = spec(0.0, help="price of one replica for an hour ($)", ge=0,
                                        le=MAX_FLOAT)
    pd: Disaggregation | None = spec(None, help="disaggregated_pd: the prefill and decode "
                                     "pools, decider, link and backpressure", omit_default=True)
    node_pool: str | None = spec(None, help="the node pool its replicas are placed on "
                                 "(deployment.node_pools); default: the only pool with its GPU "
                                 "type", omit_default=True)

    def validate(self, path: str) -> None:
        if self.architecture == "monolithic":
            if self.pd is not None:
                raise ScenarioError(join(path, "pd"), "is only read with architecture "
                                    "disaggregated_pd", "leave it out, or architecture: "
                                    "disaggregated_pd")
        elif self.pd is None:
            raise ScenarioError(join(path, "pd"), "is required with architecture "
                                "disaggregated_pd", "a pd section with prefill and decode "
                                "pools, e.g. pd: {prefill: {replicas: {min: 1, max: 1}}, "
                                "decode: {replicas: {min: 1, max: 1}}}")
        elif self.replicas != ReplicaPool():
            raise ScenarioError(join(path, "replicas"), "a disaggregated_pd config has no "
                                "replicas of its own", "pd.prefill.replicas and "
                                "pd.decode.replicas")

    @property
    def disaggregation(self) -> Disaggregation | None:
        """The P/D section of a disaggregated_pd config; None for a monolithic one."""
        return None if self.architecture == "monolithic" else self.pd


@dataclass(frozen=True, slots=True)
class ModelDeployment:
    """A served model and the configs serving it. Requests naming `name` (trace rows) or sent
    by one of `tenants` go only to this model's instances."""

    name: str = spec(help="model id, as requests name it, e.g. meta-llama/llama-3.1-8b-instruct")
    configs: list[DeploymentConfig] = spec(help="deployment configs serving it", min_len=1)
    tenants: list[str] = spec(factory=list, help="tenants whose requests this model serves "
                              "(tenants named by no model go to the default model)")
    vllm_version: str | None = spec(None, help="vLLM image of the coefficients; default: "
                                    "`model.vllm_version` for the default model, else the "
                                    "catalog's")


@dataclass(frozen=True, slots=True)
class Warmup:
    """A new replica's first minutes (cold CUDA graphs, allocator, caches): each step takes
    `penalty` times longer at first, falling to 1 over `duration_s` along `curve`. Its prefix
    cache starts empty, as any new engine's does."""

    duration_s: float = spec(0.0, help="how long the penalty lasts (s); 0: none", ge=0,
                             le=MAX_SIM_S)
    curve: Literal["linear", "exponential", "step"] = spec(
        "linear", help="linear: penalty falls evenly to 1; exponential: fast at first (e-folding "
        "time duration/5); step: full penalty until the end")
    penalty: float = spec(1.5, help="step-time factor at the start of warm-up (1.5 = 50% "
                          "slower)", ge=1, le=1000)

    def factor(self, elapsed_us: int, duration_us: int) -> float:
        """The step-time factor `elapsed_us` into a warm-up of `duration_us`."""
        if elapsed_us >= duration_us:
            return 1.0
        extra = self.penalty - 1.0
        if self.curve == "step":
            return self.penalty
        fraction = elapsed_us / duration_us
        if self.curve == "linear":
            return 1.0 + extra * (1.0 - fraction)
        return 1.0 + extra * 2.718281828459045 ** (-5.0 * fraction)


@dataclass(frozen=True, slots=True)
class Drain:
    """What happens to a replica chosen for scale-down. It takes no new requests from then on.
    wait: in-flight requests finish (those left at `timeout_s` are handed back as by
    immediate); immediate: every in-flight request is handed back to the gateway and restarts
    elsewhere, its computed tokens lost; redirect: waiting requests are handed back, running
    ones finish."""

    policy: Literal["wait", "immediate", "redirect"] = spec("wait", help="wait | immediate | "
                                                            "redirect")
    timeout_s: float | None = spec(None, help="wait: hand back what is left after this long; "
                                   "null: wait for all", gt=0, le=MAX_SIM_S)


def zero() -> Distribution:
    return Constant(value=0.0)


@dataclass(frozen=True, slots=True)
class Actuation:
    """How a scale decision takes effect (seed 001 §4): a new replica is provisioning (node and
    container), then loading (weights), then warming, then active."""

    provisioning_s: Distribution = spec(factory=zero, help="node/container start-up time (s), "
                                        "drawn per replica from the 'autoscaler' stream")
    load_s: Distribution = spec(factory=zero, help="model weight load time (s), drawn per "
                                "replica from the 'autoscaler' stream")
    warmup: Warmup = spec(factory=Warmup, help="step-time penalty of a new replica")
    warming_takes_traffic: bool = spec(
        True, help="true (vLLM: the server is ready, and routed to, once weights are loaded; "
        "its first steps are slower): a warming replica is routable; false: only after warm-up")
    drain: Drain = spec(factory=Drain, help="scale-down: what happens to in-flight requests")


@dataclass(frozen=True, slots=True)
class Triggers:
    """Events that run the autoscaler between its periodic ticks."""

    queue_depth: int | None = spec(None, help="evaluate when a config's requests waiting reach "
                                   "this many; null: off", ge=1)
    recent_ttft_ms: float | None = spec(
        None, help="evaluate when a request finishes while the mean recent TTFT of the "
        "config's routable replicas is above this (ms; SLO attainment degrading); null: off",
        gt=0, le=MAX_FLOAT)
    min_gap_s: float = spec(1.0, help="at most one event-triggered evaluation per config this "
                            "often (s)", gt=0, le=MAX_SIM_S)


@dataclass(frozen=True, slots=True)
class ScalePolicyConfig:
    type: str = spec("threshold", help="threshold | target-utilization | queue-depth | "
                     "kv-demand | oscillator, or module:Class for your own")
    params: dict[str, Any] = spec(factory=dict, help="the template's parameters")


@dataclass(frozen=True, slots=True)
class AutoscalerConfig:
    policy: ScalePolicyConfig = spec(factory=ScalePolicyConfig, help="the autoscale policy, "
                                     "evaluated per deployment config")
    interval_s: float = spec(10.0, help="poll interval (s): each config is evaluated this "
                             "often", gt=0, le=MAX_SIM_S)
    triggers: Triggers = spec(factory=Triggers, help="event triggers besides the poll")
    actuation: Actuation = spec(factory=Actuation, help="delays, warm-up and drain")
    oscillation_window_s: float | None = spec(
        None, help="scale actions of one config each within this long of the last, reversing "
        "direction twice or more, are a scale_oscillation (flapping) episode; default: the "
        "policy's cooldown + 3 poll intervals + the config's mean time-to-ready",
        gt=0, le=MAX_SIM_S)


@dataclass(frozen=True, slots=True)
class DeploymentSection:
    models: list[ModelDeployment] = spec(help="served models and their configs", min_len=1)
    autoscaler: AutoscalerConfig | None = spec(None, help="resize the pools; null: fixed pools "
                                               "of `initial` replicas")
    node_pools: list[NodePool] = spec(
        factory=list, help="nodes with GPUs of a type the replicas are placed on "
        "(docs/guides/node-pools.md); empty: replicas need no GPUs", omit_default=True)

    def validate(self, path: str) -> None:
        check_pools(self.node_pools, join(path, "node_pools"))
        names: set[str] = set()
        ids: set[str] = set()
        tenants: dict[str, str] = {}
        for i, model in enumerate(self.models):
            where = join(join(path, "models"), i)
            if model.name.lower() in names:
                raise ScenarioError(join(where, "name"), f"duplicate model {model.name!r}")
            names.add(model.name.lower())
            for tenant in model.tenants:
                if tenant in tenants:
                    raise ScenarioError(join(where, "tenants"), f"tenant {tenant!r} is "
                                        f"already served by {tenants[tenant]!r}",
                                        "each tenant in one model's list at most")
                tenants[tenant] = model.name
            for j, config in enumerate(model.configs):
                if config.id in ids:
                    raise ScenarioError(join(join(join(where, "configs"), j), "id"),
                                        f"duplicate config id {config.id!r}")
                ids.add(config.id)
                if config.node_pool is not None and not self.node_pools:
                    raise ScenarioError(join(join(join(where, "configs"), j), "node_pool"),
                                        "names a pool, and deployment.node_pools has none",
                                        "leave it out, or add deployment.node_pools")
                if config.architecture != "monolithic" and len(model.configs) > 1:
                    raise ScenarioError(join(join(join(where, "configs"), j), "architecture"),
                                        "a disaggregated_pd config serves its model alone",
                                        "one config for this model, or monolithic")

    def configs(self) -> list[tuple[ModelDeployment, DeploymentConfig]]:
        return [(model, config) for model in self.models for config in model.configs]

    def model_named(self, name: str) -> ModelDeployment | None:
        for model in self.models:
            if model.name.lower() == name.lower():
                return model
        return None
