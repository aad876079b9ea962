"""Speculative decoding metrics (engine.speculative): summary.json `speculation`.

Over every instance: the tokens drafted and accepted, the verify steps (one per decoding
request per step), the acceptance rate (accepted / drafted, vLLM's draft acceptance rate: with
each token accepted at rate a given the ones before it, (a + ... + a^k) / k), the mean tokens a
verify step emits (1 + accepted per step), and what the configured rate predicts for a step
that drafts the full draft_tokens. The tokens per verify step bound the decode speed-up when
verifying costs nothing; the speed-up itself is against the same run without speculation (the
library scenario `speculative-decoding` states both). With several tenants, or rates set per
tenant, `by_tenant` gives the same counts for each. In-memory and streamed runs report the
same section (the counts are totals the instances keep, never per-request records).
"""

from __future__ import annotations

from typing import Any

from blis_simpy.config.speculation import SpeculativeConfig, expected_tokens
from blis_simpy.core.records import Records


def counts(drafted: int, accepted: int, steps: int, rate: float, k: int) -> dict[str, Any]:
    """The figures of one set of counts, against a configured rate."""
    return {
        "drafted_tokens": drafted,
        "accepted_tokens": accepted,
        "verify_steps": steps,
        "acceptance_rate": accepted / drafted if drafted else None,
        "tokens_per_verify_step": (steps + accepted) / steps if steps else None,
        "expected_tokens_per_step": expected_tokens(rate, k),
        "expected_acceptance_rate": (expected_tokens(rate, k) - 1) / k,
    }


def speculation_summary(records: Records, config: SpeculativeConfig) -> dict[str, Any]:
    """The summary's `speculation` section."""
    k = config.draft_tokens
    section: dict[str, Any] = {"method": config.method, "draft_tokens": k,
                               "configured_acceptance_rate": config.acceptance_rate}
    if config.model is not None:
        section["draft_model"] = config.model
    section.update(counts(*records.speculation, config.acceptance_rate, k))
    tenants = records.speculation_tenants
    if len(tenants) > 1 or config.tenant_acceptance:
        section["by_tenant"] = {
            name: {"configured_acceptance_rate": config.rate_of(name),
                   **counts(*totals, config.rate_of(name), k)}
            for name, totals in tenants.items()}
    return section
