"""A request's identity, its token content, and its progress through one instance."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import numpy as np

from blis_simpy.engine.tokens import block_hashes


class State(StrEnum):
    """Lifecycle: queued -> running -> completed (preemption sends running back to queued)."""

    ARRIVING = "arriving"  # routed to an instance, inside its queueing delay
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    REJECTED = "rejected"


class Request:
    """One inference request. Plain slotted class: the step loop touches it every step."""

    __slots__ = (
        "admitted_at",
        "arrival",
        "blocks",
        "cached_tokens",
        "chunk",
        "completed_at",
        "done",
        "emitted",
        "first_scheduled",
        "first_token_at",
        "first_token_step",
        "gaps",
        "hashes",
        "index",
        "input_len",
        "instance",
        "last_emit_step",
        "lazy_base",
        "max_tokens",
        "name",
        "output_len",
        "preemptions",
        "prefill_target",
        "priority",
        "progress",
        "queued_at",
        "reject_reason",
        "request_type",
        "routed_at",
        "seq",
        "session_id",
        "slo_class",
        "state",
        "tenant_id",
        "tokens",
        "turn",
        "view",
    )

    def __init__(
        self,
        index: int,
        arrival: int,
        input_tokens: np.ndarray,
        output_tokens: np.ndarray,
        tenant_id: str = "",
        slo_class: str = "",
    ) -> None:
        self.index = index
        self.name = f"request_{index}"
        self.arrival = arrival
        self.tenant_id = tenant_id
        self.slo_class = slo_class
        self.admitted_at = -1
        self.routed_at = -1
        self.view: Any = None  # the read-only RequestView policies see, made at arrival
        self.request_type = "completion"
        self.session_id = ""
        self.turn = 0
        self.done: Any = None  # a SimPy event a session waits on, triggered when it ends
        self.input_len = len(input_tokens)
        self.output_len = len(output_tokens)
        # The KV cache hashes the whole sequence (prompt, then output) block by block; the
        # token ids are dropped once hashed so a long run holds only hashes.
        self.tokens: np.ndarray | None = np.concatenate((input_tokens, output_tokens))
        self.hashes: list[int] | None = None  # set by hash_blocks
        self.state = State.ARRIVING
        self.instance = -1
        self.priority = 0.0
        # progress: tokens whose KV is computed. emitted: output tokens streamed so far.
        self.progress = 0
        self.emitted = 0
        self.prefill_target = self.input_len
        self.max_tokens = max(self.output_len, 1)
        self.blocks: list[int] = []
        self.cached_tokens = -1
        self.chunk = 0  # prefill tokens scheduled this step, or -1 for one decode token
        self.seq = 0  # admission order into the running batch (the batch is sorted by it)
        self.lazy_base = -1  # >= 0: steady decoder advanced implicitly from this step on
        self.preemptions = 0
        self.queued_at = -1
        self.first_scheduled = -1
        self.first_token_at = -1
        self.first_token_step = -1
        self.last_emit_step = -1
        self.completed_at = -1
        self.reject_reason = ""
        # (previous step, step) for every token that did not follow its predecessor in the
        # very next step (preemption, budget): the inter-token gaps the step rows cannot show.
        self.gaps: list[tuple[int, int]] | None = None

    def hash_blocks(self, block_size: int, keep_tokens: bool = False) -> None:
        """Compute the block-hash chain once, on first use, then forget the token ids (unless
        they are wanted, e.g. to export the workload)."""
        if self.hashes is None and self.tokens is not None:
            self.hashes = block_hashes(self.tokens, block_size)
            if not keep_tokens:
                self.tokens = None

    def __repr__(self) -> str:
        return (
            f"Request({self.name}, arrival={self.arrival}, in={self.input_len}, "
            f"out={self.output_len}, {self.state}, progress={self.progress})"
        )
