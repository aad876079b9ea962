"""A request: its identity, its token content, its progress through one instance, and the
read-only view that policies get of it (seed D.7: what a control point may observe).

The Request is the one mutable entity that moves through the processes; the engine and the
gateway write its lifecycle timestamps, and the recorder turns them into columns when the run
ends. Policies never see a Request, only a `RequestView`, which leaves out what a real serving
system cannot know in advance (the output length, the token ids).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

import numpy as np
from librt.vecs import vec
from mypy_extensions import i64

from blis_simpy.core.hashing import block_hashes, block_keys

NO_HINTS: Mapping[str, object] = MappingProxyType({})  # a request's hints when it has none
NO_KEYS: vec[i64] = vec[i64]()  # a request's block keys before they are made (never changed)


@dataclass(frozen=True, slots=True)
class RequestView:
    """What admission, priority, routing and scheduling policies may read of a request."""

    id: str
    arrival_us: int
    input_tokens: int
    tenant_id: str
    slo_class: str
    prefix_hashes: tuple[int, ...]  # chained hashes of the prompt's full KV blocks

    @property
    def adapter(self) -> str:
        """The LoRA adapter it names: "" (the base model); a LoraView's own."""
        return ""

    @property
    def priority_hints(self) -> Mapping[str, object]:
        """The hints of its priority decision (seed G.1's PriorityDecision.Hints), as of
        its last scoring: none; a HintedView's own."""
        return NO_HINTS


@dataclass(frozen=True, slots=True)
class LoraView(RequestView):
    """The view of a request that names a LoRA adapter. A subclass, not a field of every
    view: the dataclass `__init__` sets each field through `object.__setattr__` (~1,300
    instructions), paid twice per request by runs that name no adapter."""

    lora: str = ""

    @property
    def adapter(self) -> str:
        return self.lora


@dataclass(frozen=True, slots=True)
class HintedView(LoraView):
    """The view of a request whose priority policy gave hints (seed G.1: Route receives the
    whole PriorityDecision, and the scheduler reads its hints): made when the hints change,
    so views without hints cost what they did."""

    hints: Mapping[str, object] = field(default_factory=lambda: NO_HINTS)

    @property
    def priority_hints(self) -> Mapping[str, object]:
        return self.hints


def plain_view(name: str, arrival: int, input_len: int, tenant_id: str, slo_class: str,
               prefix_hashes: tuple[int, ...]) -> RequestView:
    """`RequestView(...)`, made as its dataclass `__init__` makes it (each field set through
    `object.__setattr__`, the class being frozen) but from compiled code: that `__init__` is
    interpreted, and a request makes two views (~8,700 instructions each)."""
    view = RequestView.__new__(RequestView)
    setattr_ = object.__setattr__
    setattr_(view, "id", name)
    setattr_(view, "arrival_us", arrival)
    setattr_(view, "input_tokens", input_len)
    setattr_(view, "tenant_id", tenant_id)
    setattr_(view, "slo_class", slo_class)
    setattr_(view, "prefix_hashes", prefix_hashes)
    return view


# What a request's view is until the gateway observes it at cluster arrival; no policy ever
# sees it.
UNOBSERVED = RequestView("", -1, 0, "", "", ())
NO_TOKENS = np.zeros(0, dtype=np.int64)  # what `clone` builds a copy from


class State(StrEnum):
    """Lifecycle: arriving -> queued -> running -> completed (preemption sends a running request
    back to queued); rejected at admission or on arrival at an instance; timed out from any
    unfinished state when its client's timeout passes; failed when an instance failed with it
    and it was not sent again (faults). Every request ends in exactly one terminal state
    (completed, rejected, timed_out, failed) or is reported unfinished at the horizon."""

    ARRIVING = "arriving"  # routed to an instance, inside its queueing delay
    QUEUED = "queued"
    RUNNING = "running"
    # P/D: prefilled, its KV on its way to (or waiting for room at) a decode instance, or
    # arrived there and waiting for a batch slot
    TRANSFERRING = "transferring"
    COMPLETED = "completed"
    REJECTED = "rejected"
    TIMED_OUT = "timed_out"  # its client gave up before the last token reached it
    FAILED = "failed"  # lost with a failed instance, its retries used up (or none allowed)


