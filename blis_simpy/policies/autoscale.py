"""Autoscale policies (seed G.1 `AutoScalePolicy`): from one deployment config's context to a
decision {none, up, down} with a target replica count and a reason.

A policy sees aggregate signals only (seed D.7): counts, averages, the recent TTFT's p99 and
the SLO attainment of what completed since the last look over the config's ready replicas,
never one instance or one request, and its previous evaluations' signals (recent load
samples). The autoscaler clamps every target into the pool's [min, max] (invariant
scale_bounds), so a policy may ask for more than it can get.

Templates: threshold (thresholds with hysteresis and a cooldown), target-utilization (the
Kubernetes HPA rule), queue-depth, kv-demand (the later reference's KV supply/demand analyzer)
and the pathological oscillator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.schema import join, spec
from blis_simpy.core.units import US_PER_S
from blis_simpy.policies.registry import Registry

Action = Literal["none", "up", "down"]
SIGNAL_HISTORY = 10  # evaluations a ScaleContext's history keeps


@dataclass(frozen=True, slots=True)
class DeploymentSignals:
    """One config's load, aggregated over its ready (routable) replicas."""

    ready_replicas: int
    starting_replicas: int  # provisioning, loading, or warming and not yet routable
    queued_requests: int  # waiting in the ready replicas' queues
    running_requests: int
    in_flight: int  # routed to the ready replicas, not yet finished
    utilization: float  # mean running batch / max running requests
    kv_utilization: float  # mean KV blocks used / total
    kv_capacity_tokens: int  # sum over ready replicas
    kv_used_tokens: int
    starting_kv_capacity_tokens: int  # what the starting replicas will add
    request_rate: float  # arrivals per second for the config's model since the last look
    recent_ttft_ms: float  # mean over ready replicas of their recent TTFT
    recent_tpot_ms: float  # ... and of their recent TPOT (per completed request)
    output_tokens_per_s: float  # emitted by the config's replicas since the last look
    # of the requests the config's replicas completed since the last look that have SLO
    # targets, the share within every target (None: none such)
    slo_attainment: float | None = None
    ttft_p99_ms: float = 0.0  # p99 (nearest rank) of the ready replicas' recent TTFTs (32 each)

    @property
    def queue_depth(self) -> float:
        """Requests waiting per ready replica."""
        return self.queued_requests / self.ready_replicas if self.ready_replicas else 0.0

    @property
    def token_rate(self) -> float:
        """Output tokens per second per ready replica: the throughput each one carries."""
        return self.output_tokens_per_s / self.ready_replicas if self.ready_replicas else 0.0


@dataclass(frozen=True, slots=True)
class ScaleContext:
    config: str
    model: str
    replicas: int  # provisioning to active: all that are not draining or terminated
    min_replicas: int
    max_replicas: int
    clock: int  # µs
    since_last_scale_us: int  # since this config's last up or down (the run's start if none)
    trigger: str  # periodic | queue_depth | recent_ttft
    signals: DeploymentSignals
    # the signals of this config's previous evaluations, oldest first (the last SIGNAL_HISTORY)
    history: tuple[DeploymentSignals, ...] = ()


@dataclass(frozen=True, slots=True)
class ScaleDecision:
    action: Action
    target: int  # replicas wanted; ignored for none
    reason: str


def hold(reason: str) -> ScaleDecision:
    return ScaleDecision("none", 0, reason)


class AutoscalePolicy:
    """Decide one config's replica count; may keep state between evaluations."""

    name = "custom"

    def __init__(self, params: object = None) -> None:
        self.params = params

    @property
    def cooldown_us(self) -> int | None:
        """The policy's own minimum time between scale actions (oscillation window)."""
        return None

    def evaluate(self, ctx: ScaleContext) -> ScaleDecision:
        raise NotImplementedError


AUTOSCALE: Registry[AutoscalePolicy] = Registry("autoscale", AutoscalePolicy)

# What the threshold and target templates can follow. With vLLM's 256-slot batches the batch
# occupancy (`utilization`) and the wait queue stay low while latency degrades, so the latency
# signals (mean recent TTFT / TPOT over the ready replicas, ms) and the token throughput per
# ready replica (`token_rate`, tokens/s) are the ones that track an SLO
# (docs/guides/autoscaling.md).
Signal = Literal["utilization", "kv_utilization", "queue_depth", "recent_ttft_ms",
                 "recent_tpot_ms", "token_rate"]
