"""The scenario file: versioned YAML loaded into frozen, validated dataclasses.

Times in the file are seconds (`*_s`), rates are per second (`*_per_s`); the engine works in
integer microseconds. `resolve()` fills every default that depends on other values (catalog
coefficients, KV size, arrival process) so the resolved scenario written next to the results
says exactly what ran.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from blis_simpy.config.fitness import FitnessConfig
from blis_simpy.config.flow_control import FlowControlConfig
from blis_simpy.config.kv_tiers import KVTiersConfig
from blis_simpy.config.lora import LoraConfig
from blis_simpy.config.moe import MoeComm
from blis_simpy.config.workload import (
    ClientTimeouts,
    DistributionWorkload,
    SLOLookup,
    SLOTargets,
    TenantsWorkload,
    TraceWorkload,
    Workload,
)
from blis_simpy.core.arguments import instance
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.files import read_text
from blis_simpy.core.schema import join, load, spec, to_plain
from blis_simpy.core.units import (
    MAX_FLOAT,
    MAX_INSTANCES,
    MAX_KV_BLOCKS,
    MAX_SIM_S,
    MAX_TOKENS,
    US_PER_S,
)
from blis_simpy.core.yamlio import dump_yaml, load_yaml

if TYPE_CHECKING:
    from blis_simpy.config.deployment import DeploymentSection
    from blis_simpy.config.faults import FaultsConfig
    from blis_simpy.config.seeds import SeedsConfig
    from blis_simpy.config.speculation import SpeculativeConfig

# Most scenarios have no deployment, faults, seeds or speculative section: their classes load
# when one does (core/schema.py: FieldTypes), not with every scenario.
LAZY_TYPES = {"DeploymentSection": "blis_simpy.config.deployment",
              "FaultsConfig": "blis_simpy.config.faults",
              "SeedsConfig": "blis_simpy.config.seeds",
              "SpeculativeConfig": "blis_simpy.config.speculation"}


@dataclass(frozen=True, slots=True)
class ModelConfig:
    name: str = spec(help="model id, e.g. meta-llama/llama-3.1-8b-instruct (case-insensitive)")
    gpu: str | None = spec(None, help="GPU type, e.g. H100; default from the catalog")
    tp: int | None = spec(None, help="tensor parallelism; default from the catalog", ge=1)
    vllm_version: str | None = spec(None, help="vLLM image the coefficients were fitted on")
    dp: int = spec(1, help="data-parallel ranks inside each instance (vLLM "
                   "--data-parallel-size), each on tp GPUs: a mixture-of-experts model under "
                   "the physical step model only; one scheduler's batch is split over the ranks "
                   "and the experts over all tp x dp GPUs (docs/guides/moe.md)", ge=1,
                   le=1024, omit_default=True)
    expert_parallel: bool = spec(False, help="whole experts per GPU over the tp x dp GPUs "
                                 "(vLLM --enable-expert-parallel), not every expert sliced over "
                                 "them: a mixture-of-experts model only", omit_default=True)
    moe_comm: MoeComm | None = spec(None, help="the MoE dispatch/combine backend at dp > 1 "
                                    "(vLLM VLLM_ALL2ALL_BACKEND); default "
                                    "allgather_reducescatter", omit_default=True)


@dataclass(frozen=True, slots=True)
class LatencyConfig:
    type: Literal["blackbox", "roofline", "physical"] | None = spec(
        None, help="physical: the physical step model with a server family's coefficients "
        "(native default); blackbox: fitted alpha/beta coefficients of the catalog (compat "
        "default, and native when alpha or beta is given); roofline: analytic FLOPs/bytes"
    )
    alpha: list[float] | None = spec(
        None, help="[a0, a1, a2] µs: queueing delay a0 + a1*input_len, output processing a2",
        min_len=3,
    )
    beta: list[float] | None = spec(
        None, help="[b0, b1, b2] µs: step time b0 + b1*new_prefill_tokens + b2*decodes", min_len=3
    )
    coefficients: str | None = spec(
        None, help="physical: a bundled server family (vllm, sglang) or a coefficients file "
        "written by blis-simpy calibrate; default vllm", omit_default=True
    )
    graph_max_batch: int | None = spec(
        None, help="physical: the largest step (requests) the server runs in captured graphs "
        "(vLLM's max_cudagraph_capture_size; SGLang's cuda_graph_max_bs, or torch_compile_max_bs "
        "with --enable-torch-compile; 0: none, vLLM's --enforce-eager); a larger step pays "
        "the set's graph_layer_us per layer; default: the coefficient set's", ge=0,
        omit_default=True
    )
    model_config: str | None = spec(
        None, help="roofline/physical: HuggingFace config.json (or its folder); default: "
        "bundled config"
    )
    hardware_config: str | None = spec(
        None, help="roofline/physical: GPU figures JSON (native: hardware_native.json's "
        "format; compat roofline: the reference's); default: bundled"
    )

    def validate(self, path: str) -> None:
        if self.type == "roofline" and self.beta is not None:
            raise ScenarioError(join(path, "beta"), "is not used by the roofline model")
        if self.type == "physical":
            for name in ("alpha", "beta"):
                if getattr(self, name) is not None:
                    raise ScenarioError(join(path, name), "is not used by the physical model: "
                                        "its coefficients are named", "latency.coefficients: "
                                        "a server family (vllm, sglang) or a calibrated file")
        if self.graph_max_batch is not None and self.type not in (None, "physical"):
            raise ScenarioError(join(path, "graph_max_batch"), f"is used by the physical model "
                                f"only, not {self.type}", "type: physical")
        if self.coefficients is not None and self.type not in (None, "physical"):
            raise ScenarioError(join(path, "coefficients"), f"is used by the physical model "
                                f"only, not {self.type}", "type: physical")
        for name in ("alpha", "beta"):
            for i, value in enumerate(getattr(self, name) or ()):
                if not (math.isfinite(value) and 0 <= value <= MAX_FLOAT):
                    raise ScenarioError(
                        join(path, f"{name}[{i}]"), f"got {value}: a delay or step time made "
                        "of it could be negative or unbounded", f"a number in [0, {MAX_FLOAT:g}]")


# Adapters live on the cluster's instances; a deployment's pools (autoscaled, P/D) build theirs
# elsewhere and do not track them.
LORA_POOLS = ("LoRA adapters are modelled on the cluster's instances (cluster.instances), not "
              "on a deployment's replica pools")
SPECULATIVE_POOLS = ("speculative decoding is modelled on the cluster's instances "
                     "(cluster.instances), not on a deployment's replica pools")


@dataclass(frozen=True, slots=True)
class EngineConfig:
    max_running_requests: int = spec(256, help="max requests in the running batch", ge=1)
    max_scheduled_tokens: int = spec(2048, help="token budget per step", ge=1)
    long_prefill_threshold: int = spec(
        0, help="cap on one request's prefill chunk per step; 0 = only the budget", ge=0
    )
    kv_blocks: int | None = spec(
        None, help="KV cache size in blocks; default from the catalog (converted from its 16-token "
        "blocks to block_size, so the capacity in tokens stays); roofline: what fits in the GPU "
        "memory beside the weights; else 1000000", ge=1,
        le=MAX_KV_BLOCKS,
    )
    block_size: int = spec(16, help="tokens per KV block", ge=1, le=4096)
    max_model_len: int | None = spec(
        None, help="max prompt+output tokens; longer requests are rejected (null: KV size)", ge=1,
        le=MAX_TOKENS,
    )
    kv_tiers: KVTiersConfig = spec(factory=KVTiersConfig, help="CPU / storage KV tiers below "
                                   "the GPU cache, offload and reload (native mode)",
                                   omit_default=True)
    lora: LoraConfig | None = spec(None, help="LoRA adapter slots per instance and their load "
                                   "time (docs/guides/lora.md, native mode); null: requests "
                                   "name no adapters", omit_default=True)
    speculative: SpeculativeConfig | None = spec(
        None, help="speculative decoding: tokens drafted per decode step and their acceptance "
        "rate (docs/guides/speculative.md, native mode); null: one token per decode step",
        omit_default=True)




@dataclass(frozen=True, slots=True)
class Refresh:
    """When the router's view of one instance field is re-read (seed D.5.2)."""

    mode: Literal["immediate", "periodic", "on-demand"] = spec(
        "immediate", help="immediate: every read; periodic: every interval_s; on-demand: "
        "only on an explicit refresh"
    )
    interval_s: float = spec(0.0, help="periodic refresh interval (s)", ge=0)

    def validate(self, path: str) -> None:
        if self.mode == "periodic" and self.interval_us < 1:
            raise ScenarioError(join(path, "interval_s"), f"{self.interval_s!r} s is 0 µs on "
                                "the clock; periodic refresh needs an interval", ">= 1e-06")

    @property
    def interval_us(self) -> int:
        return round(self.interval_s * US_PER_S)


