"""Where a scenario's requests come from, as data: synthetic lengths and rates
(`distribution`), a trace file (`trace`), or the multi-tenant workload (`tenants`, seed 001 §7:
tenants with their own traffic, lengths, SLO targets, prefix reuse, request types, sessions,
closed-loop users and behaviours). The sources that generate the requests are
`blis_simpy.workload`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from blis_simpy.config.arrivals import ArrivalProcess, LoadProfile, PoissonProcess
from blis_simpy.config.distributions import Constant, Distribution, Exponential, Gaussian
from blis_simpy.config.lora import AdapterUse
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.schema import join, spec
from blis_simpy.core.units import MAX_FLOAT, MAX_REQUESTS, MAX_SIM_S, MAX_TOKENS, us

if TYPE_CHECKING:
    from blis_simpy.config.sessions import Archetype, SessionModel

# Archetypes and session models load when a scenario has them (core/schema.py: FieldTypes).
LAZY_TYPES = {"Archetype": "blis_simpy.config.sessions",
              "SessionModel": "blis_simpy.config.sessions"}

MAX_SHARE = MAX_FLOAT


@dataclass(frozen=True, slots=True)
class SLOTargets:
    ttft_ms: float | None = spec(None, help="time-to-first-token target (ms)", gt=0)
    tpot_ms: float | None = spec(None, help="time-per-output-token target (ms)", gt=0)
    e2e_ms: float | None = spec(None, help="end-to-end latency target (ms)", gt=0)

    @property
    def any_set(self) -> bool:
        return self.ttft_ms is not None or self.tpot_ms is not None or self.e2e_ms is not None


@dataclass(frozen=True, slots=True)
class SLOLookup:
    """A scenario's SLO targets by tenant and by class (`Scenario.slo_targets`)."""

    by_tenant: dict[str, SLOTargets]
    by_class: dict[str, SLOTargets]

    def of(self, tenant: str, slo_class: str) -> SLOTargets | None:
        return self.by_tenant.get(tenant) or self.by_class.get(slo_class)


def met(target: SLOTargets, ttft_ms: float, tpot_ms: float, e2e_ms: float) -> bool:
    """Whether a completed request's latencies are within every target set."""
    return all(goal is None or value <= goal for goal, value in (
        (target.ttft_ms, ttft_ms), (target.tpot_ms, tpot_ms), (target.e2e_ms, e2e_ms)))


@dataclass(frozen=True, slots=True)
class PrefixGroup:
    id: str = spec(help="group name, referenced by tenants")
    length: Distribution = spec(help="system-prompt length (tokens), drawn once per group")
    popularity: float = spec(1.0, help="relative chance a reusing request picks this group",
                             gt=0)


@dataclass(frozen=True, slots=True)
class PrefixUse:
    groups: list[str] = spec(factory=list, help="prefix groups this tenant uses (all if empty)")
    reuse_probability: float = spec(1.0, help="chance a request starts with a group's prefix",
                                    ge=0, le=1)


# The length shapes whose quantile function a correlated draw needs (workload/copula.py).
CORRELATABLE = ("gaussian", "constant", "uniform", "exponential", "lognormal", "empirical")
CORRELATION_HELP = ("Gaussian-copula correlation between a request's prompt and output lengths "
                    "(-1..1; each keeps its own distribution; 0: independent draws)")


@dataclass(frozen=True, slots=True)
class ChatConfig:
    turns: Distribution = spec(factory=lambda: Constant(value=4.0),
                               help="turns per session")
    think_time_s: Distribution = spec(factory=lambda: Exponential(mean=5.0),
                                      help="user think time between a response and the next turn")
    context_growth: Literal["linear", "sublinear", "bounded"] = spec(
        "linear", help="linear: the whole conversation is carried; sublinear: only the last "
        "ceil(sqrt(turn)) exchanges; bounded: the conversation, cut from the front to "
        "max_context_tokens")
    max_context_tokens: int = spec(8192, help="bounded growth: longest carried history", ge=1,
                                   le=MAX_TOKENS)
    session: SessionModel | None = spec(
        None, help="a Markov model of the session: each turn's state sets its lengths and "
        "think time, and the transitions decide the next state and when the session ends "
        "(then turns is not used)", omit_default=True)

    def validate(self, path: str) -> None:
        if self.session is not None and self.turns != Constant(value=4.0):
            raise ScenarioError(join(path, "turns"), "is not used: with a session model its "
                                "transitions decide when a session ends",
                                "leave turns out, or drop session")


