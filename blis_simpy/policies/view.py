"""The read-only request view handed to gateway policies (seed D.7: what they may observe)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RequestView:
    id: str
    arrival_us: int
    input_tokens: int
    tenant_id: str
    slo_class: str
    prefix_hashes: tuple[int, ...]  # chained hashes of the prompt's full KV blocks
