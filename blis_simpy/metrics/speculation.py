"""Speculative decoding metrics (engine.speculative): summary.json `speculation`.

Over every instance: the tokens drafted and accepted, the verify steps (one per decoding
request per step), the acceptance rate (accepted / drafted, vLLM's draft acceptance rate: with
each token accepted at rate a given the ones before it, (a + ... + a^k) / k), the mean tokens a
verify step emits (1 + accepted per step), and what the configured rate predicts for a step
that drafts the full draft_tokens. The tokens per verify step bound the decode speed-up when
verifying costs nothing; the speed-up itself is against the same run without speculation (the
library scenario `speculative-decoding` states both).
"""

from __future__ import annotations

from typing import Any

from blis_simpy.config.speculation import SpeculativeConfig
from blis_simpy.core.records import Records


def speculation_summary(records: Records, config: SpeculativeConfig) -> dict[str, Any]:
    """The summary's `speculation` section."""
    drafted, accepted, steps = records.speculation
    return {
        "method": config.method,
        "draft_tokens": config.draft_tokens,
        "configured_acceptance_rate": config.acceptance_rate,
        "drafted_tokens": drafted,
        "accepted_tokens": accepted,
        "verify_steps": steps,
        "acceptance_rate": accepted / drafted if drafted else None,
        "tokens_per_verify_step": (steps + accepted) / steps if steps else None,
        "expected_tokens_per_step": config.expected_tokens(),
        "expected_acceptance_rate": (config.expected_tokens() - 1) / config.draft_tokens,
    }
