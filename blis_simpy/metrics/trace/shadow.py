"""How well the router's shadow KV predicted the instances' caches (design §3, §10): for every
routed request that was scheduled, the prompt tokens the shadow model expected cached on the
chosen instance against the tokens the instance's prefix cache actually served.

A `shadow_divergence` anomaly is one decision where the two disagree on whether there is a hit
at all (expected a hit and found none, or found one the model did not expect); its severity is
the difference in tokens as a share of the prompt."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from blis_simpy.core.records import Anomaly, Decision
from blis_simpy.metrics.trace.decisions import Outcome


def compared(decisions: Sequence[Decision], outcome: dict[str, Outcome]
             ) -> list[tuple[Decision, int, int]]:
    """(decision, expected tokens, actual tokens) for each routed request that was scheduled."""
    rows = []
    for d in decisions:
        if d.stage != "routing":
            continue
        o = outcome.get(d.request)
        chosen = next((c for c in d.candidates if c.instance == d.instance), None)
        if o is None or not o.scheduled or chosen is None:
            continue
        rows.append((d, chosen.expected_hit_tokens, o.cached_tokens))
    return rows


def divergences(rows: Sequence[tuple[Decision, int, int]]) -> list[Anomaly]:
    found = []
    for d, expected, actual in rows:
        if (expected > 0) != (actual > 0):
            what = "expected a prefix hit, found none" if expected else \
                "found a prefix hit the shadow KV did not expect"
            found.append(Anomaly(
                "shadow_divergence", d.time, d.instance, (d.request,),
                f"{what}: expected {expected} cached tokens, found {actual}", d.time,
                min(1.0, abs(expected - actual) / max(1, d.input_tokens))))
    return found


def accuracy(rows: Sequence[tuple[Decision, int, int]]) -> dict[str, Any]:
    """The shadow model's record: decisions compared, how many it called right (hit or no
    hit), and the mean absolute error in cached tokens."""
    n = len(rows)
    right = sum((e > 0) == (a > 0) for _, e, a in rows)
    return {
        "decisions": n,
        "expected_hits": sum(e > 0 for _, e, _ in rows),
        "actual_hits": sum(a > 0 for _, _, a in rows),
        "accuracy": right / n if n else None,
        "mean_abs_error_tokens": sum(abs(e - a) for _, e, a in rows) / n if n else None,
    }