SIGNALS_HELP = ("utilization (batch occupancy), kv_utilization, queue_depth (requests waiting "
                "per ready replica), recent_ttft_ms, recent_tpot_ms (mean recent latency over "
                "the ready replicas), or token_rate (output tokens/s per ready replica)")


def signal_of(signals: DeploymentSignals, name: Signal) -> float:
    return float(getattr(signals, name))


def cooling(ctx: ScaleContext, cooldown_s: float) -> bool:
    return ctx.since_last_scale_us < cooldown_s * US_PER_S


class CooldownPolicy(AutoscalePolicy):
    """A template with a `cooldown_s` parameter: it is also the oscillation window."""

    @property
    def cooldown_us(self) -> int | None:
        return round(self.params.cooldown_s * US_PER_S)  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class ThresholdParams:
    signal: Signal = spec("utilization", help=SIGNALS_HELP)
    up: float = spec(0.8, help="scale up when the signal is above this", ge=0)
    down: float = spec(0.3, help="scale down when the signal is below this (the gap to `up` is "
                       "the hysteresis)", ge=0)
    step: int = spec(1, help="replicas added or removed per action", ge=1)
    cooldown_s: float = spec(60.0, help="no action within this long of the last one", ge=0)

    def validate(self, path: str) -> None:
        if self.down >= self.up:
            raise ScenarioError(join(path, "down"), f"{self.down} is not below up {self.up} "
                                "(no hysteresis band)", f"a number below {self.up}")


@AUTOSCALE.register("threshold")
class Threshold(CooldownPolicy):
    """Up by `step` above `up`, down by `step` below `down`, nothing within the cooldown."""

    Params = ThresholdParams
    params: ThresholdParams

    def evaluate(self, ctx: ScaleContext) -> ScaleDecision:
        p = self.params
        value = signal_of(ctx.signals, p.signal)
        if cooling(ctx, p.cooldown_s):
            return hold(f"cooldown ({p.signal}={value:.2f})")
        if value > p.up:
            return ScaleDecision("up", ctx.replicas + p.step, f"{p.signal}={value:.2f} > {p.up}")
        if value < p.down:
            return ScaleDecision("down", ctx.replicas - p.step,
                                 f"{p.signal}={value:.2f} < {p.down}")
        return hold(f"{p.signal}={value:.2f} within [{p.down}, {p.up}]")


@dataclass(frozen=True, slots=True)
class TargetParams:
    signal: Signal = spec("utilization", help="the signal held near `target`: "
                          + SIGNALS_HELP)
    target: float = spec(0.6, help="the signal's target value", gt=0)
    tolerance: float = spec(0.1, help="no action while signal/target is within 1 +- this",
                            ge=0, le=0.99)
    cooldown_s: float = spec(30.0, help="no action within this long of the last one", ge=0)


@AUTOSCALE.register("target-utilization")
class TargetUtilization(CooldownPolicy):
    """The Kubernetes HPA rule: desired = ceil(ready x signal / target), outside a tolerance."""

    Params = TargetParams
    params: TargetParams

    def evaluate(self, ctx: ScaleContext) -> ScaleDecision:
        p = self.params
        value = signal_of(ctx.signals, p.signal)
        ratio = value / p.target
        if cooling(ctx, p.cooldown_s) or abs(ratio - 1.0) <= p.tolerance:
            return hold(f"{p.signal}={value:.2f}, target {p.target}")
        ready = max(ctx.signals.ready_replicas, 1)
        desired = max(1, math.ceil(ready * ratio))
        replicas = ctx.replicas
        if desired > ready and desired > replicas - ctx.signals.starting_replicas:
            return ScaleDecision("up", replicas + desired - ready,
                                 f"{p.signal}={value:.2f}: {desired} replicas for {p.target}")
        if desired < ready:
            return ScaleDecision("down", replicas - (ready - desired),
                                 f"{p.signal}={value:.2f}: {desired} replicas for {p.target}")
        return hold(f"{p.signal}={value:.2f}, {desired} replicas (some starting)")


@dataclass(frozen=True, slots=True)
class QueueDepthParams:
    up_per_replica: float = spec(4.0, help="scale up when more requests than this wait per "
                                 "ready replica", gt=0)
    down_utilization: float = spec(0.3, help="scale down when nothing waits and utilization "
                                   "is below this", ge=0, le=1)
    cooldown_s: float = spec(30.0, help="no action within this long of the last one", ge=0)