def periodic(seconds: float) -> Refresh:
    return Refresh("periodic", seconds)


@dataclass(frozen=True, slots=True)
class ObservabilityConfig:
    """How fresh each snapshot field is when a policy reads it. In-flight counts are always
    immediate (the router keeps them itself), and so are free KV blocks and the estimated
    wait (read from the instance at every snapshot, seed G.2)."""

    queue_depth: Refresh = spec(factory=Refresh, help="wait-queue length")
    batch_size: Refresh = spec(factory=Refresh, help="running-batch size")
    kv_utilization: Refresh = spec(factory=Refresh, help="KV blocks used / total")
    cache_hit_rate: Refresh = spec(factory=lambda: periodic(0.01), help="prefix-cache hit rate")
    recent_ttft: Refresh = spec(factory=lambda: periodic(0.1), help="mean TTFT of recent requests")
    recent_tpot: Refresh = spec(factory=lambda: periodic(0.1), help="mean TPOT of recent requests")
    cached_blocks: Refresh = spec(
        factory=lambda: periodic(0.05), help="the instances' real prefix caches, as the "
        "precise-prefix-cache and no-hit-lru scorers read them (KV events; default: a copy "
        "refreshed every 50 ms, the reference's --cache-signal-delay)", omit_default=True)


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    instances: int = spec(1, help="number of identical replicas", ge=1, le=MAX_INSTANCES)
    admission_latency_us: int = spec(0, help="delay from arrival to the admission decision", ge=0)
    routing_latency_us: int = spec(0, help="delay from admission to the routing decision", ge=0)
    observability: ObservabilityConfig = spec(
        factory=ObservabilityConfig, help="snapshot freshness per field"
    )
    trace_level: Literal["none", "decisions", "full"] = spec(
        "none", help="none: no trace (costs nothing); decisions: every admission, priority and "
        "routing decision with its context (the decisions table); full: also the ordered "
        "lifecycle event log")
    top_k: int = spec(3, help="candidates listed per routing decision in the trace", ge=1)
    shadow_kv_capacity: int = spec(
        10_000, help="the router's shadow KV model: prompt block hashes remembered per instance "
        "(its LRU eviction estimate)", ge=1)
    flow_control: FlowControlConfig | None = spec(
        None, help="a gateway queue in priority bands between admission and routing, drained "
        "while the fleet is not saturated (docs/guides/flow-control.md); null: none",
        omit_default=True)


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    type: str = spec(help="template name, or module:Class for your own policy")
    params: dict[str, Any] = spec(factory=dict, help="the template's parameters")