class RejectCode(StrEnum):
    """Why a request was rejected, as a stable code (the requests table's `reject_code`); the
    free text (a policy's own reason, the limits involved) is `reject_reason`."""

    ADMISSION = "admission"  # the admission policy said no
    # delayed MAX_ADMISSION_DELAYS times, or past the clock's limit (MAX_SIM_US)
    ADMISSION_DELAYS = "admission_delay_limit"
    MAX_MODEL_LEN = "exceeds_max_model_len"  # prompt + output over engine.max_model_len
    KV_CAPACITY = "exceeds_kv_capacity"  # prompt + output over the instance's whole KV pool
    # P/D: dropped at the handoff, its prefill done
    PD_HANDOFF_TIMEOUT = "pd_handoff_timeout"  # no decode KV room within the handoff timeout
    PD_DECODE_CAPACITY = "pd_exceeds_decode_kv"  # prompt + output over the decode KV pool
    # Gateway flow control (cluster.flow_control): refused by the queue after admission
    BAND_FULL = "gateway_band_full"  # its priority band held its capacity
    QUEUE_FULL = "gateway_queue_full"  # the whole queue held max_queue_depth
    QUEUE_SHED = "gateway_queue_shed"  # pushed out by a higher band's newcomer (shed-lowest)
    QUEUE_TTL = "gateway_queue_ttl"  # queued longer than queue_ttl_s


