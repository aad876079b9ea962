"""The fitness section of a scenario: which objective keys to weight, validated up front.

The keys and what each normalises are documented with the metrics (`blis_simpy.metrics.fitness`,
which maps every key here to its raw metric and normalisation).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.schema import join, spec

FITNESS_KEYS = ("throughput", "tokens_per_sec", "goodput", "p99_ttft", "p50_ttft", "mean_ttft",
                "p99_e2e", "p50_e2e", "mean_e2e", "p99_tpot", "mean_tpot", "slo_attainment",
                "fairness", "cache_hit_rate", "rejection_rate", "preemption_rate")


@dataclass(frozen=True, slots=True)
class FitnessConfig:
    weights: dict[str, float] = spec(factory=dict, help="metric key -> weight "
                                     "(docs/reference/metrics.md)")

    def validate(self, path: str) -> None:
        check_weights(self.weights, join(path, "weights"))


def check_weights(weights: Mapping[str, Any], path: str) -> None:
    """Known keys, finite weights >= 0, and not all 0 (every run would score 0, whatever it
    did)."""
    for key, weight in weights.items():
        if key not in FITNESS_KEYS:
            raise ScenarioError(f"{path}.{key}", "unknown fitness metric key",
                                ", ".join(sorted(FITNESS_KEYS)))
        if isinstance(weight, bool) or not isinstance(weight, int | float) \
                or not math.isfinite(weight) or weight < 0:
            raise ScenarioError(f"{path}.{key}", f"weight {weight!r}", "a finite number >= 0")
    if weights and not any(weights.values()):
        raise ScenarioError(path, "every weight is 0, so every run would score 0",
                            "at least one weight > 0; no weights at all for the default score")


def parse_weights(text: str) -> dict[str, float]:
    """`"throughput:0.5,p99_ttft:0.3"` -> weights; a key given twice is refused, as a
    scenario's duplicate YAML key is (the reference lets the last one win silently)."""
    weights: dict[str, float] = {}
    for item in text.split(","):
        key, sep, value = item.strip().partition(":")
        if not sep:
            raise ScenarioError("--fitness-weights", f"{item.strip()!r} has no ':'",
                                "key:weight,key:weight")
        if key.strip() in weights:
            raise ScenarioError("--fitness-weights", f"{key.strip()!r} is given twice",
                                "each key once")
        try:
            weights[key.strip()] = float(value)
        except ValueError:
            raise ScenarioError("--fitness-weights", f"weight {value.strip()!r} of "
                                f"{key.strip()!r} is not a number") from None
    check_weights(weights, "--fitness-weights")
    return weights
