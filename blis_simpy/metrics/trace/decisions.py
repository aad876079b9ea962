"""The decisions table (and its JSON lines form): every admission, priority and routing decision
of a traced run, routing rows with their context, candidates, regret (`regret.py`) and, filled
in from the requests table after the run, what actually happened to the request."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from blis_simpy.core.records import Candidate, Decision
from blis_simpy.core.snapshot import InstanceSnapshot
from blis_simpy.core.units import US_PER_S
from blis_simpy.metrics.columns import Table
from blis_simpy.metrics.trace.regret import Regret, regret

NAN = float("nan")
SEEN_FIELDS = ("queue_depth", "batch_size", "pending_requests", "in_flight_requests",
               "kv_utilization", "free_kv_blocks", "cache_hit_rate", "estimated_wait_ms")


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to a request, from the requests table."""

    ttft_ms: float
    cached_tokens: int  # prompt tokens found in the prefix cache when first scheduled
    final_state: str
    scheduled: bool  # ever scheduled (only then did it look the cache up)


def outcomes(requests: Table) -> dict[str, Outcome]:
    ttft, cached = requests.array("ttft_ms"), requests.array("cached_tokens")
    scheduled = ~np.isnan(requests.array("scheduled_s"))
    return {str(rid): Outcome(float(ttft[i]), int(cached[i]), str(state), bool(scheduled[i]))
            for i, (rid, state) in enumerate(zip(requests["id"], requests["final_state"],
                                                 strict=True))}


def candidate_text(c: Candidate) -> str:
    text = f"{c.instance}={c.score:.6g}"
    if c.breakdown:
        text += "(" + ",".join(f"{name}={share:.6g}" for name, share in c.breakdown) + ")"
    return text


def seen_text(candidates: Sequence[Candidate]) -> str:
    """`instance:queue=..,batch=..,...` for each candidate whose snapshot the policy read."""
    return ";".join(
        f"{c.instance}:" + ",".join(f"{name}={getattr(c.seen, name):.6g}" for name in
                                    SEEN_FIELDS)
        for c in candidates if c.seen is not None)


def snapshot_dict(snap: InstanceSnapshot | None) -> dict[str, float] | None:
    return None if snap is None else {name: getattr(snap, name) for name in SEEN_FIELDS}


class DecisionRows:
    """Each decision joined with its regret and its request's outcome, built once and shown
    as the table and as JSON lines."""

    def __init__(self, decisions: Sequence[Decision], requests: Table, top_k: int,
                 prefill_ms_per_token: float) -> None:
        self.decisions = decisions
        self.top_k = top_k
        self.per_token_ms = prefill_ms_per_token
        self.outcome = outcomes(requests)
        self.regrets: list[Regret | None] = [
            regret(d.candidates, d.instance, d.input_tokens, prefill_ms_per_token)
            if d.stage == "routing" else None for d in decisions]

    def chosen(self, d: Decision) -> Candidate | None:
        return next((c for c in d.candidates if c.instance == d.instance), None)

    def table(self) -> Table:
        ds, regrets = self.decisions, self.regrets
        routed = [d.stage == "routing" for d in ds]
        outcome = [self.outcome.get(d.request) if r else None for d, r in zip(ds, routed,
                                                                                strict=True)]
        expected = [c.expected_hit_tokens if (c := self.chosen(d)) else -1 for d in ds]

        def num(values: list[float]) -> np.ndarray:
            return np.array(values, dtype=float)

        return Table({
            "time_s": num([d.time / US_PER_S for d in ds]),
            "request": [d.request for d in ds],
            "stage": [d.stage for d in ds],
            "outcome": [d.outcome for d in ds],
            "instance": [d.instance for d in ds],
            "reason": [d.reason for d in ds],
            "priority": num([d.priority if d.stage != "admission" else NAN for d in ds]),
            "tenant": [d.tenant for d in ds],
            "slo_class": [d.slo_class for d in ds],
            "input_tokens": num([d.input_tokens if r else NAN for d, r in zip(ds, routed,
                                                                              strict=True)]),
            "prefix_hash": [d.prefix_hash for d in ds],
            "filtered": [";".join(d.filtered) for d in ds],
            "top_candidates": [";".join(candidate_text(c) for c in d.candidates[: self.top_k])
                               for d in ds],
            "scores": [";".join(f"{c.instance}={c.score:.6g}" for c in d.candidates)
                       for d in ds],
            "seen": [seen_text(d.candidates) for d in ds],
            "expected_hit_tokens": num([e if e >= 0 else NAN for e in expected]),
            "expected_cache_hit": [("" if e < 0 else str(e > 0)) for e in expected],
            "best_alt_hit_tokens": num([max((c.expected_hit_tokens for c in d.candidates
                                             if c.instance != d.instance), default=0)
                                        if r else NAN for d, r in zip(ds, routed, strict=True)]),
            "est_ttft_ms": num([g.chosen_ttft_ms if g else NAN for g in regrets]),
            "best_alternative": [g.best_instance if g else "" for g in regrets],
            "best_alternative_ttft_ms": num([g.best_ttft_ms if g else NAN for g in regrets]),
            "score_regret": num([g.score if g else NAN for g in regrets]),
            "ttft_regret_ms": num([g.ttft_ms if g else NAN for g in regrets]),
            "actual_ttft_ms": num([o.ttft_ms if o else NAN for o in outcome]),
            "cached_tokens": num([o.cached_tokens if o else NAN for o in outcome]),
            "cache_hit": [str(o.cached_tokens > 0) if o is not None and o.scheduled else ""
                          for o in outcome],
            "cache_tier": ["gpu" if o is not None and o.cached_tokens > 0 else ""
                           for o in outcome],
            "final_state": [o.final_state if o else "" for o in outcome],
        })

    def jsonl(self) -> str:
        """One JSON object per decision, every candidate with its breakdown and snapshot."""
        lines = []
        for d, g in zip(self.decisions, self.regrets, strict=True):
            row: dict[str, Any] = {"time_s": d.time / US_PER_S, "request": d.request,
                                   "stage": d.stage, "outcome": d.outcome,
                                   "instance": d.instance, "reason": d.reason,
                                   "tenant": d.tenant, "slo_class": d.slo_class}
            if d.stage != "admission":
                row["priority"] = d.priority
            if d.stage == "routing":
                o = self.outcome.get(d.request)
                row.update({
                    "input_tokens": d.input_tokens, "prefix_hash": d.prefix_hash,
                    "filtered": list(d.filtered),
                    "candidates": [{"instance": c.instance, "score": c.score,
                                    "breakdown": dict(c.breakdown), "wait_ms": c.wait_ms,
                                    "expected_hit_tokens": c.expected_hit_tokens,
                                    "seen": snapshot_dict(c.seen)} for c in d.candidates],
                    "top_k": [c.instance for c in d.candidates[: self.top_k]],
                })
                if g is not None:
                    row.update({"score_regret": g.score, "ttft_regret_ms": g.ttft_ms,
                                "est_ttft_ms": g.chosen_ttft_ms,
                                "best_alternative": g.best_instance})
                if o is not None:
                    row.update({"actual_ttft_ms": finite(o.ttft_ms),
                                "cached_tokens": o.cached_tokens,
                                "final_state": o.final_state})
            lines.append(json.dumps(row, sort_keys=False, allow_nan=False))
        return "".join(line + "\n" for line in lines)


def finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
