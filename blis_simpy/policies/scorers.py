"""The signals a composite router weighs, and their weighted sum: each scorer gives every
routable instance a score in [0, 1] (higher = better), from the request's view, the instances'
snapshots and the router state.

Compiled (setup.py): a policy search evaluates them for every request of thousands of runs.
The templates that use them stay interpreted (`policies/routing.py`, `policies/tree.py`), so
user policies can subclass those.

A scorer is an object made once per policy that uses it: `no-hit-lru` remembers its past
choices, told where each request went (`chosen`). Two kinds of prefix signal are kept apart:

* `prefix-affinity` reads the router's *shadow* KV model (`core/shadow_kv.py`): where the
  router predicts a prompt's blocks are cached, from where it sent earlier prompts.
* `precise-prefix-cache` and `no-hit-lru` read the instances' *real* prefix caches
  (`RouterState.cached_blocks`), as llm-d's KV-event indexer does, as fresh as the scenario's
  `cluster.observability.cached_blocks` rule allows (default: a copy refreshed every 50 ms,
  the reference's `--cache-signal-delay`).

The formulas follow the reference's head (inference-sim `sim/routing_scorers.go`) and llm-d's
scorers they cite; `docs/guides/routing-scorers.md` lists them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from blis_simpy.core.request import RequestView
from blis_simpy.core.router_state import RouterState
from blis_simpy.core.snapshot import InstanceSnapshot

# Queue depths at or above this score 0 with `load-aware` (llm-d's QueueThresholdDefault).
LOAD_AWARE_QUEUE_THRESHOLD = 128
# vLLM's data-parallel load balancer counts a waiting request as four running ones.
VLLM_DP_WAITING_WEIGHT = 4


class Scorer:
    """One weighted signal. `reads_shadow_kv`: it reads `state.shadow_kv`, so the gateway must
    keep the router's shadow model."""

    reads_shadow_kv = False

    def scores(self, req: RequestView, snaps: Sequence[InstanceSnapshot],
               state: RouterState) -> list[float]:
        raise NotImplementedError

    def chosen(self, req: RequestView, target: str) -> None:
        """The router sent `req` to `target` (a stateful scorer learns from it)."""


def combine(scorers: Sequence[tuple[str, Scorer, float]], req: RequestView,
            snaps: Sequence[InstanceSnapshot], state: RouterState
            ) -> tuple[list[float], dict[str, tuple[float, ...]]]:
    """The composite score of each instance, sum of weight x (score clamped to [0, 1]) over
    the scorers in order, and each scorer's weighted shares."""
    composite = [0.0] * len(snaps)
    breakdown: dict[str, tuple[float, ...]] = {}
    for name, scorer, weight in scorers:
        shares: list[float] = []
        for i, x in enumerate(scorer.scores(req, snaps, state)):
            share = weight * (0.0 if x < 0 else 1.0 if x > 1 else x)
            shares.append(share)
            composite[i] += share
        breakdown[name] = tuple(shares)
    return composite, breakdown


def weighted_choice(scorers: Sequence[tuple[str, Scorer, float]], bonus: float,
                    req: RequestView, snapshots: Sequence[InstanceSnapshot],
                    state: RouterState
                    ) -> tuple[str, str, tuple[float, ...], dict[str, tuple[float, ...]]]:
    """The `weighted` template's decision, compiled: (target, reason, composite scores,
    breakdown). The composite is `combine`'s, plus `bonus` for every instance the shadow KV
    expects to hold the prompt's first block; the highest wins, the first among equals; each
    scorer is told the choice (`tell`)."""
    snaps = [snapshots[i] for i in range(len(snapshots))]  # every scorer reads every one
    composite, breakdown = combine(scorers, req, snaps, state)
    if bonus:
        shadow = state.shadow_kv
        assert shadow is not None  # kept by the gateway: the bonus reads it
        first = req.prefix_hashes[:1]
        shares = [bonus if first and shadow.expected_hit(s.id, first) else 0.0
                  for s in snaps]
        breakdown["prefix-match-bonus"] = tuple(shares)
        composite = [total + share for total, share in zip(composite, shares, strict=True)]
    best, best_score = 0, composite[0]
    for i in range(1, len(composite)):
        if composite[i] > best_score:
            best, best_score = i, composite[i]
    target = snaps[best].id
    tell(scorers, req, target)
    return target, f"weighted-scoring (score={best_score:.3f})", tuple(composite), breakdown