@dataclass(frozen=True, slots=True)
class AgenticConfig:
    tool_call_probability: float = spec(0.7, help="chance a step ends in a tool call", ge=0,
                                        le=1)
    max_tool_calls: Distribution = spec(factory=lambda: Constant(value=5.0),
                                        help="tool calls per task at most")
    tool_latency_s: Distribution = spec(factory=lambda: Exponential(mean=0.5),
                                        help="external tool time before the next step")
    tool_result_tokens: Distribution = spec(
        factory=lambda: Gaussian(mean=200.0, stdev=80.0), help="tool output fed back (tokens)")


@dataclass(frozen=True, slots=True)
class ReasoningConfig:
    chain_length: Distribution = spec(factory=lambda: Constant(value=8.0),
                                      help="reasoning steps")
    tokens_per_step: Distribution = spec(factory=lambda: Gaussian(mean=120.0, stdev=40.0),
                                         help="reasoning tokens per step")


@dataclass(frozen=True, slots=True)
class ClosedLoop:
    users: int = spec(help="concurrent users: each waits for its response, thinks, sends again",
                      ge=1, le=100_000)
    think_time_s: Distribution = spec(factory=lambda: Exponential(mean=1.0),
                                      help="think time after each response")


@dataclass(frozen=True, slots=True)
class Behavior:
    type: Literal["normal", "bursty", "abusive", "adversarial"] = spec(
        "normal", help="normal; bursty: extra bursts; abusive: oversized prompts, rapid fire, "
        "KV exhaustion; adversarial: bursts synchronised across tenants")
    burst_size: Distribution = spec(factory=lambda: Constant(value=20.0),
                                    help="bursty/adversarial: requests per burst")
    burst_every_s: float = spec(10.0, help="bursty/adversarial: time between bursts", gt=0)
    prompt_multiplier: float = spec(8.0, help="abusive: prompt length factor", ge=1)
    rate_multiplier: float = spec(5.0, help="abusive: rapid-fire rate factor", ge=1)
    output_multiplier: float = spec(8.0, help="abusive: output length factor (KV exhaustion)",
                                    ge=1)


@dataclass(frozen=True, slots=True)
class TenantSpec:
    id: str = spec(help="tenant id (the tenant-priority and tenant-quota policies use it)")
    rate_fraction: float = spec(1.0, help="share of the workload's rate_per_s", ge=0)
    slo_class: str = spec("", help="SLO class label, e.g. realtime, interactive, batch")
    slo: SLOTargets = spec(factory=SLOTargets, help="latency targets of this tenant's class")
    prompt: Distribution = spec(factory=lambda: Gaussian(mean=512.0, stdev=256.0),
                                help="prompt length (tokens), excluding any shared prefix")
    output: Distribution = spec(factory=lambda: Gaussian(mean=256.0, stdev=128.0),
                                help="output length (tokens)")
    arrival: ArrivalProcess = spec(factory=lambda: PoissonProcess(),
                                   help="inter-arrival process of requests (or sessions)")
    prefix: PrefixUse | None = spec(None, help="shared system prompts this tenant reuses")
    request_type: Literal["completion", "chat", "agentic", "reasoning"] = spec(
        "completion", help="what one arrival starts")
    chat: ChatConfig = spec(factory=ChatConfig, help="request_type chat: session shape")
    agentic: AgenticConfig = spec(factory=AgenticConfig, help="request_type agentic")
    reasoning: ReasoningConfig = spec(factory=ReasoningConfig, help="request_type reasoning")
    length_correlation: float = spec(0.0, help=CORRELATION_HELP, ge=-1, le=1,
                                     omit_default=True)
    archetypes: dict[str, float] = spec(
        factory=dict, help="mix of the workload's archetypes by share of this tenant's arrivals "
        "(so of its rate); each arrival (a whole session) is one archetype's; empty: the "
        "tenant's own shape", omit_default=True)
    closed_loop: ClosedLoop | None = spec(None, help="fixed users instead of an arrival process")
    behavior: Behavior = spec(factory=Behavior, help="misbehaviour, for robustness studies")
    timeout_s: float | None = spec(None, help="client timeout: seconds after its arrival at "
                                   "which a request is abandoned wherever it is; default: "
                                   "the workload's timeout_s", gt=0, le=MAX_SIM_S)
    adapters: AdapterUse | None = spec(None, help="LoRA adapters this tenant's requests name, "
                                       "drawn by Zipf-like popularity (needs engine.lora)",
                                       omit_default=True)


