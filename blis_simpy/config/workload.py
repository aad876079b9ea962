"""Where a scenario's requests come from, as data: synthetic lengths and rates
(`distribution`), a trace file (`trace`), or the multi-tenant workload (`tenants`, seed 001 §7:
tenants with their own traffic, lengths, SLO targets, prefix reuse, request types, sessions,
closed-loop users and behaviours). The sources that generate the requests are
`blis_simpy.workload`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from blis_simpy.config.arrivals import ArrivalProcess, LoadProfile, PoissonProcess
from blis_simpy.config.distributions import Constant, Distribution, Exponential, Gaussian
from blis_simpy.config.lora import AdapterUse
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.schema import join, spec
from blis_simpy.core.units import MAX_REQUESTS, MAX_SIM_S, MAX_TOKENS, us


@dataclass(frozen=True, slots=True)
class SLOTargets:
    ttft_ms: float | None = spec(None, help="time-to-first-token target (ms)", gt=0)
    tpot_ms: float | None = spec(None, help="time-per-output-token target (ms)", gt=0)
    e2e_ms: float | None = spec(None, help="end-to-end latency target (ms)", gt=0)


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
        if sum(t.rate_fraction for t in self.tenants if t.closed_loop is None) <= 0 and all(
                t.closed_loop is None for t in self.tenants):
            raise ScenarioError(join(path, "tenants"), "every rate_fraction is 0")

    @property
    def open_fraction_total(self) -> float:
        """Sum of the open-loop tenants' rate fractions; each tenant's rate is its fraction of
        rate_per_s divided by this (warned about when it is not 1)."""
        return sum(t.rate_fraction for t in self.tenants if t.closed_loop is None)


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
