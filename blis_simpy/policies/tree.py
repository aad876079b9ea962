"""Decision-tree policies (001 §8, type 3): interpretable rules written in the scenario YAML,
each condition over a signal the policy's control point may observe (seed D.7).

```yaml
policies:
  admission:
    type: decision-tree
    params:
      tree:
        if: {signal: tenant.active_requests, op: ">=", value: 20}
        then: {action: reject}
        else: {action: admit}
  routing:
    type: decision-tree
    params:
      tree:                       # evaluated for every instance; the highest leaf wins
        if: {signal: instance.kv_utilization, op: ">", value: 0.9}
        then: {score: 0}
        else: {scorer: prefix-affinity, weight: 2}
```

A node is either a branch (`if`, `then`, `else`) or a leaf, whose keys depend on the axis:
admission `{action: admit | reject}` or `{action: delay, delay_s: ...}`, priority
`{priority: ...}`, routing `{score: ...}` or `{scorer: <routing scorer>, weight: ...}`,
scheduler `{rank: ...}` (the wait queue runs lower ranks first, then by arrival). Text signals
(tenant, SLO class) compare with `==` and `!=` only. Routing ties go to the least loaded
instance, then to the first in fleet order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.request import RequestView
from blis_simpy.core.router_state import RouterState
from blis_simpy.core.schema import describe, spec
from blis_simpy.core.snapshot import InstanceSnapshot
from blis_simpy.core.units import US_PER_S
from blis_simpy.policies.admission import ADMISSION, AdmissionDecision, AdmissionPolicy
from blis_simpy.policies.priority import PRIORITY, PriorityPolicy
from blis_simpy.policies.routing import ROUTING, RoutingDecision, RoutingPolicy
from blis_simpy.policies.scheduler import SCHEDULER, InstanceScheduler, SchedulerParams
from blis_simpy.policies.scorers import SCORERS, Scorer

MAX_DEPTH = 32


@dataclass(frozen=True, slots=True)
class Context:
    """What one evaluation of a tree may read."""

    req: RequestView
    state: RouterState | None
    clock: int
    priority: float = 0.0
    instance: InstanceSnapshot | None = None
    prefix_match: float = 0.0  # share of the prompt's blocks routed to `instance` before


def tenant_value(field: str) -> Callable[[Context], float]:
    def read(c: Context) -> float:
        tenant = None if c.state is None else c.state.tenants.get(c.req.tenant_id)
        if tenant is None:
            return 0.0
        if field == "recent_rate":
            return tenant.recent_rate(c.clock)
        return float(getattr(tenant, field))
    return read


def instance_value(field: str) -> Callable[[Context], float]:
    def read(c: Context) -> float:
        assert c.instance is not None
        return float(getattr(c.instance, field))
    return read


TEXT = {"request.tenant": lambda c: c.req.tenant_id,
        "request.slo_class": lambda c: c.req.slo_class}
REQUEST: dict[str, Callable[[Context], Any]] = {
    **TEXT,
    "request.input_tokens": lambda c: c.req.input_tokens,
    "request.prefix_blocks": lambda c: len(c.req.prefix_hashes),
    "request.age_s": lambda c: (c.clock - c.req.arrival_us) / US_PER_S,
}
CLUSTER: dict[str, Callable[[Context], Any]] = {
    "tenant.request_count": tenant_value("request_count"),
    "tenant.active_requests": tenant_value("active_requests"),
    "tenant.recent_rate": tenant_value("recent_rate"),
    "global.in_flight": lambda c: 0 if c.state is None else c.state.in_flight,
    "global.request_rate": lambda c: 0.0 if c.state is None else c.state.request_rate(),
}
INSTANCE: dict[str, Callable[[Context], Any]] = {
    "request.priority": lambda c: c.priority,
    "instance.prefix_match": lambda c: c.prefix_match,
    "instance.effective_load": instance_value("effective_load"),
    **{f"instance.{f}": instance_value(f) for f in (
        "queue_depth", "batch_size", "kv_utilization", "free_kv_blocks", "pending_requests",
        "in_flight_requests", "cache_hit_rate", "recent_ttft_ms", "recent_tpot_ms",
        "estimated_wait_ms")},
}
# What each axis may observe (seed D.7): priority is computed again while a request waits,
# where no router state is at hand, so it reads the request only.
SIGNALS = {"admission": {**REQUEST, **CLUSTER}, "priority": REQUEST,
           "routing": {**REQUEST, **CLUSTER, **INSTANCE},
           # a wait-queue sort key sees the request and its priority, not the time
           "scheduler": {**{k: v for k, v in REQUEST.items() if k != "request.age_s"},
                         "request.priority": INSTANCE["request.priority"]}}
OPS: dict[str, Callable[[Any, Any], bool]] = {
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}


@dataclass(frozen=True, slots=True)
class Branch:
    read: Callable[[Context], Any]
    op: Callable[[Any, Any], bool]
    value: Any
    then: Node
    otherwise: Node


Node = Any  # a Branch, or the axis's leaf value


def decide(node: Node, context: Context) -> Any:
    """The leaf the context reaches."""
    while isinstance(node, Branch):
        node = node.then if node.op(node.read(context), node.value) else node.otherwise
    return node


def parse(data: Any, path: str, axis: str, leaf: Callable[[Mapping[str, Any], str], Any],
          depth: int = 0) -> Node:
    """A validated tree; every error names the YAML path of the bad node."""
    if depth > MAX_DEPTH:
        raise ScenarioError(path, f"the tree is deeper than {MAX_DEPTH} levels")
    if not isinstance(data, Mapping):
        raise ScenarioError(path, f"expected a node (a mapping), got {describe(data)}",
                            "{if: ..., then: ..., else: ...} or a leaf")
    if "if" not in data:
        return leaf(data, path)
    extra = sorted(set(data) - {"if", "then", "else"})
    if extra or "then" not in data or "else" not in data:
        raise ScenarioError(f"{path}.{extra[0]}" if extra else path,
                            "a branch has exactly the keys if, then and else")
    test = data["if"]
    where = f"{path}.if"
    if not isinstance(test, Mapping) or set(test) != {"signal", "op", "value"}:
        raise ScenarioError(where, f"expected {{signal, op, value}}, got {describe(test)}")
    signals = SIGNALS[axis]
    if test["signal"] not in signals:
        raise ScenarioError(f"{where}.signal", f"{test['signal']!r} is not observable by "
                            f"{axis}", ", ".join(sorted(signals)))
    if test["op"] not in OPS:
        raise ScenarioError(f"{where}.op", f"{test['op']!r}", ", ".join(OPS))
    value = test["value"]
    if test["signal"] in TEXT:
        if test["op"] not in ("==", "!=") or not isinstance(value, str):
            raise ScenarioError(where, "a text signal compares with == or != to a string")
    elif not finite(value):
        raise ScenarioError(f"{where}.value", f"{value!r}", "a finite number")
    return Branch(signals[test["signal"]], OPS[test["op"]], value,
                  parse(data["then"], f"{path}.then", axis, leaf, depth + 1),
                  parse(data["else"], f"{path}.else", axis, leaf, depth + 1))


def reads(data: Any, signal: str) -> bool:
    """Whether a (validated) tree tests `signal` anywhere."""
    if not isinstance(data, Mapping) or "if" not in data:
        return False
    return data["if"]["signal"] == signal or reads(data["then"], signal) \
        or reads(data["else"], signal)


def finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) \
        and math.isfinite(value)


def leaf_keys(data: Mapping[str, Any], path: str, allowed: tuple[str, ...]) -> None:
    extra = sorted(set(data) - set(allowed))
    if extra:
        raise ScenarioError(f"{path}.{extra[0]}", "unknown leaf key", ", ".join(allowed))


def number(data: Mapping[str, Any], key: str, path: str, default: float | None = None
           ) -> float:
    value = data.get(key, default)
    if not finite(value):
        raise ScenarioError(f"{path}.{key}", f"{value!r}" if key in data else "is required",
                            "a finite number")
    return float(value)


def admission_leaf(data: Mapping[str, Any], path: str) -> AdmissionDecision:
    leaf_keys(data, path, ("action", "delay_s"))
    action = data.get("action")
    if action not in ("admit", "reject", "delay"):
        raise ScenarioError(f"{path}.action", f"{action!r}", "admit, reject or delay")
    if action != "delay":
        if "delay_s" in data:
            raise ScenarioError(f"{path}.delay_s", "only a delay leaf has a delay")
        return AdmissionDecision(action, f"decision-tree: {action}")
    delay_us = round(number(data, "delay_s", path) * US_PER_S)
    if delay_us <= 0:
        raise ScenarioError(f"{path}.delay_s", "must be > 0 (at least 1 µs)")
    return AdmissionDecision("delay", "decision-tree: delay", delay_us)


def priority_leaf(data: Mapping[str, Any], path: str) -> float:
    leaf_keys(data, path, ("priority",))
    return number(data, "priority", path)


@dataclass(frozen=True, slots=True)
class RoutingLeaf:
    score: float  # the constant, or the scorer's weight
    scorer: str | None = None


def routing_leaf(data: Mapping[str, Any], path: str) -> RoutingLeaf:
    leaf_keys(data, path, ("score", "scorer", "weight"))
    if "scorer" in data:
        if "score" in data:
            raise ScenarioError(path, "a leaf has a score or a scorer, not both")
        if data["scorer"] not in SCORERS:
            raise ScenarioError(f"{path}.scorer", f"{data['scorer']!r}",
                                ", ".join(sorted(SCORERS)))
        return RoutingLeaf(number(data, "weight", path, 1.0), data["scorer"])
    if "weight" in data:
        raise ScenarioError(f"{path}.weight", "only a scorer leaf has a weight")
    return RoutingLeaf(number(data, "score", path))


def params_for(axis: str, leaf: Callable[[Mapping[str, Any], str], Any]) -> type:
    """The axis's Params dataclass: one field, the tree, checked when loaded."""

    @dataclass(frozen=True, slots=True)
    class TreeParams:
        tree: dict[str, Any] = spec(help="the decision tree (blis_simpy.policies.tree)")

        def validate(self, path: str) -> None:
            parse(self.tree, f"{path}.tree", axis, leaf)

    return TreeParams


