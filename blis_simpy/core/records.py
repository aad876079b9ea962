"""The Recorder: what the processes of a run write down, append-only, while it runs.

Every result of a run (summary, tables, metrics, anomalies, fitness) is computed from these
records after the run, never from live simulation objects. Processes append plain tuples; the
recorder turns them into columns once, in `close()`. Optional channels (decision records, the
ordered lifecycle event log) are `None` when off, so a run that does not ask for them pays one
`is None` test where they would be written.

Channels:
* requests: every request that arrived, in arrival order (the entity carries its lifecycle
  timestamps; `close()` reads them into columns when they are final);
* steps: one row per engine step and instance (`STEP_FIELDS`), its fields appended one after
  another to a flat list of ints, packed into one growing int64 array a chunk at a time (a
  long run has millions);
* preemptions: (time, instance id, request id, tokens computed and discarded) per occurrence
  (seed 001 §10's `PreemptionRecord`); rejections: (time, instance id, request id);
* anomalies detected while running (`Anomaly`: an instant or an episode);
* decisions (optional, trace level `decisions` or `full`): one row per admission, priority and
  routing decision, routing rows with every candidate;
* events (optional, trace level `full`): (time, kind, subject, where) in the order they
  happened, for tracing and for tests that check same-time ordering.

A streaming run (`Recorder.stream`) hands its requests and step rows to a `RecordSink` as it
goes instead of keeping them: the step rows every STEP_CHUNK steps, when the instance hands
them over; the requests, oldest first, between slices of the event loop (`sweep`), once they
have finished for good. What is left is handed over when the run closes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain, repeat
from operator import attrgetter
from typing import TYPE_CHECKING, Protocol

import numpy as np

from blis_simpy.core.arguments import flag
from blis_simpy.core.request import Request, State
from blis_simpy.core.snapshot import InstanceSnapshot, Role
from blis_simpy.core.tier_records import TierLog, TierRecord

if TYPE_CHECKING:
    from librt.vecs import vec
    from mypy_extensions import i64

# Anomaly types recorded while running or judged from the records at the end (seed D.8).
ANOMALY_TYPES = (
    "priority_inversion",  # admitted while a higher-priority request waits in the same queue
    "hol_blocking",  # ... and that request had queued before it: one episode per passed-over one
    "kv_hol_blocking",  # the head does not fit in free KV while one behind would: an episode
    "slo_class_inversion",  # admitted while a request of a more urgent SLO class waits
    "slo_violation",
    "preemption_storm",
    "rejection_burst",
    "shadow_divergence",  # the shadow KV expected a prefix hit and there was none, or vice versa
    "kv_thrashing",  # reloads of blocks the GPU evicted moments before, in a burst
    "scale_oscillation",  # a config scaled up then down (or down then up) within the window
    "pd_backpressure",  # a prefill instance held its bound of unmoved KV and stopped admitting
    "instance_failure",  # an instance crashed: from the crash to its repair (or the run's end)
)

STEP_FIELDS = ("start", "duration", "new_tokens", "decodes", "batch_size", "kv_used",
               "queue_depth")
DURATION = STEP_FIELDS.index("duration")
# Step rows are packed into an array every STEP_CHUNK steps: ~60 B a row instead of ~140-200 B
# of int objects, which also fragment the heap (freed at the end, their memory is not
# returned to the system when long-lived objects were allocated among them). Before that the
# fields go into one flat list, not a tuple per row: the packing reads the list's ints in
# order, while a tuple per row is one more object to make, to reach (long out of the cache
# after thousands of steps) and to free. A smaller chunk stays closer to the cache too (the
# 1.13M-step Azure replay runs ~10 % faster with 1,024 rows than with 4,096). The rows go
# into one array that doubles when full, not an array per chunk: thousands of small arrays
# would be freed into the heap at the end and stay there, and would be joined by a copy.
STEP_CHUNK = 1024
STEP_VALUES = STEP_CHUNK * len(STEP_FIELDS)  # the flat list's length when a chunk is full

# P/D handoffs, one row per request whose prefill finished on a prefill instance: where its KV
# went, when it was asked for, when decode KV room was reserved, when the link started moving
# it (-1 where that did not happen), when the handoff ended (transfer done, or dropped or
# abandoned), its size, and how it ended (transferred | dropped | abandoned) with the reason.
TRANSFER_FIELDS = ("request", "config", "prefill", "decode", "asked", "reserved", "start", "end",
                   "blocks", "bytes", "outcome", "reason")
TransferRow = tuple[str, str, str, str, int, int, int, int, int, int, str, str]
# Faults (faults:, or a process interrupting an instance): when, what (crash | repair |
# lost | retry | failed | slow | normal), the instance, the request ("" for an instance's own
# event), and a detail (the failure's reason, the tokens a lost request had computed, ...).
FAULT_FIELDS = ("time", "event", "instance", "request", "detail")
FaultRow = tuple[int, str, str, str, str]


@dataclass(frozen=True, slots=True)
class Anomaly:
    """One occurrence, or one episode from `time` to `end` (head-of-line blocking lasts while
    the blocked request waits; storms and bursts span their first to last event)."""

    type: str
    time: int  # µs, when it happened or began
    instance: str  # "" when cluster-wide
    requests: tuple[str, ...]
    detail: str
    end: int  # µs, when it ended; `time` for an instant
    severity: float = 0.0  # 0 (negligible) to 1 (worst): per type, metrics/trace/severity.py


@dataclass(frozen=True, slots=True)
class Candidate:
    """One instance considered by a routing decision: its score, for composite policies the
    weighted contribution of each scorer, the snapshot the policy read of it (None when it read
    none), and two router-side estimates the counterfactual analysis uses: the instance's
    estimated wait and the prompt tokens the shadow KV expected cached there."""

    instance: str
    score: float
    breakdown: tuple[tuple[str, float], ...] = ()
    seen: InstanceSnapshot | None = None
    wait_ms: float = 0.0
    expected_hit_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Decision:
    """One policy call at the gateway. Routing rows carry the request's context and every
    routable instance as a candidate (best score first; ties in fleet order)."""

    time: int
    request: str
    stage: str  # admission | priority | routing
    outcome: str  # admit | reject | delay (admission); score (priority); route (routing)
    instance: str
    reason: str
    candidates: tuple[Candidate, ...] = ()
    priority: float = 0.0  # the priority stage's value; routing: the priority routed with
    tenant: str = ""
    slo_class: str = ""
    input_tokens: int = 0
    prefix_hash: str = ""  # hex hash of the prompt's first KV block ("" under one block)
    filtered: tuple[str, ...] = ()  # instances ruled out: not routable, or by the policy


# A streaming run hands finished requests over this many at a time (the table writers'
# chunk), oldest first; when this many times more are waiting behind one that has not
# finished, the finished ones among them are handed over out of arrival order (a request
# that never finishes must not hold every later one in memory).
STREAM_CHUNK = 65_536
PENDING_LIMIT = 4 * STREAM_CHUNK


class RecordSink(Protocol):
    """Where a streaming run's records go as it runs (metrics/stream.py)."""

    def steps(self, log: InstanceLog, rows: np.ndarray) -> None:
        """The instance's next step rows (steps x STEP_FIELDS int64, a copy to keep)."""

    def requests(self, chunk: RequestColumns, floors: dict[int, int]) -> None:
        """Requests that have finished for good (the last chunk: every request left).
        `floors`: per instance position, the earliest first-token step of a request not yet
        handed over: that step and later ones may still be read and gain token gaps, the
        steps before it are final (absent: every step handed over is)."""