@dataclass(frozen=True, slots=True)
class TenantsWorkload:
    type: Literal["tenants"] = spec(help="multi-tenant synthetic workload")
    tenants: list[TenantSpec] = spec(help="who sends traffic", min_len=1)
    rate_per_s: float = spec(10.0, help="total open-loop rate, shared by rate_fraction", gt=0)
    duration_s: float = spec(60.0, help="arrivals (and session starts) in [0, duration_s)", gt=0,
                             le=MAX_SIM_S)
    max_requests: int | None = spec(None, help="stop generating after this many", ge=1,
                                    le=MAX_REQUESTS)
    load_profile: LoadProfile | None = spec(None, help="time-varying rate multiplier")
    prefix_groups: list[PrefixGroup] = spec(factory=list, help="shared system prompts")
    archetypes: list[Archetype] = spec(factory=list, help="named user archetypes (request "
                                       "shapes) that tenants mix", omit_default=True)
    timeout_s: float | None = spec(None, help="client timeout: seconds after its arrival at "
                                   "which a request is abandoned wherever it is (gateway, "
                                   "queue or batch; terminal state timed_out); tenants may "
                                   "set their own", gt=0, le=MAX_SIM_S)

    def validate(self, path: str) -> None:
        ids = [t.id for t in self.tenants]
        for i, tenant in enumerate(self.tenants):
            if ids.count(tenant.id) > 1:
                raise ScenarioError(join(path, f"tenants[{i}].id"), f"duplicate {tenant.id!r}")
        groups = {g.id for g in self.prefix_groups}
        for i, tenant in enumerate(self.tenants):
            for kind, default in (("chat", ChatConfig()), ("agentic", AgenticConfig()),
                                  ("reasoning", ReasoningConfig())):
                if getattr(tenant, kind) != default and tenant.request_type != kind:
                    raise ScenarioError(join(path, f"tenants[{i}].{kind}"),
                                        f"is set but request_type is {tenant.request_type!r}, "
                                        "so it would be ignored",
                                        f"request_type: {kind}, or drop the {kind} section")
            for name in tenant.prefix.groups if tenant.prefix else ():
                if name not in groups:
                    raise ScenarioError(join(path, f"tenants[{i}].prefix.groups"),
                                        f"unknown prefix group {name!r}",
                                        ", ".join(sorted(groups)) or "define prefix_groups")
            if tenant.prefix and not groups:
                raise ScenarioError(join(path, f"tenants[{i}].prefix"),
                                    "needs workload.prefix_groups")
        self.check_shapes(path)
        if sum(t.rate_fraction for t in self.tenants if t.closed_loop is None) <= 0 and all(
                t.closed_loop is None for t in self.tenants):
            raise ScenarioError(join(path, "tenants"), "every rate_fraction is 0")

    def check_shapes(self, path: str) -> None:
        """Archetype mixes name defined archetypes with a positive total share; a correlated
        length pair has quantile functions (every shape but pareto-lognormal)."""
        names = [a.id for a in self.archetypes]
        for i, archetype in enumerate(self.archetypes):
            if archetype.id in names[:i]:
                raise ScenarioError(join(path, f"archetypes[{i}].id"),
                                    f"duplicate {archetype.id!r}")
        for i, tenant in enumerate(self.tenants):
            where = join(path, f"tenants[{i}]")
            for name, share in tenant.archetypes.items():
                if name not in names:
                    raise ScenarioError(join(where, f"archetypes.{name}"), f"unknown archetype "
                                        f"{name!r}", ", ".join(names) or "define "
                                        "workload.archetypes")
                if not 0 <= share <= MAX_SHARE:
                    raise ScenarioError(join(where, f"archetypes.{name}"), f"share {share!r} "
                                        "is not a finite number >= 0", f"0..{MAX_SHARE:g}")
            if tenant.archetypes and sum(tenant.archetypes.values()) <= 0:
                raise ScenarioError(join(where, "archetypes"), "every share is 0",
                                    "a positive share for at least one archetype")
            for shape, key in self.shapes(tenant):
                if shape.correlation != 0:
                    for kind, dist in (("prompt", shape.prompt), ("output", shape.output)):
                        if dist.type not in CORRELATABLE:
                            raise ScenarioError(join(where, key), f"correlates the {kind} "
                                                f"length, whose {dist.type} distribution has "
                                                "no quantile function", ", ".join(CORRELATABLE))

    def shapes(self, tenant: TenantSpec) -> list[tuple[Shape, str]]:
        """The request shapes a tenant's arrivals draw from (its own, or its archetypes'),
        each with the key that sets its correlation."""
        if not tenant.archetypes:
            return [(Shape(tenant.prompt, tenant.output, tenant.length_correlation),
                     "length_correlation")]
        by_id = {a.id: a for a in self.archetypes}
        return [(Shape.of(tenant, by_id[name]), f"archetypes.{name}")
                for name in tenant.archetypes]

    @property
    def open_fraction_total(self) -> float:
        """Sum of the open-loop tenants' rate fractions; each tenant's rate is its fraction of
        rate_per_s divided by this (warned about when it is not 1)."""
        return sum(t.rate_fraction for t in self.tenants if t.closed_loop is None)


