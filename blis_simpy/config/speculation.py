"""Speculative decoding as data (`engine.speculative`, native mode): how many tokens n-gram
speculation drafts per decode step and how often the target model accepts them.
The stepper's use of it is `engine/step.py` (`Stepper.speculate`); docs/guides/speculative.md
is the user's guide.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from blis_simpy.core.schema import spec

MAX_DRAFT = 64  # draft tokens per step (vLLM's num_speculative_tokens is usually 1-8)


@dataclass(frozen=True, slots=True)
class SpeculativeConfig:
    draft_tokens: int = spec(help="tokens drafted per decode step (vLLM's "
                             "num_speculative_tokens), cut so a request never drafts past its "
                             "output length", ge=1, le=MAX_DRAFT)
    acceptance_rate: float = spec(help="chance each drafted token is accepted given the ones "
                                  "before it were: a step accepts min(draft_tokens, G - 1) "
                                  "tokens, G geometric with success 1 - acceptance_rate, and "
                                  "emits those plus the target model's own token",
                                  ge=0, le=1)
    method: Literal["ngram"] = spec("ngram", help="how drafts are made: ngram (prompt lookup, "
                                    "vLLM's method: \"ngram\"): drafted on the CPU at no GPU "
                                    "cost; the step verifies 1 + draft_tokens positions per "
                                    "decoding request")

    def expected_tokens(self) -> float:
        """Tokens a full-length verify step emits on average: 1 + a + ... + a^k."""
        a, k = self.acceptance_rate, self.draft_tokens
        return float(k + 1) if a >= 1 else (1 - a ** (k + 1)) / (1 - a)