class InstanceLog:
    """One instance's records: its step rows and, when the run ends, its final counters."""

    __slots__ = ("id", "kv_failures", "kv_hits", "kv_misses", "kv_total", "last", "last_event",
                 "packed", "position", "role", "sink", "table", "tiers")

    def __init__(self, instance_id: str, role: Role, kv_total: int, position: int = 0) -> None:
        self.id = instance_id
        self.role = role
        self.kv_total = kv_total
        self.position = position  # in the recorder's instances (RequestColumns.instance_index)
        self.sink: RecordSink | None = None  # a streaming run's: rows go there, not to `table`
        self.last = 0  # the newest handed-over step's duration
        # The rows handed over so far: the first `packed` rows of `table` (the rest is room
        # to grow). The instance keeps its newest rows until it has a chunk of them.
        self.table = np.empty((0, len(STEP_FIELDS)), dtype=np.int64)
        self.packed = 0
        self.kv_hits = 0
        self.kv_misses = 0
        self.kv_failures = 0
        self.last_event = 0
        self.tiers: TierLog | None = None  # the KV tiers below the GPU, when configured

    def pack(self, values: vec[i64]) -> None:
        """Append the rows whose fields are `values`, one after another (the instance hands
        its newest rows over every STEP_CHUNK rows and when the run ends): read as int64
        straight from the vector's memory, no Python int per field."""
        flat = np.frombuffer(memoryview(values), dtype=np.int64)
        count = len(flat) // len(STEP_FIELDS)
        if count == 0:
            return
        self.last = int(flat[-len(STEP_FIELDS) + DURATION])
        if self.sink is not None:
            self.packed += count
            self.sink.steps(self, flat.reshape(count, len(STEP_FIELDS)).copy())
            return
        start, end = self.packed, self.packed + count
        if end > len(self.table):
            grown = np.empty((max(2 * len(self.table), end, STEP_CHUNK), len(STEP_FIELDS)),
                             dtype=np.int64)
            grown[:start] = self.table[:start]
            self.table = grown
        self.table[start:end] = flat.reshape(count, len(STEP_FIELDS))
        self.packed = end

    def rows(self) -> np.ndarray:
        """Every step row handed over, in order, as one (steps x fields) int64 array (a
        view); none when they went to a sink."""
        return self.table[:0] if self.sink is not None else self.table[:self.packed]

    def last_duration(self) -> int:
        """The newest handed-over step's duration (0 before the first)."""
        return self.last

    def free(self) -> None:
        """Drop the rows (the records hold them as columns now)."""
        self.table = self.table[:0].copy()
        self.packed = 0

    def close(self, kv_hits: int, kv_misses: int, kv_failures: int, last_event: int) -> None:
        self.kv_hits, self.kv_misses = kv_hits, kv_misses
        self.kv_failures, self.last_event = kv_failures, last_event


