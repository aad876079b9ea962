"""Admission: admit, reject (with a reason) or delay each arriving request.

A delayed request re-enters admission after the delay. Templates: always-admit, token-bucket,
rate-limit, tenant-quota, tier-shed and gaie-legacy (shed low SLO tiers under load: the
reference head's templates, on GAIE's SLO priorities), reject-all (a pathological baseline).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from blis_simpy.config.flow_control import (
    DEFAULT_PRIORITY,
    PRIORITY_BOUND,
    Priorities,
    check_priorities,
)
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.request import RequestView
from blis_simpy.core.router_state import RouterState
from blis_simpy.core.schema import join, spec
from blis_simpy.core.snapshot import InstanceSnapshot
from blis_simpy.core.units import US_PER_S, us
from blis_simpy.policies.registry import Registry


@dataclass(frozen=True, slots=True)
class AdmissionDecision:
    action: Literal["admit", "reject", "delay"]
    reason: str = ""
    delay_us: int = 0


ADMIT = AdmissionDecision("admit")


class AdmissionPolicy:
    """Decide what happens to an arriving request; may keep state across calls."""

    name = "custom"

    def __init__(self, params: object = None) -> None:
        self.params = params

    def decide(self, req: RequestView, state: RouterState, clock: int) -> AdmissionDecision:
        raise NotImplementedError


ADMISSION: Registry[AdmissionPolicy] = Registry("admission", AdmissionPolicy)


@ADMISSION.register("always-admit")
class AlwaysAdmit(AdmissionPolicy):
    """Admit everything (BC-9)."""

    def decide(self, req: RequestView, state: RouterState, clock: int) -> AdmissionDecision:
        return ADMIT


@ADMISSION.register("reject-all")
class RejectAll(AdmissionPolicy):
    """Reject everything: the baseline for admission metrics (100% rejection)."""

    def decide(self, req: RequestView, state: RouterState, clock: int) -> AdmissionDecision:
        return AdmissionDecision("reject", "reject-all")


@dataclass(frozen=True, slots=True)
class TokenBucketParams:
    capacity: float = spec(10_000.0, help="bucket size (tokens)", ge=0)
    refill_per_s: float = spec(1_000.0, help="tokens added per second", ge=0)
    cost: Literal["tokens", "requests"] = spec(
        "tokens", help="tokens: a request costs its input tokens; requests: 1 per request"
    )
    per_tenant: bool = spec(False, help="one bucket per tenant instead of one shared bucket")


class Bucket:
    __slots__ = ("last", "tokens")

    def __init__(self, tokens: float) -> None:
        self.tokens = tokens
        self.last = 0


@ADMISSION.register("token-bucket")
class TokenBucket(AdmissionPolicy):
    """Starts full; refills continuously; admits when the bucket holds the request's cost and
    deducts it, else rejects without consuming (BC-10). A cost above capacity never passes."""

    Params = TokenBucketParams
    params: TokenBucketParams

    def __init__(self, params: TokenBucketParams) -> None:
        self.params = params
        self.buckets: dict[str, Bucket] = {}

    def decide(self, req: RequestView, state: RouterState, clock: int) -> AdmissionDecision:
        p = self.params
        bucket = self.buckets.get(req.tenant_id if p.per_tenant else "")
        if bucket is None:
            bucket = self.buckets[req.tenant_id if p.per_tenant else ""] = Bucket(p.capacity)
        elapsed = clock - bucket.last
        if elapsed > 0:
            bucket.tokens = min(p.capacity, bucket.tokens + elapsed * p.refill_per_s / US_PER_S)
            bucket.last = clock
        cost = req.input_tokens if p.cost == "tokens" else 1
        if bucket.tokens >= cost:
            bucket.tokens -= cost
            return ADMIT
        return AdmissionDecision("reject", "insufficient tokens")


@dataclass(frozen=True, slots=True)
class RateLimitParams:
    max_requests: int = spec(help="requests allowed per window", ge=1)
    window_s: float = spec(1.0, help="sliding window length (s)", gt=0)
    per_tenant: bool = spec(False, help="a separate limit per tenant")
    on_limit: Literal["reject", "delay"] = spec(
        "reject", help="reject, or delay the request until the window has room"
    )


@ADMISSION.register("rate-limit")
class RateLimit(AdmissionPolicy):
    """At most max_requests admissions in any sliding window of window_s."""

    Params = RateLimitParams
    params: RateLimitParams

    def __init__(self, params: RateLimitParams) -> None:
        self.params = params
        self.window_us = us(params.window_s)
        self.admitted: dict[str, deque[int]] = {}

    def decide(self, req: RequestView, state: RouterState, clock: int) -> AdmissionDecision:
        key = req.tenant_id if self.params.per_tenant else ""
        times = self.admitted.setdefault(key, deque())
        while times and times[0] <= clock - self.window_us:
            times.popleft()
        if len(times) < self.params.max_requests:
            times.append(clock)
            return ADMIT
        if self.params.on_limit == "delay":
            return AdmissionDecision("delay", "rate limit", times[0] + self.window_us - clock)
        return AdmissionDecision("reject", "rate limit")


@dataclass(frozen=True, slots=True)
class TenantQuotaParams:
    quotas: dict[str, int] = spec(factory=dict, help="tenant id -> max active requests")
    default_quota: int | None = spec(None, help="for tenants not listed; null = unlimited", ge=0)

    def validate(self, path: str) -> None:
        for tenant, quota in self.quotas.items():
            if isinstance(quota, bool) or not isinstance(quota, int) or quota < 0:
                raise ScenarioError(f"{path}.quotas.{tenant}", f"got {quota!r}",
                                    "a whole number >= 0")


@ADMISSION.register("tenant-quota")
class TenantQuota(AdmissionPolicy):
    """Reject a tenant's request while it already has its quota of active requests."""

    Params = TenantQuotaParams
    params: TenantQuotaParams

    def decide(self, req: RequestView, state: RouterState, clock: int) -> AdmissionDecision:
        quota = self.params.quotas.get(req.tenant_id, self.params.default_quota)
        if quota is not None and state.tenant(req.tenant_id).active_requests >= quota:
            return AdmissionDecision("reject", f"tenant {req.tenant_id!r} quota {quota}")
        return ADMIT


