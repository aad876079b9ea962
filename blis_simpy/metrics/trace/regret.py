"""Counterfactual regret of one routing decision (docs/decision-traces.md, "Regret").

Two measures, both >= 0 and 0 when the chosen instance was the best:

* **score regret** = (highest score among all candidates) - (the chosen instance's score), in
  the policy's own units. Non-zero only when the policy did not pick its own best (a user
  policy overriding its scores, a tie broken elsewhere); the reference's definition.
* **TTFT regret (ms)** = (estimated TTFT on the chosen instance) - (the lowest estimated TTFT
  on any candidate). The estimate of the time to first token on candidate `c`, from what the
  router could know when it decided:

      est_ttft_ms(c) = wait_ms(c) + (input_tokens - expected_hit_tokens(c)) * prefill_ms_per_token

  `wait_ms` is the instance's estimated wait (its queued prefill tokens in steps of the token
  budget, at its last step's duration), `expected_hit_tokens` the prompt tokens the shadow KV
  expected cached there, and `prefill_ms_per_token` the marginal cost of a prefill token fitted
  on the run's own steps (`prefill_ms_per_token` below). It is an estimate for comparing
  candidates, not a prediction of the actual TTFT (which also includes the step the request is
  prefilled in and any output delay).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from blis_simpy.core.records import Candidate
from blis_simpy.core.units import US_PER_MS


@dataclass(frozen=True, slots=True)
class Regret:
    score: float  # best score - chosen score
    ttft_ms: float  # est. TTFT on the chosen instance - the lowest est. TTFT
    chosen_ttft_ms: float  # est. TTFT on the chosen instance
    best_instance: str  # the candidate with the lowest est. TTFT (first of equals, best score)
    best_ttft_ms: float


def estimated_ttft_ms(candidate: Candidate, input_tokens: int, prefill_ms_per_token: float
                      ) -> float:
    """The router-side TTFT estimate on one candidate (module docstring)."""
    uncached = max(0, input_tokens - candidate.expected_hit_tokens)
    return candidate.wait_ms + uncached * prefill_ms_per_token


def regret(candidates: Sequence[Candidate], chosen: str, input_tokens: int,
           prefill_ms_per_token: float) -> Regret | None:
    """Both regrets of a decision that chose `chosen` among `candidates` (best score first);
    None when the chosen instance is not among them."""
    mine = next((c for c in candidates if c.instance == chosen), None)
    if mine is None:
        return None
    estimates = [estimated_ttft_ms(c, input_tokens, prefill_ms_per_token) for c in candidates]
    best = int(np.argmin(estimates))
    own = estimated_ttft_ms(mine, input_tokens, prefill_ms_per_token)
    return Regret(score=max(0.0, max(c.score for c in candidates) - mine.score),
                  ttft_ms=max(0.0, own - estimates[best]), chosen_ttft_ms=own,
                  best_instance=candidates[best].instance, best_ttft_ms=estimates[best])


def prefill_ms_per_token(new_tokens: np.ndarray, decodes: np.ndarray, duration_us: np.ndarray
                         ) -> float:
    """Marginal step time of one prefill token (ms), fitted by least squares on the run's steps
    as duration = a + b * new_tokens + c * decodes (exact for the blackbox model, whose step
    time has this form; a linearisation of the others). 0 with too few distinct steps."""
    if len(new_tokens) < 3 or np.ptp(new_tokens) == 0:
        return 0.0
    x = np.column_stack([np.ones(len(new_tokens)), new_tokens, decodes]).astype(float)
    coef, *_ = np.linalg.lstsq(x, duration_us.astype(float), rcond=None)
    return max(0.0, float(coef[1])) / US_PER_MS