@dataclass(frozen=True, slots=True)
class PoliciesConfig:
    admission: PolicyConfig = spec(factory=lambda: PolicyConfig("always-admit"),
                                   help="admit / reject / delay each arrival")
    priority: PolicyConfig = spec(factory=lambda: PolicyConfig("constant"),
                                  help="a request's priority score")
    routing: PolicyConfig = spec(factory=lambda: PolicyConfig("round-robin"),
                                 help="which instance serves a request")
    scheduler: PolicyConfig = spec(factory=lambda: PolicyConfig("fcfs"),
                                   help="wait-queue order and preemption victim per instance")


# Urgency by SLO class when judging SLO-class inversions: lower rank = more urgent. A class not
# listed ranks with the unnamed default class.
DEFAULT_CLASS_RANKS = {"realtime": 0, "critical": 0, "interactive": 1, "standard": 1, "": 2,
                       "default": 2, "batch": 3, "sheddable": 3, "background": 4}


@dataclass(frozen=True, slots=True)
class Burst:
    count: int = spec(10, help="this many events ...", ge=2)
    window_s: float = spec(1.0, help="... within this window (s) make one anomaly", gt=0)


@dataclass(frozen=True, slots=True)
class MeasurementWindow:
    """Which part of a run its metrics describe (docs/reference/metrics.md, "The measurement
    window")."""

    warmup_s: float = spec(0.0, help="measure the requests arriving from this time on (s): a "
                           "run starts with empty queues and cold prefix caches", ge=0,
                           le=MAX_SIM_S)
    end_s: float | None = spec(None, help="... and before this time (s); rates count the "
                               "completions and tokens within [warmup_s, end_s); null: until "
                               "the run's end", gt=0, le=MAX_SIM_S)

    def validate(self, path: str) -> None:
        if self.end_s is not None and self.end_s <= self.warmup_s:
            raise ScenarioError(join(path, "end_s"), f"{self.end_s:g} is not after warmup_s "
                                f"{self.warmup_s:g}", f"a time above {self.warmup_s:g}, or null")

    @property
    def whole(self) -> bool:
        """The default: the whole run."""
        return self.warmup_s == 0 and self.end_s is None