@ADMISSION.register("decision-tree")
class AdmissionTree(AdmissionPolicy):
    """Admit, reject or delay by the leaf the request reaches."""

    Params = params_for("admission", admission_leaf)

    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self.root = parse(params.tree, "tree", "admission", admission_leaf)

    def decide(self, req: RequestView, state: RouterState, clock: int) -> AdmissionDecision:
        decision: AdmissionDecision = decide(self.root, Context(req, state, clock))
        return decision


@PRIORITY.register("decision-tree")
class PriorityTree(PriorityPolicy):
    """The leaf's priority; it ages only when the tree reads request.age_s."""

    Params = params_for("priority", priority_leaf)

    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self.root = parse(params.tree, "tree", "priority", priority_leaf)
        self.ages = reads(params.tree, "request.age_s")

    def compute(self, req: RequestView, state: RouterState | None, clock: int) -> float:
        return float(decide(self.root, Context(req, state, clock)))


@dataclass(frozen=True, slots=True)
class RoutingTreeParams:
    tree: dict[str, Any] = spec(help="the decision tree, evaluated per instance")

    def validate(self, path: str) -> None:
        parse(self.tree, f"{path}.tree", "routing", routing_leaf)


@ROUTING.register("decision-tree")
class RoutingTree(RoutingPolicy):
    """Each instance's score is the value of the leaf it reaches; the highest wins (ties: the
    least loaded, then the first)."""

    Params = RoutingTreeParams
    params: RoutingTreeParams
    reads_shadow_kv = True  # instance.prefix_match and the prefix-affinity scorer

    def __init__(self, params: RoutingTreeParams) -> None:
        super().__init__(params)
        self.root = parse(params.tree, "tree", "routing", routing_leaf)
        self.scorers: dict[str, Scorer] = {}  # each scorer a leaf has used, made once

    def route(self, req: RequestView, priority: float, snapshots: Sequence[InstanceSnapshot],
              state: RouterState, clock: int) -> RoutingDecision:
        blocks = len(req.prefix_hashes)
        shadow = state.shadow_kv
        assert shadow is not None  # kept by the gateway: this policy reads it
        scored: dict[str, list[float]] = {}  # each scorer used, over all instances, once
        scores = []
        for i, snap in enumerate(snapshots):
            match = shadow.expected_hit(snap.id, req.prefix_hashes) / blocks if blocks else 0.0
            leaf: RoutingLeaf = decide(self.root, Context(req, state, clock, priority, snap,
                                                          match))
            if leaf.scorer is None:
                scores.append(leaf.score)
                continue
            if leaf.scorer not in scored:
                scorer = self.scorers.get(leaf.scorer)
                if scorer is None:
                    scorer = self.scorers[leaf.scorer] = SCORERS[leaf.scorer]()
                scored[leaf.scorer] = scorer.scores(req, snapshots, state)
            scores.append(leaf.score * scored[leaf.scorer][i])
        best = min(range(len(snapshots)),
                   key=lambda i: (-scores[i], snapshots[i].effective_load, i))
        target = snapshots[best].id
        for name in scored:
            self.scorers[name].chosen(req, target)
        return RoutingDecision(target, f"decision-tree (score={scores[best]:.3f})",
                               tuple(scores))


def rank_leaf(data: Mapping[str, Any], path: str) -> float:
    leaf_keys(data, path, ("rank",))
    return number(data, "rank", path)


@dataclass(frozen=True, slots=True)
class SchedulerTreeParams(SchedulerParams):
    """The schedulers' `preemption`, and the tree (required: an empty one has no rank)."""

    tree: dict[str, Any] = spec(factory=dict, help="the decision tree: a rank per waiting "
                                "request")

    def validate(self, path: str) -> None:
        parse(self.tree, f"{path}.tree", "scheduler", rank_leaf)


@SCHEDULER.register("decision-tree")
class SchedulerTree(InstanceScheduler):
    """The wait queue in order of the leaf's rank (lower first), then arrival, then id."""

    Params = SchedulerTreeParams

    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self.root = parse(params.tree, "tree", "scheduler", rank_leaf)
        self.uses_priority = self.uses_priority or reads(params.tree, "request.priority")
        self.order_key = self.rank

    def rank(self, view: RequestView, priority: float) -> tuple[float, int, str]:
        leaf = decide(self.root, Context(view, None, 0, priority))
        return (float(leaf), view.arrival_us, view.id)