class Recorder:
    """Append-only records of one run."""

    def __init__(self, *, decisions: bool = False, events: bool = False) -> None:
        decisions, events = flag("decisions", decisions), flag("events", events)
        # Every request that arrived, in arrival order; a streaming run's, those not yet
        # handed to its sink (`handed` of them were).
        self.requests: list[Request] = []
        self.handed = 0
        self.sink: RecordSink | None = None
        self.settled = 0  # how many of the oldest requests have finished for good
        self.instances: list[InstanceLog] = []
        self.anomalies: list[Anomaly] = []
        self.preemptions: list[tuple[int, str, str, int]] = []
        self.rejections: list[tuple[int, str, str]] = []
        self.decisions: list[Decision] | None = [] if decisions else None
        self.events: list[tuple[int, str, str, str]] | None = [] if events else None
        self.transfers: list[TransferRow] = []  # P/D handoffs (TRANSFER_FIELDS)
        self.faults: list[FaultRow] = []  # failures and what they did (FAULT_FIELDS)
        # LoRA (engine.lora): one row per adapter load (engine/adapters.py: AdapterLoad), and
        # per adapter the admissions that found it resident
        self.adapter_loads: list[tuple[int, str, str, str]] = []
        self.adapter_hits: dict[str, int] = {}
        # Speculative decoding (engine.speculative): tokens drafted, accepted, and the
        # requests' verify steps, over every instance
        self.speculation: list[int] = [0, 0, 0]
        self.speculation_tenants: dict[str, list[int]] = {}  # the same by tenant id

    def instance(self, instance_id: str, role: Role, kv_total: int) -> InstanceLog:
        log = InstanceLog(instance_id, role, kv_total, len(self.instances))
        log.sink = self.sink
        self.instances.append(log)
        return log

    @property
    def arrived(self) -> int:
        """Requests that arrived so far (handed to a sink or not)."""
        return self.handed + len(self.requests)

    def stream(self, sink: RecordSink) -> None:
        """Hand requests and step rows to `sink` as the run goes (before it starts)."""
        self.sink = sink
        for log in self.instances:
            log.sink = sink

    def sweep(self, now: int) -> None:
        """A streaming run, between slices of its event loop: hand the requests that have
        finished for good to the sink, oldest first, a chunk at a time."""
        pending = self.requests
        if self.sink is None or len(pending) < STREAM_CHUNK:
            return
        packed = [log.packed for log in self.instances]
        index = {log.id: log.position for log in self.instances}
        done = self.settled  # a finished request stays finished: scan on from there
        while done < len(pending) and final(pending[done], now, packed, index):
            done += 1
        self.settled = done
        if done >= STREAM_CHUNK:
            chunk, self.requests = pending[:done], pending[done:]
        elif len(pending) >= PENDING_LIMIT:  # an old request holds up the rest: pass it
            keep = [final(req, now, packed, index) for req in pending]
            chunk = [req for req, ok in zip(pending, keep, strict=True) if ok]
            self.requests = [req for req, ok in zip(pending, keep, strict=True) if not ok]
        else:
            return
        self.settled = 0
        self.hand(chunk, index, floors(self.requests, index))

    def hand(self, chunk: list[Request], index: dict[str, int], floors: dict[int, int]
             ) -> None:
        assert self.sink is not None
        self.handed += len(chunk)
        self.sink.requests(RequestColumns.of(chunk, index), floors)

    def anomaly(self, kind: str, time: int, instance: str, requests: Sequence[str],
                detail: str = "", end: int | None = None) -> None:
        """An anomaly at `time`, or an episode from `time` to `end` (its severity is judged
        from the records when the run ends)."""
        if kind not in ANOMALY_TYPES:
            raise ValueError(f"unknown anomaly type {kind!r}; valid: {', '.join(ANOMALY_TYPES)}")
        self.anomalies.append(Anomaly(kind, time, instance, tuple(requests), detail,
                                      time if end is None else end))

    def event(self, time: int, kind: str, subject: str, where: str = "") -> None:
        if self.events is not None:
            self.events.append((time, kind, subject, where))

    def close(self, ended_at: int) -> Records:
        """The records as columns; call once, after the last event ran. The rows they were
        made from are released (a long run's largest objects)."""
        index = {log.id: i for i, log in enumerate(self.instances)}
        if self.sink is not None:  # streaming: the rest go to the sink, none stay here
            self.hand(self.requests, index, {})
            self.requests = []
        requests = RequestColumns.of(self.requests, index)
        self.requests = []
        instances = []
        for log in self.instances:
            instances.append(InstanceRecord.of(log))
            log.free()
        return Records(
            requests=requests,
            instances=tuple(instances),
            anomalies=tuple(self.anomalies),
            preemptions=tuple(self.preemptions),
            rejections=tuple(self.rejections),
            decisions=None if self.decisions is None else tuple(self.decisions),
            events=None if self.events is None else tuple(self.events),
            ended_at=ended_at,
            transfers=tuple(self.transfers),
            faults=tuple(self.faults),
            adapter_loads=tuple(self.adapter_loads),
            adapter_hits=dict(sorted(self.adapter_hits.items())),
            speculation=(self.speculation[0], self.speculation[1], self.speculation[2]),
            speculation_tenants={name: (c[0], c[1], c[2]) for name, c
                                 in sorted(self.speculation_tenants.items())},
        )