@AUTOSCALE.register("queue-depth")
class QueueDepth(CooldownPolicy):
    """Up by enough replicas to bring the queue per replica to the threshold; down by one when
    the queues are empty and the batches light."""

    Params = QueueDepthParams
    params: QueueDepthParams

    def evaluate(self, ctx: ScaleContext) -> ScaleDecision:
        p, s = self.params, ctx.signals
        if cooling(ctx, p.cooldown_s):
            return hold("cooldown")
        if s.queue_depth > p.up_per_replica:
            extra = math.ceil(s.queued_requests / p.up_per_replica) - s.ready_replicas
            extra = max(1, extra - s.starting_replicas)
            return ScaleDecision("up", ctx.replicas + extra,
                                 f"queue {s.queue_depth:.1f}/replica > {p.up_per_replica}")
        if s.queued_requests == 0 and s.utilization < p.down_utilization:
            return ScaleDecision("down", ctx.replicas - 1, f"queues empty, utilization "
                                 f"{s.utilization:.2f} < {p.down_utilization}")
        return hold(f"queue {s.queue_depth:.1f}/replica")


@dataclass(frozen=True, slots=True)
class KVDemandParams:
    kv_cache_threshold: float = spec(0.8, help="usable share of each replica's KV capacity",
                                     gt=0, le=1)
    scale_up_threshold: float = spec(0.8, help="demand/supply above this scales up", gt=0)
    scale_down_boundary: float = spec(0.4, help="demand/supply below this scales down", gt=0)
    avg_input_tokens: float = spec(512.0, help="KV tokens a waiting request is expected to "
                                   "need", ge=0)

    def validate(self, path: str) -> None:
        if self.scale_down_boundary >= self.scale_up_threshold:
            raise ScenarioError(join(path, "scale_down_boundary"), f"{self.scale_down_boundary}"
                                f" is not below scale_up_threshold {self.scale_up_threshold}",
                                f"a number below {self.scale_up_threshold}")


@AUTOSCALE.register("kv-demand")
class KVDemand(AutoscalePolicy):
    """The later reference's supply/demand analyzer (cluster.md §8.1), per config: supply is
    each ready replica's KV capacity x kv_cache_threshold; demand is the KV tokens in use plus
    avg_input_tokens per waiting request. Up by enough replicas to cover demand/up beyond what
    is ready or starting; down by the replicas spare beyond demand/down (never below 1)."""

    Params = KVDemandParams
    params: KVDemandParams

    def evaluate(self, ctx: ScaleContext) -> ScaleDecision:
        p, s = self.params, ctx.signals
        if s.ready_replicas == 0:
            return hold("no ready replica to measure")
        per_replica = s.kv_capacity_tokens / s.ready_replicas * p.kv_cache_threshold
        supply = s.kv_capacity_tokens * p.kv_cache_threshold
        demand = s.kv_used_tokens + s.queued_requests * p.avg_input_tokens
        required = (demand / p.scale_up_threshold
                    - (supply + s.starting_kv_capacity_tokens * p.kv_cache_threshold))
        shown = f"demand {demand:.0f} tokens, supply {supply:.0f}"
        if required > 0:
            return ScaleDecision("up", ctx.replicas + max(1, math.ceil(required / per_replica)),
                                 shown)
        floor = demand / p.scale_down_boundary
        if s.ready_replicas >= 2 and supply - per_replica > floor:
            spare = min(max(1, math.floor((supply - floor) / per_replica)),
                        s.ready_replicas - 1)
            return ScaleDecision("down", ctx.replicas - spare, shown)
        return hold(shown)


@AUTOSCALE.register("oscillator")
class Oscillator(AutoscalePolicy):
    """Pathological: up, down, up, ... at every evaluation, whatever the load (no cooldown).
    It exists to show scale_oscillation anomalies being detected."""

    def __init__(self, params: object = None) -> None:
        super().__init__(params)
        self.turn = 0

    def evaluate(self, ctx: ScaleContext) -> ScaleDecision:
        self.turn += 1
        if (self.turn % 2 == 1 and ctx.replicas < ctx.max_replicas) \
                or ctx.replicas <= ctx.min_replicas:
            return ScaleDecision("up", ctx.replicas + 1, "oscillator: up")
        return ScaleDecision("down", ctx.replicas - 1, "oscillator: down")