@dataclass(frozen=True, slots=True)
class SaturationLevels:
    """How the saturation detector cuts the measured span into windows, each labelled STABLE,
    BACKLOGGED or OVERLOADED (docs/reference/metrics.md, "The saturation detector")."""

    window_s: float | None = spec(None, help="the length of each window the detector labels "
                                  "(s); null: a tenth of the measured span", gt=0,
                                  le=MAX_SIM_S)


@dataclass(frozen=True, slots=True)
class EvaluationConfig:
    slo_targets: dict[str, SLOTargets] = spec(
        factory=dict, help="SLO class -> targets (a tenant's own slo takes precedence)")
    window: MeasurementWindow = spec(
        factory=MeasurementWindow, help="the measurement window every metric, the fitness and "
        "compare_policies use; default: the whole run", omit_default=True)
    saturation: SaturationLevels = spec(
        factory=SaturationLevels, help="the saturation detector's windows",
        omit_default=True)
    class_ranks: dict[str, int] = spec(
        factory=dict, help="SLO class -> urgency rank for SLO-class inversions (lower = more "
        "urgent); defaults: realtime/critical 0, interactive/standard 1, default 2, "
        "batch/sheddable 3, background 4")
    preemption_storm: Burst = spec(factory=Burst, help="preemptions on one instance")
    rejection_burst: Burst = spec(factory=Burst, help="rejections across the cluster")

    def ranks(self) -> dict[str, int]:
        """Every SLO class's urgency rank: the defaults with `class_ranks` over them. The
        unnamed class ("") and "default" are the same class."""
        ranks = dict(DEFAULT_CLASS_RANKS)
        for cls, rank in self.class_ranks.items():
            ranks[cls] = rank
            if cls in ("", "default"):
                ranks[""] = ranks["default"] = rank
        return ranks


SLO_FITNESS_KEYS = ("slo_attainment", "goodput", "fairness")  # null without SLO targets

MAX_NAME = 100
# A name is one path component that stays inside out/: no separators, no leading dot.
NAME_PATTERN = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_NAME - 1}}}")


@dataclass(frozen=True, slots=True)
class OutputsConfig:
    dir: str | None = spec(None, help="output folder; default out/<scenario name>")
    tables: Literal["auto", "csv", "parquet"] = spec(
        "auto", help="table format; auto = parquet when pyarrow is installed, else csv"
    )
    trace_formats: list[Literal["jsonl", "perfetto"]] = spec(
        factory=list, help="extra trace files: jsonl (decisions.jsonl, one decision a line), "
        "perfetto (trace.json, Chrome trace events for ui.perfetto.dev)")