class Shape:
    """One request shape: its prompt and output length distributions and their correlation.
    (A plain class: every run imports this module, and a dataclass costs start-up.)"""

    __slots__ = ("correlation", "output", "prompt")

    def __init__(self, prompt: Distribution, output: Distribution, correlation: float) -> None:
        self.prompt, self.output, self.correlation = prompt, output, correlation

    @classmethod
    def of(cls, tenant: TenantSpec, archetype: Archetype) -> Shape:
        """An archetype's shape, the tenant's where the archetype leaves a part unset."""
        return cls(archetype.prompt or tenant.prompt, archetype.output or tenant.output,
                   tenant.length_correlation if archetype.length_correlation is None
                   else archetype.length_correlation)


@dataclass(frozen=True, slots=True)
class LengthConfig:
    mean: float = spec(help="mean token count")
    stdev: float = spec(help="standard deviation (gaussian, clamped to [min, max])", ge=0)
    min: int = spec(help="smallest token count", ge=1, le=MAX_TOKENS)
    max: int = spec(help="largest token count", ge=1, le=MAX_TOKENS)

    def validate(self, path: str) -> None:
        if self.min > self.max:
            raise ScenarioError(join(path, "min"), f"{self.min} is above max {self.max}")
        if not self.min <= self.mean <= self.max:
            raise ScenarioError(
                join(path, "mean"), f"{self.mean} is outside [min, max]",
                f"{self.min}..{self.max}",
            )


@dataclass(frozen=True, slots=True)
class DistributionWorkload:
    type: Literal["distribution"] = spec("distribution", help="synthetic requests")
    num_requests: int = spec(100, help="how many requests to generate", ge=1, le=MAX_REQUESTS)
    rate_per_s: float = spec(1.0, help="mean arrival rate, requests per second", gt=0)
    arrival: Literal["poisson", "constant"] | None = spec(
        None, help="inter-arrival process; default poisson (constant in compat mode)"
    )
    prefix_tokens: int = spec(0, help="shared prefix (same tokens) prepended to every prompt", ge=0,
                              le=MAX_TOKENS)
    prompt: LengthConfig = spec(
        factory=lambda: LengthConfig(512.0, 256.0, 2, 7000), help="prompt length (tokens)"
    )
    output: LengthConfig = spec(
        factory=lambda: LengthConfig(512.0, 256.0, 2, 7000), help="output length (tokens)"
    )
    timeout_s: float | None = spec(None, help="client timeout: seconds after its arrival at "
                                   "which a request is abandoned wherever it is (gateway, "
                                   "queue or batch; terminal state timed_out); none if unset",
                                   gt=0, le=MAX_SIM_S)

    def validate(self, path: str) -> None:
        span = self.num_requests / self.rate_per_s
        if span > MAX_SIM_S:
            raise ScenarioError(join(path, "rate_per_s"), f"{self.num_requests:,} requests at "
                                f"{self.rate_per_s:g}/s span {span:.3g} simulated seconds; "
                                f"the limit is {MAX_SIM_S:g}", "a higher rate")


TraceFormat = Literal["auto", "blis", "azure", "burstgpt", "mooncake"]


@dataclass(frozen=True, slots=True)
class TraceWorkload:
    type: Literal["trace"] = spec(help="replay a trace file (docs/traces.md)")
    path: str = spec(help="trace file, relative to the scenario file")
    format: TraceFormat = spec(
        "auto", help="auto: from the file's header; blis: the reference's CSV of token ids; "
        "azure: Azure LLM inference trace 2023/2024; burstgpt: BurstGPT; mooncake: "
        "Mooncake / FAST'25 JSON lines")
    models: list[str] = spec(factory=list, help="replay only the rows naming one of these "
                             "models (blis and burstgpt traces name one per row); all if empty")
    timeout_s: float | None = spec(None, help="client timeout: seconds after its arrival at "
                                   "which a request is abandoned wherever it is (gateway, "
                                   "queue or batch; terminal state timed_out); none if unset",
                                   gt=0, le=MAX_SIM_S)


Workload = DistributionWorkload | TraceWorkload | TenantsWorkload


@dataclass(frozen=True, slots=True)
class ClientTimeouts:
    """How long clients wait for their responses, in µs: per tenant, else the default."""

    default_us: int | None = None
    by_tenant: dict[str, int | None] = field(default_factory=dict)

    @classmethod
    def of(cls, workload: Workload) -> ClientTimeouts:
        default = None if workload.timeout_s is None else us(workload.timeout_s)
        if not isinstance(workload, TenantsWorkload):
            return cls(default)
        return cls(default, {t.id: us(t.timeout_s) for t in workload.tenants
                             if t.timeout_s is not None})

    def __bool__(self) -> bool:
        return self.default_us is not None or bool(self.by_tenant)

    def for_tenant(self, tenant_id: str) -> int | None:
        return self.by_tenant.get(tenant_id, self.default_us)
