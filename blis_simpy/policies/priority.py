"""Priority: a score per request, higher = more urgent. Computed at the gateway (routing sees
it) and again for every waiting request at each step of its instance, so age-based scores age.

Templates: constant, slo-based, tenant-priority, deadline-aware, inverted-slo (pathological).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.request import NO_HINTS, RequestView
from blis_simpy.core.router_state import RouterState
from blis_simpy.core.schema import spec
from blis_simpy.policies.registry import Registry


@dataclass(frozen=True, slots=True)
class PriorityDecision:
    """A score with scheduling hints (seed G.1's PriorityDecision): what `compute` may return
    instead of a bare float. The score is the request's priority, as a float return is; the
    hints (string keys; strings, finite numbers, booleans or None) are kept on the request as
    `priority_hints`, which schedulers read in `make_batch` (`SchedulerContext`). A float
    return means the same as `PriorityDecision(score)`."""

    score: float
    hints: Mapping[str, object] = field(default_factory=lambda: NO_HINTS)


class PriorityPolicy:
    """Score a request; `ages` says whether the score changes with time (then instances
    recompute it every step for waiting requests). `compute` returns a float, or a
    `PriorityDecision` to attach hints."""

    name = "custom"
    ages = True

    def __init__(self, params: object = None) -> None:
        self.params = params

    def compute(self, req: RequestView, state: RouterState | None,
                clock: int) -> float | PriorityDecision:
        raise NotImplementedError


PRIORITY: Registry[PriorityPolicy] = Registry("priority", PriorityPolicy)


def check_scores(scores: Mapping[str, object], path: str) -> None:
    for key, value in scores.items():
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not math.isfinite(value):
            raise ScenarioError(f"{path}.{key}", f"got {value!r}", "a finite number")


@dataclass(frozen=True, slots=True)
class ConstantParams:
    value: float = spec(0.0, help="every request's priority")


@PRIORITY.register("constant")
class Constant(PriorityPolicy):
    Params = ConstantParams
    params: ConstantParams
    ages = False

    def compute(self, req: RequestView, state: RouterState | None, clock: int) -> float:
        return self.params.value


@dataclass(frozen=True, slots=True)
class SLOParams:
    class_scores: dict[str, float] = spec(factory=dict, help="SLO class -> base score")
    default_score: float = spec(0.0, help="base score of unlisted classes")
    age_weight: float = spec(1.0, help="score added per second waited", ge=0)

    def validate(self, path: str) -> None:
        check_scores(self.class_scores, f"{path}.class_scores")


@PRIORITY.register("slo-based")
class SLOBased(PriorityPolicy):
    """Class score plus age: with the defaults, the reference's 1e-6 * (clock - arrival)."""

    Params = SLOParams
    params: SLOParams

    def compute(self, req: RequestView, state: RouterState | None, clock: int) -> float:
        p = self.params
        base = p.class_scores.get(req.slo_class, p.default_score)
        return base + p.age_weight * 1e-6 * (clock - req.arrival_us)


@PRIORITY.register("inverted-slo")
class InvertedSLO(SLOBased):
    """The negation of slo-based: the newest, least important first (pathological)."""

    def compute(self, req: RequestView, state: RouterState | None, clock: int) -> float:
        return -super().compute(req, state, clock)


@dataclass(frozen=True, slots=True)
class TenantParams:
    tenants: dict[str, float] = spec(factory=dict, help="tenant id -> priority")
    default: float = spec(0.0, help="priority of unlisted tenants")

    def validate(self, path: str) -> None:
        check_scores(self.tenants, f"{path}.tenants")


@PRIORITY.register("tenant-priority")
class TenantPriority(PriorityPolicy):
    Params = TenantParams
    params: TenantParams
    ages = False

    def compute(self, req: RequestView, state: RouterState | None, clock: int) -> float:
        return self.params.tenants.get(req.tenant_id, self.params.default)


@dataclass(frozen=True, slots=True)
class DeadlineParams:
    deadlines_s: dict[str, float] = spec(factory=dict, help="SLO class -> TTFT deadline (s)")
    default_deadline_s: float = spec(1.0, help="deadline of unlisted classes (s)", gt=0)

    def validate(self, path: str) -> None:
        check_scores(self.deadlines_s, f"{path}.deadlines_s")


@PRIORITY.register("deadline-aware")
class DeadlineAware(PriorityPolicy):
    """Earliest deadline first: score = -(arrival + deadline) in seconds."""

    Params = DeadlineParams
    params: DeadlineParams
    ages = False

    def compute(self, req: RequestView, state: RouterState | None, clock: int) -> float:
        p = self.params
        deadline = p.deadlines_s.get(req.slo_class, p.default_deadline_s)
        return -(req.arrival_us * 1e-6 + deadline)