@dataclass(frozen=True, slots=True)
class Scenario:
    version: Literal[1] = spec(help="scenario format version")
    model: ModelConfig = spec(help="the served model")
    name: str = spec("scenario", help="short name, used for the default output folder "
                     "out/<name>; default: the YAML file's name without .yaml")
    seed: int = spec(42, help="master seed; every random stream derives from it")
    seeds: SeedsConfig | None = spec(
        None, help="the seed's parts (001 §13's SimulationKey): workload, sim and jitter "
        "seeds, each defaulting to seed", omit_default=True)
    compat: Literal["none", "blis"] = spec(
        "none", help="blis: reproduce the reference BLIS's reported numbers "
        "(docs/reference/compat.md)"
    )
    horizon_s: float | None = spec(None, help="stop the simulation at this time (s)", gt=0,
                                   le=MAX_SIM_S)
    latency: LatencyConfig = spec(factory=LatencyConfig, help="step-time model")
    engine: EngineConfig = spec(factory=EngineConfig, help="per-instance engine limits")
    cluster: ClusterConfig = spec(factory=ClusterConfig, help="replicas and the control plane")
    policies: PoliciesConfig = spec(factory=PoliciesConfig, help="one policy per decision point")
    workload: Workload = spec(factory=DistributionWorkload, help="where requests come from")
    evaluation: EvaluationConfig = spec(factory=EvaluationConfig,
                                        help="SLO targets and anomaly thresholds")
    fitness: FitnessConfig = spec(factory=FitnessConfig, help="objective weights for search")
    outputs: OutputsConfig = spec(factory=OutputsConfig, help="what to write")
    deployment: DeploymentSection | None = spec(
        None, help="models, deployment configs with replica pools and prices, and the "
        "autoscaler; null: `model` on cluster.instances fixed replicas", omit_default=True)
    faults: FaultsConfig | None = spec(
        None, help="instance crashes (at given times, or by MTBF/MTTR), pools lost, slowed "
        "instances, and what becomes of the requests a failed instance held (native mode)",
        omit_default=True)

    @property
    def workload_seed(self) -> int:
        """The seed of every workload stream (seeds.workload, else seed)."""
        part = self.seeds.workload if self.seeds is not None else None
        return self.seed if part is None else part

    @property
    def sim_seed(self) -> int:
        """The seed of the simulation's chance events (seeds.sim, else seed)."""
        part = self.seeds.sim if self.seeds is not None else None
        return self.seed if part is None else part

    @property
    def jitter_seed(self) -> int:
        """The seed of timing noise (seeds.jitter, else seed)."""
        part = self.seeds.jitter if self.seeds is not None else None
        return self.seed if part is None else part

    @property
    def horizon_us(self) -> int | None:
        return None if self.horizon_s is None else round(self.horizon_s * US_PER_S)

    def validate(self, path: str) -> None:
        if not NAME_PATTERN.fullmatch(self.name):
            raise ScenarioError(
                join(path, "name"), f"{self.name!r} cannot name an output folder (it would be "
                "written outside out/ or be hidden)", "letters, digits, '.', '_' and '-', "
                f"starting with a letter or digit, at most {MAX_NAME} characters")
        if self.compat == "blis" and getattr(self.workload, "arrival", None) == "poisson":
            raise ScenarioError(
                join(path, "workload.arrival"), "compat: blis replays the reference's "
                "constant spacing", "constant",
            )
        if "jsonl" in self.outputs.trace_formats and self.cluster.trace_level == "none":
            raise ScenarioError(join(path, "outputs.trace_formats"), "jsonl writes the decision "
                                "trace, which cluster.trace_level none does not record",
                                "cluster.trace_level: decisions or full, or no jsonl")
        if self.deployment is not None:
            self.check_deployment(join(path, "deployment"))
        self.check_targets(path)
        if self.compat == "blis" and ClientTimeouts.of(self.workload):
            raise ScenarioError(join(path, "workload.timeout_s"), "client timeouts are not in "
                                "the reference BLIS; compat: blis cannot reproduce them",
                                "no timeout_s, or compat: none")
        if self.faults is not None:
            self.check_faults(join(path, "faults"))
        if self.compat == "blis" and self.cluster.flow_control is not None:
            raise ScenarioError(join(path, "cluster.flow_control"), "the reference BLIS this "
                                "mode reproduces has no gateway queue", "null, or compat: none")
        if self.compat == "blis" and not self.evaluation.window.whole:
            raise ScenarioError(join(path, "evaluation.window"), "the reference BLIS reports "
                                "whole runs; compat: blis cannot reproduce a window",
                                "no window, or compat: none")
        self.check_adapters(path)
        self.check_speculative(path)
        if self.compat == "blis" and self.engine.kv_tiers.enabled:
            raise ScenarioError(join(path, "engine.kv_tiers.cpu_blocks"), "KV tiers are native "
                                "only (the reference's tiers have defects: "
                                "docs/guides/kv-tiers.md)",
                                "0, or compat: none")

    def check_adapters(self, path: str) -> None:
        """LoRA: tenants that name adapters need instances with adapter slots; native mode on
        the cluster's own instances only."""
        lora = self.engine.lora
        tenants = self.workload.tenants if isinstance(self.workload, TenantsWorkload) else []
        named = [i for i, t in enumerate(tenants) if t.adapters is not None]
        if lora is None:
            if named:
                raise ScenarioError(join(path, f"workload.tenants[{named[0]}].adapters"),
                                    "names LoRA adapters, but engine.lora gives the instances "
                                    "no adapter slots", "engine.lora: {slots: N}, or no adapters")
            return
        self.refuse_outside_native_cluster(path, "engine.lora", "LoRA adapters", LORA_POOLS)

    def refuse_outside_native_cluster(self, path: str, section: str, feature: str,
                                      pools: str) -> None:
        """`feature` (the `section` key) runs in native mode on the cluster's own instances:
        the reference has none of it, and deployments' pools do not model it."""
        if self.compat == "blis":
            raise ScenarioError(join(path, section), f"the reference BLIS this mode reproduces "
                                f"has no {feature}", "null, or compat: none")
        if self.deployment is not None:
            raise ScenarioError(join(path, section), pools,
                                f"no deployment section, or no {section}")

    def check_speculative(self, path: str) -> None:
        """Speculative decoding: native mode, on the cluster's own instances."""
        if self.engine.speculative is None:
            return
        self.refuse_outside_native_cluster(path, "engine.speculative", "speculative decoding",
                                           SPECULATIVE_POOLS)
        latency = self.latency
        if self.engine.speculative.method == "draft_model" and (
                latency.type == "blackbox" or (latency.type is None and (
                    latency.alpha is not None or latency.beta is not None))):
            raise ScenarioError(join(path, "engine.speculative.method"), "a draft model is "
                                "costed by a step model of its own config.json; the blackbox "
                                "model's coefficients are fitted to whole steps of one model",
                                "latency.type physical or roofline, or method ngram")
        workload = self.workload
        if isinstance(workload, TraceWorkload):  # a trace's rows name their own tenants
            return
        ids = [t.id for t in workload.tenants] if isinstance(workload, TenantsWorkload) else []
        for tenant in self.engine.speculative.tenant_acceptance:
            if tenant not in ids:
                raise ScenarioError(join(path, f"engine.speculative.tenant_acceptance.{tenant}"),
                                    "names no tenant of the workload",
                                    ", ".join(ids) or "a tenants or trace workload")

    def check_targets(self, path: str) -> None:
        """A fitness weight on an SLO figure needs a target to attain: without one the figure
        is null (nothing to attain) and the weight would only add 0."""
        weighted = [k for k in SLO_FITNESS_KEYS if self.fitness.weights.get(k)]
        if weighted and not self.has_slo_targets:
            raise ScenarioError(join(path, f"fitness.weights.{weighted[0]}"), "the scenario "
                                "sets no SLO target, so there is nothing to attain",
                                "evaluation.slo_targets (or a tenant's slo), or no weight on "
                                + ", ".join(SLO_FITNESS_KEYS))

    @property
    def has_slo_targets(self) -> bool:
        """Whether any request can have an SLO target (a class's or a tenant's)."""
        goals = list(self.evaluation.slo_targets.values())
        if isinstance(self.workload, TenantsWorkload):
            goals += [t.slo for t in self.workload.tenants if t.slo is not None]
        return any(v is not None for g in goals for v in (g.ttft_ms, g.tpot_ms, g.e2e_ms))

    def slo_targets(self) -> SLOLookup:
        """Each request's SLO targets by (tenant, SLO class): its tenant's own, else its
        class's ("default" and the unnamed class are one); None without any."""
        by_tenant: dict[str, SLOTargets] = {}
        if isinstance(self.workload, TenantsWorkload):
            by_tenant = {t.id: t.slo for t in self.workload.tenants
                         if t.slo is not None and t.slo.any_set}
        return SLOLookup(by_tenant, {"" if cls == "default" else cls: t
                                     for cls, t in self.evaluation.slo_targets.items()})

    def check_deployment(self, path: str) -> None:
        """The deployment section against the rest: native mode only, the default model among
        its models, each config's latency/engine sections valid."""
        section = self.deployment
        assert section is not None
        if self.compat == "blis":
            raise ScenarioError(path, "the reference BLIS has no deployment model; compat: "
                                "blis cannot reproduce it", "no deployment, or compat: none")
        if self.cluster.instances != 1:
            raise ScenarioError("cluster.instances", f"{self.cluster.instances} would be "
                                "ignored: with a deployment section the replica pools "
                                "decide how many instances run", "leave it out, and set "
                                "deployment.models[].configs[].replicas")
        if section.model_named(self.model.name) is None:
            raise ScenarioError(join(path, "models"), f"no model is the default model "
                                f"{self.model.name!r} (model.name)",
                                ", ".join(m.name for m in section.models))
        tenants = ([t.id for t in self.workload.tenants]
                   if isinstance(self.workload, TenantsWorkload) else None)
        for i, model in enumerate(section.models):
            for tenant in model.tenants:
                if tenants is not None and tenant not in tenants:
                    raise ScenarioError(f"{path}.models[{i}].tenants", f"no workload tenant "
                                        f"{tenant!r}", ", ".join(tenants))
            for j, config in enumerate(model.configs):
                where = f"{path}.models[{i}].configs[{j}]"
                if config.latency is not None:
                    load(LatencyConfig, config.latency, join(where, "latency"))
                if config.engine is not None:
                    engine = load(EngineConfig, config.engine, join(where, "engine"))
                    if engine.lora is not None:
                        raise ScenarioError(join(where, "engine.lora"), LORA_POOLS, "null")
                    if engine.speculative is not None:
                        raise ScenarioError(join(where, "engine.speculative"), SPECULATIVE_POOLS,
                                            "null")

    def check_faults(self, path: str) -> None:
        """The faults section against the rest: native mode only, and every instance or
        config it names present at the start."""
        faults = self.faults
        assert faults is not None
        if self.compat == "blis":
            raise ScenarioError(path, "the reference BLIS has no failures; compat: blis cannot "
                                "reproduce them", "no faults, or compat: none")
        configs = self.pool_ids()
        count = self.initial_instances()
        for where, target in faults.targets():
            for i, name in enumerate(target.instances):
                if int(name.removeprefix("instance_")) >= count:
                    raise ScenarioError(f"{where}.instances[{i}]", f"no instance {name!r} at "
                                        f"the start (instances run at t=0: {count}); name "
                                        "the config of replicas added later",
                                        f"instance_0 .. instance_{count - 1}")
            if target.config is not None and target.config not in configs:
                raise ScenarioError(f"{where}.config", f"no deployment config or pool "
                                    f"{target.config!r}",
                                    ", ".join(sorted(configs)) or "none: there is no "
                                    "deployment section (name instances, or none for all)")

    def pool_ids(self) -> set[str]:
        """The deployment's config ids and P/D pool ids (`<id>/prefill`, `<id>/decode`)."""
        ids: set[str] = set()
        for _, config in self.deployment.configs() if self.deployment is not None else ():
            ids.add(config.id)
            if config.disaggregation is not None:
                ids |= {f"{config.id}/prefill", f"{config.id}/decode"}
        return ids

    def initial_instances(self) -> int:
        """Instances running at t=0 (instance_0 ... in creation order)."""
        return self.replica_total("start")

    def most_instances(self) -> int:
        """The most instances the scenario can run at once."""
        return self.replica_total("max")

    def replica_total(self, bound: Literal["start", "max"]) -> int:
        """Every pool's replicas at that bound (the shorthand: `cluster.instances`)."""
        if self.deployment is None:
            return self.cluster.instances
        total = 0
        for _, config in self.deployment.configs():
            pd = config.disaggregation
            pools = [config.replicas] if pd is None else [pd.prefill.replicas,
                                                           pd.decode.replicas]
            total += sum(getattr(pool, bound) for pool in pools)
        return total

    @classmethod
    def from_dict(cls, data: Any, base_dir: Path | None = None) -> Scenario:
        scenario = load(cls, data, "")
        if isinstance(scenario.workload, TraceWorkload) and base_dir is not None:
            trace = base_dir / scenario.workload.path
            with contextlib.suppress(OSError, RuntimeError):  # a symlink loop: reading says so
                trace = trace.resolve()
            scenario = dataclasses.replace(
                scenario, workload=dataclasses.replace(scenario.workload, path=str(trace))
            )
        return scenario

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: Mapping[str, Any] | None = None,
                  presets: Mapping[str, Any] | None = None) -> Scenario:
        """Load a scenario file; `overrides` map dotted key paths to values
        ({"cluster.instances": 2}: the command line's `--set` settings, parsed with
        `parse_sets`), applied after `presets` (the same form, e.g. a policy bundle's)."""
        path = Path(instance("path", path, (str, os.PathLike), "a scenario file's path"))
        text = read_text(path, "", "a scenario YAML file")
        try:
            return cls.from_yaml_text(text, path.parent, overrides, default_name(path),
                                      presets)
        except ScenarioError as exc:
            raise exc.in_file(path) from None

    @classmethod
    def from_yaml_text(cls, text: str, base_dir: Path | None = None,
                       overrides: Mapping[str, Any] | None = None, name: str = "scenario",
                       presets: Mapping[str, Any] | None = None) -> Scenario:
        """`name` is used when the text gives none (from_yaml passes the file's stem)."""
        data = load_yaml(instance("text", text, str, "the scenario's YAML text"), "")
        for key, value in (presets or {}).items():
            data = set_path(data, key, value)
        data = with_overrides(data, overrides)
        if isinstance(data, dict) and "name" not in data:
            data = {**data, "name": name}
        return cls.from_dict(data, base_dir)

    def to_dict(self) -> dict[str, Any]:
        return to_plain(self)

    def to_yaml(self) -> str:
        return dump_yaml(self.to_dict())