class Request:
    """One inference request. Plain slotted class: the step loop touches it every step."""

    __slots__ = (
        "adapter",
        "admitted_at",
        "arrival",
        "blocks",
        "cached_tokens",
        "chunk",
        "completed_at",
        "counted",
        "deadline",
        "decode_target",
        "done",
        "emitted",
        "first_scheduled",
        "first_token_at",
        "first_token_step",
        "gaps",
        "hashed",
        "hashes",
        "index",
        "input_len",
        "instance",
        "keys",
        "kv_phase",
        "last_emit_step",
        "lazy_base",
        "max_tokens",
        "model",
        "name",
        "output_len",
        "preemptions",
        "prefill_target",
        "priority",
        "progress",
        "queued_at",
        "reject_code",
        "reject_reason",
        "request_type",
        "retries",
        "routed_at",
        "seq",
        "session_id",
        "slo_class",
        "state",
        "tenant_id",
        "timed_out_at",
        "tokens",
        "trace_time",
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
        self.view = UNOBSERVED  # what policies see; made at cluster arrival
        self.request_type = "completion"
        self.adapter = ""  # the LoRA adapter it names ("": the base model)
        self.session_id = ""
        self.turn = 0
        # the model a trace row names; with several models, the one that serves it (set on
        # arrival); "" for a single model's workload request
        self.model = ""
        self.trace_time = -1  # a published trace row's own timestamp (ns), else -1
        self.done: Any = None  # a SimPy event a session waits on, triggered when it ends
        self.input_len = len(input_tokens)
        self.output_len = len(output_tokens)
        # The KV cache hashes the whole sequence (prompt, then output) block by block; the
        # token ids are dropped once hashed so a long run holds only hashes.
        self.tokens: np.ndarray | None = (
            None if input_tokens is NO_TOKENS else np.concatenate((input_tokens, output_tokens)))
        self.hashes: list[int] = []  # set by hash_blocks (then `tokens` is None)
        # `hashes` as the KV cache stores them (`block_keys`): empty, or made with `hashes`
        # (whoever sets `hashes` sets these too, or leaves them empty)
        self.keys = NO_KEYS
        self.hashed = False
        self.state = State.ARRIVING
        self.instance = ""  # id of the instance it was routed to
        self.counted = ""  # the instance the gateway counts it in flight at, if any
        self.retries = 0  # times the gateway sent it again after an instance failed with it
        self.priority = 0.0  # its hints, if any, are its view's (`hint`)
        # progress: tokens whose KV is computed. emitted: output tokens streamed so far.
        self.progress = 0
        self.emitted = 0
        self.prefill_target = self.input_len
        self.max_tokens = max(self.output_len, 1)
        self.blocks: list[int] = []
        # Decode tokens at positions p with (p - kv_phase) % block_size == 0 open a KV block
        # (always 0 natively; the reference's block layout can shift it: engine/kv/reference.py).
        self.kv_phase = 0
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
        self.deadline = -1  # when its client gives up (µs), -1 if it never does
        self.decode_target = ""  # P/D: the decode instance chosen at routing, if any
        self.timed_out_at = -1
        self.reject_code = ""  # a RejectCode when rejected
        self.reject_reason = ""
        # (previous step, step) for every token that did not follow its predecessor in the
        # very next step (preemption, budget): the inter-token gaps the step rows cannot show.
        self.gaps: list[tuple[int, int]] | None = None

    def hash_blocks(self, block_size: int, keep_tokens: bool = False) -> None:
        """Compute the block-hash chain once, on first use, then forget the token ids (unless
        they are wanted, e.g. to export the workload)."""
        if not self.hashed and self.tokens is not None:
            self.hashes = block_hashes(self.tokens, block_size)
            self.hashed = True
            if not keep_tokens:
                self.tokens = None

    def block_keys(self) -> vec[i64]:
        """Its block hashes as int64 bit patterns (the KV cache's keys: no int object per
        block): made in bulk where the hashes come from numpy (`workload/prehash.py`,
        `release.rebuilt`), else from `hashes` when first needed."""
        keys = self.keys
        if len(keys) != len(self.hashes):
            keys = self.keys = block_keys(self.hashes)
        return keys

    def clone(self) -> Request:
        """A fresh copy of a request that has not run (a prepared workload's, shared by many
        runs): its identity, content and block hashes (shared: never changed in place), none
        of a run's state."""
        twin = Request(self.index, self.arrival, NO_TOKENS, NO_TOKENS, self.tenant_id,
                       self.slo_class)
        twin.name = self.name
        twin.request_type = self.request_type
        twin.session_id = self.session_id
        twin.turn = self.turn
        twin.model = self.model
        twin.adapter = self.adapter
        twin.input_len = self.input_len
        twin.output_len = self.output_len
        twin.prefill_target = self.input_len
        twin.max_tokens = self.max_tokens
        twin.tokens = self.tokens
        twin.hashes = self.hashes
        twin.keys = self.keys
        twin.hashed = self.hashed
        return twin

    def observe(self, block_size: int, keep_tokens: bool = False) -> RequestView:
        """Make the view policies get: at cluster arrival, once its block hashes exist."""
        self.hash_blocks(block_size, keep_tokens)
        hashes = tuple(self.hashes[: self.input_len // block_size])
        if self.adapter:
            self.view = LoraView(self.name, self.arrival, self.input_len, self.tenant_id,
                                 self.slo_class, hashes, self.adapter)
        else:
            self.view = plain_view(self.name, self.arrival, self.input_len, self.tenant_id,
                                   self.slo_class, hashes)
        return self.view

    def forget_hashes(self) -> None:
        """The request finished: drop its block hashes and its view's copy of them (its KV
        blocks keep their own). About 2 KB a request that a long run would otherwise hold."""
        self.hashes = []
        self.keys = NO_KEYS
        view = self.view
        if view.prefix_hashes:  # `replace` would spend ~5 µs finding the fields
            if view.priority_hints:
                self.view = HintedView(view.id, view.arrival_us, view.input_tokens,
                                       view.tenant_id, view.slo_class, (), view.adapter,
                                       view.priority_hints)
            elif view.adapter:
                self.view = LoraView(view.id, view.arrival_us, view.input_tokens,
                                     view.tenant_id, view.slo_class, (), view.adapter)
            else:
                self.view = plain_view(view.id, view.arrival_us, view.input_tokens,
                                       view.tenant_id, view.slo_class, ())

    def hint(self, hints: Mapping[str, object]) -> None:
        """Its priority decision's hints (seed G.1), on its view from now on: routing and
        the scheduler read them there (`RequestView.priority_hints`). Unchanged hints keep
        the view (an aging policy rescores every step)."""
        view = self.view
        if hints == view.priority_hints:
            return
        self.view = HintedView(view.id, view.arrival_us, view.input_tokens, view.tenant_id,
                               view.slo_class, view.prefix_hashes, view.adapter, hints)

    def __repr__(self) -> str:
        return (
            f"Request({self.name}, arrival={self.arrival}, in={self.input_len}, "
            f"out={self.output_len}, {self.state}, progress={self.progress})"
        )