def final(req: Request, now: int, packed: list[int], index: dict[str, int]) -> bool:
    """Whether nothing about the request will change any more: rejected, timed out, failed
    (lost with a failed instance, its retries used up), or completed with its last token
    delivered (until then its client may still time out) and the step that emitted it handed
    over (its gaps and duration are read from the rows)."""
    state = req.state
    if state is State.COMPLETED:
        return req.completed_at <= now and req.last_emit_step < packed[index[req.instance]]
    return state is State.REJECTED or state is State.TIMED_OUT or state is State.FAILED


def floors(pending: Sequence[Request], index: dict[str, int]) -> dict[int, int]:
    """Per instance, the earliest first-token step of the requests still pending there: a
    request adds token gaps only to steps after its first token's."""
    out: dict[int, int] = {}
    for req in pending:
        step = req.first_token_step
        if step >= 0 and req.instance:
            where = index[req.instance]
            if step < out.get(where, step + 1):
                out[where] = step
    return out


@dataclass(frozen=True, slots=True)
class InstanceRecord:
    """One instance's steps as arrays (indexed by step number) and its final counters."""

    id: str
    role: Role
    kv_total: int
    kv_hits: int
    kv_misses: int
    kv_failures: int  # the reference's allocation at completion found no block (compat)
    last_event: int
    start: np.ndarray
    duration: np.ndarray
    new_tokens: np.ndarray
    decodes: np.ndarray
    batch_size: np.ndarray
    kv_used: np.ndarray
    queue_depth: np.ndarray
    tiers: TierRecord | None = field(default=None, kw_only=True)  # KV tiers, when configured

    @property
    def end(self) -> np.ndarray:
        return self.start + self.duration

    @classmethod
    def of(cls, log: InstanceLog) -> InstanceRecord:
        rows = log.rows()
        return cls(log.id, log.role, log.kv_total, log.kv_hits, log.kv_misses, log.kv_failures,
                   log.last_event,
                   *(rows[:, i].copy() for i in range(len(STEP_FIELDS))),
                   tiers=None if log.tiers is None else TierRecord.of(log.tiers))