def tell(scorers: Sequence[tuple[str, Scorer, float]], req: RequestView, target: str) -> None:
    """Tell each scorer where the router sent `req`."""
    for _, scorer, _ in scorers:
        scorer.chosen(req, target)


def inverted_min_max(values: Sequence[float]) -> list[float]:
    """Lowest value 1, highest 0, linear between; all equal: all 1."""
    low, high = min(values), max(values)
    if high == low:
        return [1.0] * len(values)
    return [(high - v) / (high - low) for v in values]


def min_max(values: Sequence[float]) -> list[float]:
    """Highest value 1, lowest 0, linear between; all equal: all 1."""
    low, high = min(values), max(values)
    if high == low:
        return [1.0] * len(values)
    return [(v - low) / (high - low) for v in values]


# -- load -------------------------------------------------------------------------------------

class QueueDepth(Scorer):
    """Effective load (queued + running + routed-not-queued), min-max inverted: the reference
    version the compat mode reproduces (its head reads the wait queue alone)."""

    def scores(self, req: RequestView, snaps: Sequence[InstanceSnapshot],
               state: RouterState) -> list[float]:
        return inverted_min_max([s.effective_load for s in snaps])


class KVUtilization(Scorer):
    """The share of each instance's KV blocks free."""

    def scores(self, req: RequestView, snaps: Sequence[InstanceSnapshot],
               state: RouterState) -> list[float]:
        return [1.0 - s.kv_utilization for s in snaps]


class LoadBalance(Scorer):
    """1 / (1 + effective load)."""

    def scores(self, req: RequestView, snaps: Sequence[InstanceSnapshot],
               state: RouterState) -> list[float]:
        return [1.0 / (1.0 + s.effective_load) for s in snaps]


class ActiveRequests(Scorer):
    """Requests in flight (routed, not finished), normalised by the largest: an idle instance
    scores 1, the busiest 0, and when all are equally busy all score 0 (llm-d's
    active-request scorer; unlike the min-max scorers, which give all 1)."""

    def scores(self, req: RequestView, snaps: Sequence[InstanceSnapshot],
               state: RouterState) -> list[float]:
        most = max(s.in_flight_requests for s in snaps)
        return [1.0 if s.in_flight_requests == 0 else (most - s.in_flight_requests) / most
                for s in snaps]


class RunningRequests(Scorer):
    """The running batch's size, min-max inverted (GIE's running-requests-size scorer)."""

    def scores(self, req: RequestView, snaps: Sequence[InstanceSnapshot],
               state: RouterState) -> list[float]:
        return inverted_min_max([s.batch_size for s in snaps])


class LoadAware(Scorer):
    """The wait queue against a fixed threshold: 0.5 when empty, falling linearly to 0 at 128
    waiting (llm-d's load-aware scorer; it never scores above 0.5, so its weight counts half
    against the others')."""

    def scores(self, req: RequestView, snaps: Sequence[InstanceSnapshot],
               state: RouterState) -> list[float]:
        limit = LOAD_AWARE_QUEUE_THRESHOLD
        return [0.5 * (1.0 - min(s.queue_depth, limit) / limit) for s in snaps]


class VllmDP(Scorer):
    """vLLM's data-parallel load balancer: 4 x waiting + running, min-max inverted. With the
    instances standing for the DP ranks of one server, the router picks the rank vLLM's
    front end would."""

    def scores(self, req: RequestView, snaps: Sequence[InstanceSnapshot],
               state: RouterState) -> list[float]:
        weight = VLLM_DP_WAITING_WEIGHT
        return inverted_min_max([weight * s.queue_depth + s.batch_size for s in snaps])


