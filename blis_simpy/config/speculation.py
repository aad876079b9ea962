"""Speculative decoding as data (`engine.speculative`, native mode): how drafts are made (n-gram
prompt lookup, or a small draft model), how many tokens a decode step drafts and how often the
target model accepts them, overall and per tenant.
The stepper's use of it is `engine/step.py` (`Stepper.speculate`), the draft model's step cost
`engine/speculative.py`; docs/guides/speculative.md is the user's guide.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from blis_simpy.config.catalog import bundled_model_config, read_json
from blis_simpy.config.kv_tiers import block_bytes
from blis_simpy.config.memory import model_weight_bytes
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.schema import join, spec

KEY = "engine.speculative"
MAX_DRAFT = 64  # draft tokens per step (vLLM's num_speculative_tokens is usually 1-8)
METHODS = ("ngram", "draft_model")


def expected_tokens(acceptance_rate: float, draft_tokens: int) -> float:
    """Tokens a full-length verify step emits on average: 1 + a + ... + a^k."""
    a, k = acceptance_rate, draft_tokens
    return float(k + 1) if a >= 1 else (1 - a ** (k + 1)) / (1 - a)


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
    method: Literal["ngram", "draft_model"] = spec(
        "ngram", help="how drafts are made: ngram (prompt lookup, vLLM's method \"ngram\"): on "
        "the CPU at no GPU cost; draft_model (vLLM's method \"draft_model\"): a small model "
        "(`model`) on the same GPUs runs draft_tokens forward passes per step, costed by the "
        "scenario's step model, its weights and KV taking GPU memory from the KV cache. Either "
        "way the target verifies 1 + draft_tokens positions per decoding request")
    model: str | None = spec(None, help="the draft model (method draft_model): its name, whose "
                             "config.json is bundled (e.g. qwen/qwen2.5-1.5b-instruct), or any "
                             "name with `model_config`", omit_default=True)
    model_config: str | None = spec(None, help="path to the draft model's config.json (or a "
                                    "folder holding one); default: the bundled config of "
                                    "`model`", omit_default=True)
    tenant_acceptance: dict[str, float] = spec(
        factory=dict, help="acceptance rate by tenant id, for tenants whose text is more (or "
        "less) predictable than the rest; tenants not listed accept at acceptance_rate",
        omit_default=True)

    def validate(self, path: str) -> None:
        if self.method == "draft_model" and self.model is None:
            raise ScenarioError(join(path, "model"), "method draft_model needs the draft "
                                "model's name", "a model name, e.g. qwen/qwen2.5-1.5b-instruct")
        if self.method == "ngram":
            for key in ("model", "model_config"):
                if getattr(self, key) is not None:
                    raise ScenarioError(join(path, key), "names a draft model, but method "
                                        "ngram drafts without one", "method: draft_model, or "
                                        f"no {key}")
        for tenant, rate in self.tenant_acceptance.items():
            if not (isinstance(rate, float | int) and math.isfinite(rate) and 0 <= rate <= 1):
                raise ScenarioError(join(join(path, "tenant_acceptance"), tenant),
                                    f"acceptance rate {rate!r} is outside [0, 1]", "0..1")

    def rate_of(self, tenant: str) -> float:
        return self.tenant_acceptance.get(tenant, self.acceptance_rate)

    def expected_tokens(self) -> float:
        """Tokens a full-length verify step emits on average at the scenario-wide rate."""
        return expected_tokens(self.acceptance_rate, self.draft_tokens)


def draft_model_config(config: SpeculativeConfig) -> dict:
    """The draft model's config.json (its file, else the bundled one), errors naming the key."""
    try:
        if config.model_config:
            return read_json(config.model_config, "config.json")
        return bundled_model_config(config.model or "")
    except ValueError as exc:
        key = "model_config" if config.model_config else "model"
        raise ScenarioError(join(KEY, key), str(exc)) from None


def kv_blocks_with_draft(blocks: int, target: dict | None, draft: dict, block_size: int) -> int:
    """The KV blocks left when a draft model shares the GPUs: vLLM loads the draft's weights
    beside the target's and gives each block the draft's KV of its tokens as well as the
    target's, so the memory of `blocks` target blocks, less the draft's weights, is cut into
    blocks of both: (blocks x target bytes - draft weights) // (target + draft bytes)."""
    target_bytes = block_bytes(target, 1, block_size) if target else None
    draft_bytes = block_bytes(draft, 1, block_size)
    weights = model_weight_bytes(draft)
    if target_bytes is None or draft_bytes is None or weights is None:
        raise ScenarioError(join(KEY, "model"), "the draft model's or the target's config.json "
                            "lacks a dimension or its torch_dtype, so the KV memory the draft "
                            "takes cannot be worked out", "complete config.json files, or "
                            "engine.kv_blocks given")
    left = (blocks * target_bytes - weights) // (target_bytes + draft_bytes)
    if left < 1:
        raise ScenarioError(join(KEY, "model"), f"the draft model's weights ({weights / 2**30:.1f} "
                            f"GiB) leave no room for KV blocks beside the target's",
                            "a smaller draft model, or more GPUs (model.tp)")
    return left