def rows_matrix(rows: Iterable[tuple[int, ...]], count: int, width: int) -> np.ndarray:
    """`count` rows of `width` ints as an int64 matrix, read as one flat stream (faster than
    `np.array` on a list of tuples, which first works out the shape)."""
    flat = np.fromiter(chain.from_iterable(rows), dtype=np.int64, count=count * width)
    return flat.reshape(count, width)


INT_FIELDS = ("index", "arrival", "admitted_at", "routed_at", "queued_at", "first_scheduled",
              "first_token_at", "completed_at", "timed_out_at", "input_len", "output_len",
              "cached_tokens", "emitted", "preemptions", "turn", "first_token_step",
              "last_emit_step", "trace_time")  # the requests' integer fields, read into columns


def int_columns(requests: Sequence[Request]) -> dict[str, np.ndarray]:
    """Every integer field of the requests as its own int64 array, read in one pass (one
    tuple per request, then one matrix: several times faster than a pass per field)."""
    read = attrgetter(*INT_FIELDS)
    matrix = rows_matrix(map(read, requests), len(requests), len(INT_FIELDS))
    return {name: matrix[:, i].copy() for i, name in enumerate(INT_FIELDS)}


@dataclass(frozen=True, slots=True)
class RequestColumns:
    """Every request that arrived, in arrival order, one array or list per field. Times are µs
    and -1 where the event did not happen."""

    id: list[str]
    index: np.ndarray  # the request's number in its workload (the reference names it by it)
    arrival: np.ndarray
    admitted_at: np.ndarray
    routed_at: np.ndarray
    queued_at: np.ndarray
    first_scheduled: np.ndarray
    first_token_at: np.ndarray
    completed_at: np.ndarray
    timed_out_at: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray
    cached_tokens: np.ndarray  # -1 where never scheduled
    emitted: np.ndarray
    preemptions: np.ndarray
    instance: list[str]  # "" where never routed
    instance_index: np.ndarray  # position in Records.instances, -1 where never routed
    tenant: list[str]
    slo_class: list[str]
    model: list[str]
    request_type: list[str]
    session: list[str]
    turn: np.ndarray
    state: list[str]
    state_array: np.ndarray  # the same as a numpy string array, for masks
    reject_code: list[str]
    reject_reason: list[str]
    first_token_step: np.ndarray  # step (of its instance) that emitted the first token
    last_emit_step: np.ndarray
    trace_time: np.ndarray  # a published trace row's own timestamp (ns), else -1
    # Inter-token gaps that span several steps (after a preemption or a budget skip):
    # (request position, step of the token before, step of the token after).
    gap_request: np.ndarray
    gap_before: np.ndarray
    gap_after: np.ndarray
    adapter: list[str] = field(default_factory=list)  # its LoRA adapter, "" for the base model

    def __len__(self) -> int:
        return len(self.id)

    @classmethod
    def of(cls, requests: Sequence[Request], index: dict[str, int]) -> RequestColumns:
        gaps = [(i, before, after) for i, r in enumerate(requests) if r.gaps
                for before, after in r.gaps]
        gap_cols = np.array(gaps, dtype=np.int64).reshape(-1, 3)
        state = [str(r.state) for r in requests]
        instance = [r.instance for r in requests]
        return cls(
            id=[r.name for r in requests],
            **int_columns(requests),
            instance=instance,
            instance_index=np.fromiter(map(index.get, instance, repeat(-1, len(instance))),
                                       dtype=np.int64, count=len(instance)),
            tenant=[r.tenant_id for r in requests],
            slo_class=[r.slo_class for r in requests],
            model=[r.model for r in requests],
            request_type=[r.request_type for r in requests],
            session=[r.session_id for r in requests],
            state=state,
            state_array=np.array(state, dtype=str),
            reject_code=[r.reject_code for r in requests],
            reject_reason=[r.reject_reason for r in requests],
            gap_request=gap_cols[:, 0].copy(),
            gap_before=gap_cols[:, 1].copy(),
            gap_after=gap_cols[:, 2].copy(),
            adapter=[r.adapter for r in requests],
        )

    def in_state(self, state: State) -> np.ndarray:
        """Boolean mask of the requests whose final state is `state`."""
        return self.state_array == str(state)


@dataclass(frozen=True, slots=True)
class Records:
    """A finished run's records, as columns: all that metrics and tables read."""

    requests: RequestColumns
    instances: tuple[InstanceRecord, ...]
    anomalies: tuple[Anomaly, ...]
    preemptions: tuple[tuple[int, str, str, int], ...]
    rejections: tuple[tuple[int, str, str], ...]
    decisions: tuple[Decision, ...] | None
    events: tuple[tuple[int, str, str, str], ...] | None
    ended_at: int  # time of the last event that ran, capped at the horizon
    transfers: tuple[TransferRow, ...] = ()  # P/D handoffs (TRANSFER_FIELDS)
    faults: tuple[FaultRow, ...] = ()  # failures and what they did (FAULT_FIELDS)
    # LoRA: adapter loads (time, instance, adapter, evicted) and admissions that hit, by adapter
    adapter_loads: tuple[tuple[int, str, str, str], ...] = ()
    adapter_hits: dict[str, int] = field(default_factory=dict)
    # speculative decoding: tokens drafted, accepted, and verify steps (one per request step)
    speculation: tuple[int, int, int] = (0, 0, 0)
    speculation_tenants: dict[str, tuple[int, int, int]] = field(default_factory=dict)
