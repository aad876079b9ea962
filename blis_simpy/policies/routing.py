"""Routing: pick the instance for an admitted request. Every decision carries the per-instance
scores it was made on. Ties go to the lowest instance index (seed E.4).

Templates: round-robin, least-loaded, weighted (composable scorers), prefix-affinity,
always-busiest (pathological).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from blis_simpy.cluster.router_state import RouterState
from blis_simpy.cluster.snapshot import InstanceSnapshot
from blis_simpy.config.errors import ScenarioError
from blis_simpy.config.schema import spec
from blis_simpy.policies.registry import Registry
from blis_simpy.policies.view import RequestView


@dataclass(frozen=True, slots=True)
class RoutingDecision:
    target: int
    reason: str
    scores: tuple[float, ...] | None = None  # one per instance, higher = better


class RoutingPolicy:
    """Choose an instance; may keep state (e.g. what it has routed where)."""

    name = "custom"

    def __init__(self, params: object = None, **context: object) -> None:
        self.params = params

    def route(self, req: RequestView, priority: float, snapshots: Sequence[InstanceSnapshot],
              state: RouterState, clock: int) -> RoutingDecision:
        raise NotImplementedError


ROUTING: Registry[RoutingPolicy] = Registry("routing", RoutingPolicy)


def argmax(scores: Sequence[float]) -> int:
    """Index of the highest score; the lowest index among equals."""
    best, best_score = 0, scores[0]
    for i in range(1, len(scores)):
        if scores[i] > best_score:
            best, best_score = i, scores[i]
    return best


@ROUTING.register("round-robin")
class RoundRobin(RoutingPolicy):
    def __init__(self, params: object = None, **context: object) -> None:
        super().__init__(params)
        self.count = 0

    def route(self, req: RequestView, priority: float, snapshots: Sequence[InstanceSnapshot],
              state: RouterState, clock: int) -> RoutingDecision:
        target = self.count % len(snapshots)
        self.count += 1
        return RoutingDecision(target, f"round-robin[{self.count - 1}]")


@ROUTING.register("least-loaded")
class LeastLoaded(RoutingPolicy):
    """Fewest queued + running + routed-but-not-queued requests."""

    def route(self, req: RequestView, priority: float, snapshots: Sequence[InstanceSnapshot],
              state: RouterState, clock: int) -> RoutingDecision:
        scores = tuple(-float(s.effective_load) for s in snapshots)
        target = argmax(scores)
        return RoutingDecision(target, f"least-loaded (load={-scores[target]:.0f})", scores)


@ROUTING.register("always-busiest")
class AlwaysBusiest(RoutingPolicy):
    """The most loaded instance (pathological: load imbalance, head-of-line blocking)."""

    def route(self, req: RequestView, priority: float, snapshots: Sequence[InstanceSnapshot],
              state: RouterState, clock: int) -> RoutingDecision:
        scores = tuple(float(s.effective_load) for s in snapshots)
        target = argmax(scores)
        return RoutingDecision(target, f"always-busiest (load={scores[target]:.0f})", scores)


class PrefixIndex:
    """What the router has sent where: per instance, an LRU set of prompt block hashes (the
    engine's block size). It models routing history, not the instances' actual caches."""

    def __init__(self, instances: int, capacity: int) -> None:
        self.capacity = capacity
        self.sets: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(instances)]

    def match(self, instance: int, hashes: Sequence[int]) -> int:
        """How many leading blocks of the prompt were routed to `instance`."""
        seen = self.sets[instance]
        count = 0
        for h in hashes:
            if h not in seen:
                break
            count += 1
        return count

    def record(self, instance: int, hashes: Sequence[int]) -> None:
        seen = self.sets[instance]
        for h in hashes:
            if h in seen:
                seen.move_to_end(h)
            else:
                seen[h] = None
                if len(seen) > self.capacity:
                    seen.popitem(last=False)


Scorer = Callable[[RequestView, Sequence[InstanceSnapshot], "PrefixIndex"], list[float]]


def queue_depth_scores(req, snaps, index) -> list[float]:
    loads = [s.effective_load for s in snaps]
    low, high = min(loads), max(loads)
    if high == low:
        return [1.0] * len(loads)
    return [(high - load) / (high - low) for load in loads]


def kv_utilization_scores(req, snaps, index) -> list[float]:
    return [1.0 - s.kv_utilization for s in snaps]


def load_balance_scores(req, snaps, index) -> list[float]:
    return [1.0 / (1.0 + s.effective_load) for s in snaps]


def prefix_affinity_scores(req, snaps, index) -> list[float]:
    total = len(req.prefix_hashes)
    if total == 0:
        return [0.0] * len(snaps)
    return [index.match(i, req.prefix_hashes) / total for i in range(len(snaps))]


SCORERS: dict[str, Scorer] = {
    "queue-depth": queue_depth_scores,
    "kv-utilization": kv_utilization_scores,
    "load-balance": load_balance_scores,
    "prefix-affinity": prefix_affinity_scores,
}


@dataclass(frozen=True, slots=True)
class WeightedParams:
    scorers: dict[str, float] = spec(
        factory=lambda: {"prefix-affinity": 3.0, "queue-depth": 2.0, "kv-utilization": 2.0},
        help="scorer name -> weight (normalised to sum 1)",
    )
    prefix_index_capacity: int = spec(10_000, help="block hashes remembered per instance", ge=1)

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


def clamp01(x: float) -> float:
    return 0.0 if x < 0 else 1.0 if x > 1 else x


@ROUTING.register("weighted")
class Weighted(RoutingPolicy):
    """Composite score: sum of weight * clamp01(scorer); the highest wins."""

    Params = WeightedParams

    def __init__(self, params: WeightedParams, instances: int = 1, **context: object) -> None:
        super().__init__(params)
        total = sum(params.scorers.values())
        self.scorers = [(SCORERS[n], w / total) for n, w in params.scorers.items()]
        self.index = PrefixIndex(instances, params.prefix_index_capacity)

    def route(self, req: RequestView, priority: float, snapshots: Sequence[InstanceSnapshot],
              state: RouterState, clock: int) -> RoutingDecision:
        composite = [0.0] * len(snapshots)
        for scorer, weight in self.scorers:
            for i, score in enumerate(scorer(req, snapshots, self.index)):
                composite[i] += weight * clamp01(score)
        target = argmax(composite)
        self.index.record(target, req.prefix_hashes)
        return RoutingDecision(target, f"weighted-scoring (score={composite[target]:.3f})",
                               tuple(composite))


@dataclass(frozen=True, slots=True)
class PrefixAffinityParams:
    prefix_index_capacity: int = spec(10_000, help="block hashes remembered per instance", ge=1)


@ROUTING.register("prefix-affinity")
class PrefixAffinity(RoutingPolicy):
    """The instance that was sent the longest prefix of this prompt (ties: least loaded, then
    lowest index); least-loaded when no instance has seen its first block."""

    Params = PrefixAffinityParams

    def __init__(self, params: PrefixAffinityParams, instances: int = 1, **context: object
                 ) -> None:
        super().__init__(params)
        self.index = PrefixIndex(instances, params.prefix_index_capacity)

    def route(self, req: RequestView, priority: float, snapshots: Sequence[InstanceSnapshot],
              state: RouterState, clock: int) -> RoutingDecision:
        matches = [self.index.match(i, req.prefix_hashes) for i in range(len(snapshots))]
        best = max(matches)
        scores = tuple(m - s.effective_load / (1 + s.effective_load) for m, s in
                       zip(matches, snapshots, strict=True))
        target = argmax(scores)
        self.index.record(target, req.prefix_hashes)
        hit = "cache-hit" if best > 0 else "cache-miss, fallback to least-loaded"
        return RoutingDecision(target, f"prefix-affinity ({hit}, blocks={best})", scores)