def default_name(path: Path) -> str:
    """The file's stem made into a valid name: other characters become '-'."""
    name = re.sub(r"[^A-Za-z0-9._-]", "-", path.stem).lstrip("._-")[:MAX_NAME]
    return name or "scenario"


def parse_sets(settings: Sequence[str]) -> dict[str, Any]:
    """The command line's `--set a.b.c=value` settings (values parsed as YAML) as overrides;
    a key set twice keeps its last value."""
    out: dict[str, Any] = {}
    for setting in settings:
        key, sep, raw = setting.partition("=")
        if not sep or not key.strip():
            raise ScenarioError("--set", f"expected key.path=value, got {setting!r}")
        out[key.strip()] = load_yaml(raw, f"--set {key}")
    return out


def one_seed(seed: int | None, overrides: Mapping[str, Any] | None, field: str,
             where: str) -> None:
    """Refuse a seed given both directly and as an override `seed` that says another (one of
    the two was silently dropped). A command line's override may be text, so they are
    compared as text."""
    pinned = (overrides or {}).get("seed", seed)
    if seed is not None and str(pinned) != str(seed):
        raise ScenarioError(field, f"given twice, {seed} and {pinned!r} ({where})", "one of them")


def with_overrides(data: Any, overrides: Mapping[str, Any] | None) -> Any:
    """A copy of the scenario's data with each dotted key path set to its value, in order;
    the usual validation then checks the result."""
    if overrides is None:
        return data
    if not isinstance(overrides, Mapping):
        raise ScenarioError("overrides", f"expected a mapping of dotted key paths to values "
                            f"({{'cluster.instances': 2}}), got {type(overrides).__name__}")
    for key, value in overrides.items():
        if not isinstance(key, str) or not key.strip():
            raise ScenarioError("overrides", f"keys are dotted key paths, got {key!r}")
        data = set_path(data, key, value)
    return data