def utilization(snaps: Sequence[InstanceSnapshot], queue_depth: float,
                kv_utilization: float) -> float:
    """GAIE's saturation: the mean over instances of max(queue depth / queue_depth, KV
    utilisation / kv_utilization); 1 or more is saturated, and so is an empty fleet."""
    if not snaps:
        return 1.0
    return sum(max(s.queue_depth / queue_depth, s.kv_utilization / kv_utilization)
               for s in snaps) / len(snaps)


@dataclass(frozen=True, slots=True)
class TierShedParams:
    threshold: int = spec(0, help="the fleet is overloaded while some instance's effective "
                          "load (queued + running + routed) is above this", ge=0)
    min_priority: int = spec(3, help="under overload, SLO classes with a lower priority are "
                             "rejected (3: admit standard and critical)", ge=-PRIORITY_BOUND,
                             le=PRIORITY_BOUND)
    priorities: dict[str, int] = spec(
        factory=dict, help="SLO class -> priority, over GAIE's (critical 4, standard 3, batch "
        "-1, sheddable -2, background -3; any other class 3)")

    def validate(self, path: str) -> None:
        check_priorities(self.priorities, join(path, "priorities"))


@ADMISSION.register("tier-shed")
class TierShed(AdmissionPolicy):
    """While the busiest routable instance's effective load is above `threshold`, reject SLO
    classes whose priority is below `min_priority` (the reference head's tier-shed)."""

    Params = TierShedParams
    params: TierShedParams

    def __init__(self, params: TierShedParams) -> None:
        super().__init__(params)
        self.priorities = Priorities(params.priorities, DEFAULT_PRIORITY)

    def decide(self, req: RequestView, state: RouterState, clock: int) -> AdmissionDecision:
        p = self.params
        priority = self.priorities.of(req.slo_class)
        if priority >= p.min_priority:
            return ADMIT
        load = max((s.effective_load for s in state.instance_snapshots()), default=0)
        if load <= p.threshold:
            return ADMIT
        return AdmissionDecision("reject", f"tier-shed: class {req.slo_class!r} priority "
                                 f"{priority} < {p.min_priority} at load {load}")


@dataclass(frozen=True, slots=True)
class GAIELegacyParams:
    queue_depth: float = spec(5.0, help="waiting requests per instance that count as full",
                              gt=0)
    kv_utilization: float = spec(0.8, help="KV use per instance that counts as full", gt=0,
                                 le=1)
    priorities: dict[str, int] = spec(
        factory=dict, help="SLO class -> priority, over GAIE's; negative = sheddable")

    def validate(self, path: str) -> None:
        check_priorities(self.priorities, join(path, "priorities"))


@ADMISSION.register("gaie-legacy")
class GAIELegacy(AdmissionPolicy):
    """The older llm-d gateway's rule: a sheddable request (negative SLO priority) is rejected
    while the fleet's utilization saturation is 1 or more; the others always pass."""

    Params = GAIELegacyParams
    params: GAIELegacyParams

    def __init__(self, params: GAIELegacyParams) -> None:
        super().__init__(params)
        self.priorities = Priorities(params.priorities, DEFAULT_PRIORITY)

    def decide(self, req: RequestView, state: RouterState, clock: int) -> AdmissionDecision:
        if not self.priorities.sheddable(req.slo_class):
            return ADMIT
        p = self.params
        saturation = utilization(state.instance_snapshots(), p.queue_depth, p.kv_utilization)
        if saturation >= 1.0:
            return AdmissionDecision("reject", f"gaie-legacy: class {req.slo_class!r} "
                                     f"sheddable at saturation {saturation:.2f}")
        return ADMIT
