"""Routing: pick the instance for an admitted request, among the routable instances' snapshots
(in fleet order). Every decision carries one score per snapshot (higher = better) and, for the
composite policy, each scorer's weighted share, so every decision record has its candidates.
Ties go to the first instance in fleet order (seed E.4). Policies that remember where requests
went key that memory by instance id, so instances may come and go during a run.

Templates: round-robin, least-loaded, weighted (composable scorers: `policies/scorers.py`),
prefix-affinity, always-busiest (pathological).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.request import RequestView
from blis_simpy.core.router_state import RouterState
from blis_simpy.core.schema import spec
from blis_simpy.core.snapshot import InstanceSnapshot
from blis_simpy.policies.registry import Registry
from blis_simpy.policies.scorers import SCORERS, weighted_choice


class RoutingDecision(NamedTuple):
    """A routing policy's answer. A named tuple (immutable, like a frozen dataclass, and
    built in a third of the time: one per request)."""

    target: str  # id of the chosen instance
    reason: str
    scores: tuple[float, ...]  # one per snapshot, in the order given; higher = better
    breakdown: Mapping[str, tuple[float, ...]] | None = None  # scorer -> weighted share each
    filtered: tuple[str, ...] = ()  # routable instances the policy ruled out before scoring
    # Seed G.1's P/D fields, read only from a policy that sets `routes_pd`, for a request the
    # decider disaggregates: its prefill instance (default: `target`) and its decode instance
    # ("" leaves the decode choice to the decode pool's own routing call, as without them).
    prefill: str = ""
    decode: str = ""


class RoutingPolicy:
    """Choose an instance; may keep state. A policy that reads `state.shadow_kv` (the router's
    predicted prefix placement) sets `reads_shadow_kv`, so the gateway keeps that model."""

    name = "custom"
    reads_shadow_kv = False
    # P/D (seed G.1): a policy that sets this is shown both pools' instances for a request
    # the decider disaggregates (snapshots carry their role) and chooses both in one call
    # (`RoutingDecision.prefill` / `.decode`); otherwise the decode pool gets its own call.
    routes_pd = False

    def __init__(self, params: object = None) -> None:
        self.params = params

    def route(self, req: RequestView, priority: float, snapshots: Sequence[InstanceSnapshot],
              state: RouterState, clock: int) -> RoutingDecision:
        raise NotImplementedError


ROUTING: Registry[RoutingPolicy] = Registry("routing", RoutingPolicy)


def argmax(scores: Sequence[float]) -> int:
    """Position of the highest score; the first among equals."""
    best, best_score = 0, scores[0]
    for i in range(1, len(scores)):
        if scores[i] > best_score:
            best, best_score = i, scores[i]
    return best


@ROUTING.register("round-robin")
class RoundRobin(RoutingPolicy):
    """The next routable instance in turn; its score is 1, every other's 0. It reads only the
    routable ids from the router state, never a snapshot."""

    def __init__(self, params: object = None) -> None:
        super().__init__(params)
        self.count = 0

    def route(self, req: RequestView, priority: float, snapshots: Sequence[InstanceSnapshot],
              state: RouterState, clock: int) -> RoutingDecision:
        ids = state.instance_ids()
        n = len(ids)
        turn = self.count % n
        self.count += 1
        scores = [0.0] * n
        scores[turn] = 1.0
        return RoutingDecision(ids[turn], f"round-robin[{self.count - 1}]", tuple(scores))


@ROUTING.register("least-loaded")
class LeastLoaded(RoutingPolicy):
    """Fewest queued + running + routed-but-not-queued requests."""

    def route(self, req: RequestView, priority: float, snapshots: Sequence[InstanceSnapshot],
              state: RouterState, clock: int) -> RoutingDecision:
        scores = tuple(-float(s.effective_load) for s in snapshots)
        best = argmax(scores)
        return RoutingDecision(snapshots[best].id, f"least-loaded (load={-scores[best]:.0f})",
                               scores)


@ROUTING.register("always-busiest")
class AlwaysBusiest(RoutingPolicy):
    """The most loaded instance (pathological: load imbalance, head-of-line blocking)."""

    def route(self, req: RequestView, priority: float, snapshots: Sequence[InstanceSnapshot],
              state: RouterState, clock: int) -> RoutingDecision:
        scores = tuple(float(s.effective_load) for s in snapshots)
        best = argmax(scores)
        return RoutingDecision(snapshots[best].id, f"always-busiest (load={scores[best]:.0f})",
                               scores)


@dataclass(frozen=True, slots=True)
class WeightedParams:
    scorers: dict[str, float] = spec(
        factory=lambda: {"prefix-affinity": 3.0, "queue-depth": 2.0, "kv-utilization": 2.0},
        help="scorer name -> weight (normalised to sum 1)",
    )
    prefix_match_bonus: float = spec(
        0.0, help="added to the score of every instance the router's shadow KV expects to "
        "hold at least the prompt's first block (seed F.1)", ge=0, le=1e6)

    def validate(self, path: str) -> None:
        if not self.scorers:
            raise ScenarioError(f"{path}.scorers", "needs at least one scorer",
                                ", ".join(sorted(SCORERS)))
        for name, weight in self.scorers.items():
            if name not in SCORERS:
                raise ScenarioError(f"{path}.scorers.{name}", "unknown scorer",
                                    ", ".join(sorted(SCORERS)))
            if isinstance(weight, bool) or not isinstance(weight, int | float) \
                    or not weight > 0 or weight == float("inf"):
                raise ScenarioError(f"{path}.scorers.{name}", f"weight {weight!r}",
                                    "a finite number > 0")


@ROUTING.register("weighted")
class Weighted(RoutingPolicy):
    """Composite score: sum of weight * (scorer clamped to [0, 1]); the highest wins."""

    Params = WeightedParams
    params: WeightedParams

    def __init__(self, params: WeightedParams) -> None:
        super().__init__(params)
        total = sum(params.scorers.values())
        self.scorers = [(n, SCORERS[n](), w / total) for n, w in params.scorers.items()]
        self.bonus = params.prefix_match_bonus
        self.reads_shadow_kv = bool(self.bonus) or any(s.reads_shadow_kv
                                                       for _, s, _ in self.scorers)

    def route(self, req: RequestView, priority: float, snapshots: Sequence[InstanceSnapshot],
              state: RouterState, clock: int) -> RoutingDecision:
        # scored, chosen and worded in the compiled scorers module (one call a request)
        target, reason, scores, breakdown = weighted_choice(self.scorers, self.bonus, req,
                                                            snapshots, state)
        return RoutingDecision(target, reason, scores, breakdown)


@ROUTING.register("prefix-affinity")
class PrefixAffinity(RoutingPolicy):
    """The instance the shadow KV expects to hold the longest prefix of this prompt (ties:
    least loaded, then lowest index); least-loaded when none is expected to hold its first
    block."""

    reads_shadow_kv = True

    def route(self, req: RequestView, priority: float, snapshots: Sequence[InstanceSnapshot],
              state: RouterState, clock: int) -> RoutingDecision:
        shadow = state.shadow_kv
        assert shadow is not None  # kept by the gateway: this policy reads it
        matches = [shadow.expected_hit(s.id, req.prefix_hashes) for s in snapshots]
        longest = max(matches)
        scores = tuple(m - s.effective_load / (1 + s.effective_load) for m, s in
                       zip(matches, snapshots, strict=True))
        target = snapshots[argmax(scores)].id
        hit = "cache-hit" if longest > 0 else "cache-miss, fallback to least-loaded"
        return RoutingDecision(target, f"prefix-affinity ({hit}, blocks={longest})", scores)