def set_path(data: Any, key: str, value: Any) -> dict[str, Any]:
    """A copy of the scenario's data with dotted `key` set to `value`, creating missing
    sections; `[i]` steps into an existing list entry (`deployment.models[0].configs[1]...`).
    Setting a policy axis's `type` to another template drops the axis's `params`."""
    root = dict(data) if isinstance(data, dict) else {}
    path = key_steps(key)
    node: Any = root
    for depth, step in enumerate(path[:-1]):
        where = written(path[: depth + 1])
        child = entry(node, step, where)
        if isinstance(path[depth + 1], int):
            if not isinstance(child, list):
                raise ScenarioError(where, f"is not a list, cannot set {key} inside it")
            child = list(child)
        else:
            if isinstance(child, list) and str(path[depth + 1]).isdigit():
                raise ScenarioError(where, f"is a list: {key} steps into it with "
                                    f"[{path[depth + 1]}], not .{path[depth + 1]}",
                                    f"{where}[{path[depth + 1]}]...")
            if child is not None and not isinstance(child, dict):
                raise ScenarioError(where, f"is not a section, cannot set {key} inside it")
            child = dict(child or {})
        node[step] = child
        node = child
    last = path[-1]
    if isinstance(last, int):
        entry(node, last, key)  # an existing entry only
    elif (len(path) == 3 and path[0] == "policies" and last == "type"
            and node.get("type") != value):
        node.pop("params", None)  # they were written for the template being replaced
    node[last] = value
    return root


def key_steps(key: str) -> list[str | int]:
    """`a.b[0].c` -> ["a", "b", 0, "c"]."""
    steps: list[str | int] = []
    for part in key.strip().split("."):
        name, *indices = part.split("[")
        if not name or any(not i.endswith("]") or not i[:-1].isdigit() for i in indices):
            raise ScenarioError(key, "is not a dotted key path", "names joined by dots, "
                                "with [index] for a list entry, e.g. "
                                "deployment.models[0].configs[0].replicas.max")
        steps.append(name)
        steps.extend(int(i[:-1]) for i in indices)
    return steps


def written(path: list[str | int]) -> str:
    return "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in path).lstrip(".")


def entry(node: Any, step: str | int, where: str) -> Any:
    if isinstance(step, str):
        return node.get(step)
    if not 0 <= step < len(node):
        raise ScenarioError(where, f"the list has {len(node)} entries", f"[0] to "
                            f"[{len(node) - 1}]" if node else "none: the list is empty")
    return node[step]