# -- prefix -----------------------------------------------------------------------------------

class PrefixAffinity(Scorer):
    """The share of the prompt's blocks the shadow model expects cached on each instance."""

    reads_shadow_kv = True

    def scores(self, req: RequestView, snaps: Sequence[InstanceSnapshot],
               state: RouterState) -> list[float]:
        total = len(req.prefix_hashes)
        if total == 0:
            return [0.0] * len(snaps)
        shadow = state.shadow_kv
        assert shadow is not None  # kept by the gateway: this scorer reads it
        return [shadow.expected_hit(s.id, req.prefix_hashes) / total for s in snaps]


class PrecisePrefixCache(Scorer):
    """The prompt's leading blocks each instance really has cached, min-max normalised (all
    equal, none cached included: all 1), as llm-d's precise prefix-cache scorer."""

    def scores(self, req: RequestView, snaps: Sequence[InstanceSnapshot],
               state: RouterState) -> list[float]:
        hashes = req.prefix_hashes
        return min_max([state.cached_blocks(s.id, hashes) for s in snaps])


class NoHitLRU(Scorer):
    """Spreads cold requests (no instance has any of the prompt's blocks cached) over the
    instances least recently sent a cold request, never-sent ones first (in fleet order), then
    the longest unused; a warm request scores 0.5 everywhere and leaves the choice to the
    other scorers (llm-d's no-hit-lru scorer). Only cold requests move the LRU order."""

    def __init__(self) -> None:
        self.last_cold: dict[str, int] = {}  # instance id -> when it was last sent a cold one
        self.cold_requests = 0
        self.cold = ""  # the id of the request just scored, if it was cold

    def scores(self, req: RequestView, snaps: Sequence[InstanceSnapshot],
               state: RouterState) -> list[float]:
        hashes = req.prefix_hashes
        self.cold = ""
        if any(state.cached_blocks(s.id, hashes) > 0 for s in snaps):
            return [0.5] * len(snaps)
        self.cold = req.id
        n = len(snaps)
        if n == 1:
            return [1.0]
        last = self.last_cold
        # never sent one (-1) first, in fleet order; then by the time of the last one sent
        order = sorted(range(n), key=lambda i: (last.get(snaps[i].id, -1), i))
        scores = [0.0] * n
        for rank, i in enumerate(order):
            scores[i] = 1.0 - rank / (n - 1)
        return scores

    def chosen(self, req: RequestView, target: str) -> None:
        if self.cold and req.id == self.cold:
            self.last_cold[target] = self.cold_requests
            self.cold_requests += 1


# -- LoRA -------------------------------------------------------------------------------------

class LoraAffinity(Scorer):
    """1 where the request's LoRA adapter is resident, 0 where it would have to be loaded;
    all 1 (no preference) for a base-model request, or when every instance or none holds it
    (the reference head's lora-affinity scorer, min-max normalised as llm-d's)."""

    def scores(self, req: RequestView, snaps: Sequence[InstanceSnapshot],
               state: RouterState) -> list[float]:
        adapter = req.adapter
        if not adapter:
            return [1.0] * len(snaps)
        return min_max([1.0 if state.holds_adapter(s.id, adapter) else 0.0 for s in snaps])


# name -> a new scorer (one per policy that uses it: a stateful scorer's memory is its
# policy's own)
SCORERS: dict[str, Callable[[], Scorer]] = {
    "queue-depth": QueueDepth,
    "kv-utilization": KVUtilization,
    "load-balance": LoadBalance,
    "active-requests": ActiveRequests,
    "running-requests": RunningRequests,
    "load-aware": LoadAware,
    "vllm-dp": VllmDP,
    "prefix-affinity": PrefixAffinity,
    "precise-prefix-cache": PrecisePrefixCache,
    "no-hit-lru": NoHitLRU,
    "lora-affinity": LoraAffinity,
}
