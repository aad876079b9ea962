"""What one engine step does, with no clock of its own: the step logic of an instance.

A `Stepper` holds an engine replica's wait queue, running batch and KV cache, and forms and
applies one step at a time, at a time it is given (`step(now)`). It schedules every running
request a prefill chunk or one decode token while the token budget lasts (preempting by the
scheduler's rule when the KV cache is full), admits waiting requests from the head of the
queue while slots, budget and KV last, charges the step time from the latency model and
applies the step's progress. Requests in steady decode advance implicitly (`steady.py`): the
steady and decode-only paths touch only the requests with an event this step.

Nothing here knows about SimPy. What drives the steps is elsewhere: an instance's step loop,
one SimPy process (`instance.py: Instance.run`), or in compat mode the reference's event heap
(`reference_order.py`). Both call `step(now)`, which forms the batch, takes its KV blocks and
charges its time, and `end_step(t)`, which applies its progress: tokens, first tokens,
completions (their KV freed, the observer told). The step loop calls `end_step` when the step
ends, so what the step does is seen only from then on (seed D.5.2: an observer sees the
process's state as it is); compat mode calls it at once, as the reference applies a step's
progress at its start.

What the steps do is written to the recorder: one row per step, preemptions, rejections,
anomalies, and (when asked) ordered lifecycle events; the counters when the run ends.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any, Final, Protocol

from librt.vecs import append, vec
from mypy_extensions import i64, mypyc_attr

from blis_simpy.config.scenario import EngineConfig
from blis_simpy.core.records import DURATION, STEP_FIELDS, STEP_VALUES, InstanceLog, Recorder
from blis_simpy.core.request import RejectCode, Request, State
from blis_simpy.core.snapshot import Role
from blis_simpy.core.units import US_PER_MS
from blis_simpy.engine.adapters import AdapterSlots
from blis_simpy.engine.anomalies import HOL_LOOKAHEAD, QueueWatch
from blis_simpy.engine.kv.cache import KVCache
from blis_simpy.engine.kv.pool import BlockPool
from blis_simpy.engine.latency import BulkLatency, LatencyModel
from blis_simpy.engine.steady import SteadyDecoders
from blis_simpy.policies.priority import PriorityDecision, PriorityPolicy
from blis_simpy.policies.scheduler import BatchDecision, InstanceScheduler, SchedulerContext

DECODE = -1  # Request.chunk for a request scheduled for one decode token this step
RECENT = 32  # completions behind the recent TTFT / TPOT signals
# What a step under way leaves to its end (`Stepper.end_step`): nothing, its decode tokens only
# (a quiet step), its batch's progress (the exact path), or its explicit requests' and
# due implicit decoders' progress (the steady path).
# (Final: compiled, each is a constant, not a lookup in the module's globals.)
NO_STEP: Final = 0
QUIET: Final = 1
EXACT: Final = 2
STEADY: Final = 3
NOTHING_RAN: Final = -1  # the steady path's "no step" (None there means: take the exact one)
NO_REQUESTS: Final[list[Request]] = []  # never changed: an empty pending list, not allocated


class InstanceObserver(Protocol):
    """Who tracks requests routed to an instance (the gateway's counters)."""

    def queued(self, instance: str, req: Request) -> None: ...

    def finished(self, instance: str, req: Request) -> None: ...

    def handed_off(self, instance: str, req: Request) -> None: ...

    def lost(self, instance: str, req: Request) -> None:
        """The instance failed with the request in it (its KV gone with it)."""
        ...


def seq_of(req: Request) -> int:
    return req.seq


def sort_by_seq(reqs: list[Request]) -> None:
    """Sort requests by `seq` in place, as `reqs.sort(key=seq_of)` does (stable): by
    insertion, for the few requests these lists hold (a key function is a Python call per
    request; this reads each `seq` natively)."""
    n = len(reqs)
    if n > 16:
        reqs.sort(key=seq_of)
        return
    for i in range(1, n):
        req = reqs[i]
        seq = req.seq
        j = i - 1
        while j >= 0 and reqs[j].seq > seq:
            reqs[j + 1] = reqs[j]
            j -= 1
        reqs[j + 1] = req


def prefill_chunk(remaining: int, threshold: int, budget: int) -> int:
    """The prefill tokens a request may take in one step: what it has left, capped by the
    long-prefill threshold (0: no cap) and by the token budget left in the step."""
    n = remaining
    if 0 < threshold < n:
        n = threshold
    return budget if n > budget else n


@mypyc_attr(allow_interpreted_subclasses=True)
class Stepper:
    """An engine replica's queue, batch and KV cache, and the steps it takes."""

    def __init__(
        self,
        instance_id: str,
        latency: LatencyModel,
        engine: EngineConfig,
        pool: BlockPool,
        scheduler: InstanceScheduler,
        priority: PriorityPolicy,
        recorder: Recorder,
        *,
        class_ranks: dict[str, int],
        role: Role = Role.MONOLITHIC,
    ) -> None:
        self.id = instance_id
        self.role = role
        self.latency = latency
        if not isinstance(pool, KVCache):
            raise TypeError(f"{instance_id}: a KV pool subclasses engine.kv.cache.KVCache "
                            f"(as the tiered and reference pools do), got {type(pool).__name__}")
        # Held as the class every pool subclasses, so compiled, the step calls its methods and
        # reads its counters natively (through the protocol, each is a Python-level call).
        self.kv: KVCache = pool
        self.max_running = engine.max_running_requests
        self.token_budget = engine.max_scheduled_tokens
        self.threshold = engine.long_prefill_threshold
        self.capacity = pool.total * pool.block_size  # tokens the whole KV pool holds
        limit = engine.max_model_len
        self.max_len = self.capacity if limit is None else min(limit, self.capacity)
        self.scheduler = scheduler
        # Priorities of waiting requests are recomputed each step when they change with time
        # (the scheduler may order by them; the inversion checks compare them). Running
        # requests are rescored for the victim choice only when the scheduler uses them.
        self.aging = priority if priority.ages else None
        self.rescore_victims = priority if scheduler.uses_priority and priority.ages else None
        self.observer: InstanceObserver | None = None
        self.recorder = recorder
        self.log: InstanceLog = recorder.instance(instance_id, role, pool.total)
        self.events = recorder.events
        self.watch = QueueWatch(instance_id, recorder, class_ranks, not priority.ages)
        # Requests whose queueing delay is over, taken into the wait queue at the next step
        # start (an instance's inbox Store holds this very list).
        self.delivered: list[Request] = []
        self.wait_queue: deque[Request] = deque()
        self._chunks: dict[Request, int] | None = None  # make_batch's chunk sizes, meanwhile
        # make_batch's decision this step, with the queue its positions index, until admission
        self._decision: tuple[list[Request], BatchDecision] | None = None
        self.running: list[Request] = []  # the batch, in admission order (Request.seq)
        # Running requests handled one by one each step; the rest decode implicitly (steady.py)
        # when the step time depends only on token counts.
        self.explicit: list[Request] = []
        # (A scheduler with make_batch takes the exact path: its victims may be any running
        # request, implicit decoders included.)
        # Does a step mix prefill chunks with decodes (vLLM), or run prefill work alone while
        # every decode waits (SGLang's default, `enable_mixed_chunk` off)? A property of the
        # server family the latency model's coefficients describe (config/step_models.py);
        # the exact path only (a model that sets it reads the batch: per_request).
        self.mixes_prefill: bool = getattr(latency, "mixes_prefill", True)
        # A model that reads the batch takes the steady path only if it reads it through sums
        # (latency.BulkLatency: the physical model).
        bulk = not latency.per_request or getattr(latency, "bulk", False)
        self.steady = SteadyDecoders(pool.block_size) if bulk and self.mixes_prefill \
            and scheduler.make_batch is None else None
        self._seq = 0
        # One row per step (records.STEP_FIELDS), the newest ones' fields one after another
        # as native int64 (no Python int per field), handed to the log a chunk at a time.
        # Token gaps are derived from them at the end.
        self.steps: vec[i64] = vec[i64](capacity=STEP_VALUES)
        self.steps_taken = 0
        self.queued_tokens = 0  # prompt tokens waiting: the basis of the wait estimate
        self.recent_ttft: deque[int] = deque(maxlen=RECENT)
        self.recent_tpot: deque[float] = deque(maxlen=RECENT)
        self.now = 0  # the time of the step being formed (of the last one, between steps)
        self.last_event = 0
        self._preempted = False
        self._load_us = 0  # KV load time of the prefix hits admitted this step
        self.preemptions = self.admissions = self.completions = 0
        self.output_tokens = 0  # emitted so far: the autoscaler's token-throughput signal
        # The step under way, applied by `end_step`: its kind (NO_STEP when none), the
        # requests it advances (exact: its batch; steady: its explicit ones), the implicit
        # decoders with an event in it, its index, end and decode tokens.
        self.under_way = NO_STEP
        self.pending_batch: list[Request] = NO_REQUESTS
        self.pending_due: list[Request] = NO_REQUESTS
        self.pending_index = 0
        self.pending_end = 0
        self.pending_decodes = 0
        self.adapters: AdapterSlots | None = None  # LoRA adapter slots (engine.lora), if any
        # Speculative decoding (engine.speculative; `speculate`): tokens drafted per decode
        # step (0: off), the acceptance draws and counts (engine/speculative.py's
        # Speculation, loaded only with speculation on), the positions drafted this step.
        self.draft_tokens = 0
        self.speculation: Any = None
        self.drafted = 0

    # -- arrivals ---------------------------------------------------------------------------

    def refuses(self, req: Request, now: int) -> bool:
        """A request routed here that can never fit is rejected at once (True)."""
        req.instance = self.id
        self.last_event = now
        need = req.input_len + req.output_len
        if need <= self.max_len:
            return False
        req.state = State.REJECTED
        if need > self.capacity:
            req.reject_code = RejectCode.KV_CAPACITY
            req.reject_reason = (f"needs {need} tokens, the KV pool holds {self.capacity} "
                                 f"({self.kv.total} blocks of {self.kv.block_size})")
        else:
            req.reject_code = RejectCode.MAX_MODEL_LEN
            req.reject_reason = f"needs {need} tokens, max_model_len is {self.max_len}"
        self.recorder.rejections.append((now, self.id, req.name))
        if self.observer is not None:
            self.observer.finished(self.id, req)
        return True

    def join(self, req: Request, now: int) -> None:
        """The queueing delay is over: the request joins the wait queue (its accounting now,
        its place at the next step start)."""
        req.state = State.QUEUED
        req.queued_at = now
        self.queued_tokens += req.prefill_target
        self.last_event = now
        self.watch.queued(req)
        if self.events is not None:
            self.events.append((now, "queued", req.name, self.id))
        if self.observer is not None:
            self.observer.queued(self.id, req)
        self.deliver(req)

    def deliver(self, req: Request) -> None:
        """Hand a queued request to the step that starts next."""
        self.delivered.append(req)

    def abandon(self, req: Request) -> None:
        """Its client gave up: the request leaves wherever it is here (waiting, or in the
        batch, its KV blocks freed) and is reported finished. A step already under way keeps
        the time it was charged with the request in it."""
        self.leave(req)
        if self.observer is not None:
            self.observer.finished(self.id, req)

    def leave(self, req: Request) -> None:
        """Take the request out of the queue or the batch (its KV blocks freed)."""
        state = req.state
        if state is State.QUEUED:
            if req in self.delivered:
                self.delivered.remove(req)
            else:
                self.wait_queue.remove(req)
            self.queued_tokens -= req.prefill_target
        elif state is State.RUNNING:
            if self.under_way >= EXACT:
                self._leave_step(req)
            elif req.lazy_base >= 0:  # an implicit decoder: write every decoder's state back
                self._materialize(self.step_index())
            self.kv.release(req)
            self.running.remove(req)
            if req in self.explicit:
                self.explicit.remove(req)
            if self.adapters is not None and req.adapter:
                self.adapters.release(req.adapter)

    @property
    def queue_depth(self) -> int:
        """Requests waiting: in the wait queue, or delivered until the next step start."""
        return len(self.wait_queue) + len(self.delivered)

    def idle(self) -> bool:
        """Nothing to step: nothing runs, waits or has been delivered."""
        return not self.running and not self.wait_queue and not self.delivered

    # -- the steps ----------------------------------------------------------------------------

    def step_index(self) -> int:
        """The number of the next step (of the steps so far)."""
        return self.steps_taken

    def _record(self, start: int, duration: int, new_tokens: int, decodes: int, batch: int,
                kv_used: int, queue_depth: int) -> None:
        """One step's row (records.STEP_FIELDS)."""
        steps = self.steps
        steps = append(steps, start)
        steps = append(steps, duration)
        steps = append(steps, new_tokens)
        steps = append(steps, decodes)
        steps = append(steps, batch)
        steps = append(steps, kv_used)
        steps = append(steps, queue_depth)
        self.steps_taken += 1
        self.pending_decodes = decodes
        if len(steps) == STEP_VALUES:
            self.log.pack(steps)
            steps = vec[i64](capacity=STEP_VALUES)
        self.steps = steps

    def step(self, now: int) -> int | None:
        """Form a batch at `now`, charge its time and apply its progress; returns its duration
        (µs), None if nothing ran."""
        self.now = now
        self.last_event = now
        steady = self.steady
        if (steady is not None and not self.explicit and not self.wait_queue
                and not self.delivered and self.events is None
                and self.watch.kv_head is None and len(self.running) <= self.token_budget):
            due = steady.peek(self.step_index())
            duration = self._decode_step(now, due) if due else self._quiet_step(now)
            if duration is not None:
                return duration
        self._preempted = False
        self._load_us = 0
        index = self.step_index()
        queue = self.wait_queue
        arrived = self.delivered
        if arrived:
            if self.scheduler.on_request_arrival is not None:  # seed G.1's hook
                self._told(arrived, now)
            queue.extend(arrived)
            arrived.clear()
        if self.events is not None:
            self.events.append((now, "step", self.id, ""))
        if self.aging is not None:
            self._rescore(queue, now, self.aging)
        key = self.scheduler.order_key
        if key is not None and len(queue) > 1:
            self.wait_queue = deque(sorted(queue, key=lambda r: key(r.view, r.priority)))
        if self.steady is not None:
            duration = self._steady_step(now, index)
            if duration is not None:
                return None if duration == NOTHING_RAN else duration
            self._materialize(index)
        return self._exact_step(now, index)

    # Decode-only steps: nothing waits and every running request decodes one token implicitly
    # (steady.py). They are the steady step with the prefill, budget and admission branches
    # known empty; most steps of a lightly loaded instance are these.

    def _quiet_step(self, now: int) -> int:
        """No decoder opens or fills a KV block or finishes."""
        decodes = len(self.running)
        duration = self._implicit_time(0, decodes, NO_REQUESTS, self.step_index(), 0)
        self._record(now, duration, 0, decodes, decodes, self.kv.used, 0)
        self.under_way = QUIET
        return duration

    def _decode_step(self, now: int, due: list[Request]) -> int | None:
        """Some decoders open or fill a block or finish; None (with no side effects) when the
        blocks they open are not free (the exact path preempts)."""
        kv, index = self.kv, self.step_index()
        touched, blocks = self._block_events(due, index)
        if blocks > kv.free_blocks:
            return None
        if touched:
            self._allocate_in_order([], touched, index)
        decodes = len(self.running)
        duration = self._implicit_time(0, decodes, NO_REQUESTS, index, 0)
        self._record(now, duration, 0, decodes, decodes, kv.used, 0)
        self._pend(STEADY, NO_REQUESTS, due, index, now + duration)
        return duration

    @staticmethod
    def _rescore(requests: Iterable[Request], now: int, policy: PriorityPolicy) -> None:
        """Current priorities under an aging policy."""
        compute = policy.compute
        for req in requests:
            scored = compute(req.view, None, now)
            if isinstance(scored, PriorityDecision):  # a score with hints (seed G.1)
                req.priority = scored.score
                req.hint(scored.hints)
            else:
                req.priority = scored

    def _exact_step(self, now: int, index: int) -> int | None:
        """The step, request by request in batch order: budget, KV and preemption exact."""
        running = self.running
        if not self.mixes_prefill and self.scheduler.make_batch is None:
            batch, new_tokens, decodes = self._prefill_or_decode(running)
            if not batch:
                self.explicit = list(running)
                return None
        else:
            scheduled, new_tokens, decodes, budget = self._schedule_running(running)
            if self.scheduler.make_batch is not None and self.wait_queue \
                    and not self._preempted:
                scheduled, new_tokens, decodes, budget = self._make_batch(
                    scheduled, new_tokens, decodes, budget)
            kept = len(running)
            admitted, admitted_tokens = self._admit_waiting(running, budget)
            if scheduled == 0 and admitted == 0:
                self.explicit = list(self.running)
                return None
            batch = running[:scheduled] + running[kept:] if scheduled < kept else running
            new_tokens += admitted_tokens
        duration = self.latency.step_time(new_tokens + self.drafted, decodes, batch,
                                          self._load_us)
        self._record(now, duration, new_tokens, decodes, len(batch), self.kv.used,
                     len(self.wait_queue))
        self._pend(EXACT, batch, NO_REQUESTS, index, now + duration)
        return duration

    def _steady_step(self, now: int, index: int) -> int | None:
        """The same step when every running request fits the budget (the last one's prefill
        chunk cut to what is left, as the exact path does) and the KV cache: only explicit
        requests and implicit decoders with an event this step are touched. None
        (with no side effects) when the step needs the exact path; NOTHING_RAN when nothing
        runs and nothing can be admitted (P/D: KV held for transfers), as the exact path."""
        running, explicit, steady, kv = self.running, self.explicit, self.steady, self.kv
        assert steady is not None
        block_size, threshold = kv.block_size, self.threshold
        demand = len(running) - len(explicit)  # implicit decoders: one token each
        blocks = new_tokens = 0
        for req in explicit:
            n = req.prefill_target - req.progress
            if n > 0:
                n = prefill_chunk(n, threshold, n)
                req.chunk = n
                new_tokens += n
                blocks += kv.prefill_blocks(req, req.progress, n)
            else:
                n = 1
                req.chunk = DECODE
                if (req.progress - req.kv_phase) % block_size == 0:
                    blocks += 1
            demand += n
        overrun = demand - self.token_budget
        if overrun > 0:
            # The exact path gives the batch's last request what the budget has left: when
            # that is a prefill with more than the overrun, only its chunk shrinks.
            last = running[-1]
            if last.lazy_base >= 0 or last.chunk == DECODE or last.chunk <= overrun:
                return None
            progress = last.progress
            blocks -= kv.prefill_blocks(last, progress, last.chunk)
            last.chunk -= overrun
            blocks += kv.prefill_blocks(last, progress, last.chunk)
            new_tokens -= overrun
            demand -= overrun
        due = steady.peek(index)
        touched, opened = self._block_events(due, index)
        blocks += opened
        if blocks > kv.free_blocks:
            return None
        self._allocate_in_order(explicit, touched, index)
        admitted, admitted_tokens = self._admit_waiting(running, self.token_budget - demand)
        if not running:  # nothing ran and nothing could be admitted: no step, as exactly
            return NOTHING_RAN
        new_tokens += admitted_tokens
        decodes = demand - (new_tokens - admitted_tokens)
        batch = explicit + running[len(running) - admitted:] if admitted else explicit
        duration = self._implicit_time(new_tokens, decodes, batch, index, self._load_us)
        self._record(now, duration, new_tokens, decodes, len(running), kv.used,
                     len(self.wait_queue))
        self._pend(STEADY, batch, due, index, now + duration)
        return duration

    def _implicit_time(self, new_tokens: int, decodes: int, batch: list[Request], index: int,
                       extra_us: int) -> int:
        """A steady or decode-only step's duration: a model that reads only token counts gets
        those; one that reads the batch gets its explicit requests (`batch`, their chunks set)
        and the implicit decoders in bulk, as of step `index`."""
        latency = self.latency
        if not latency.per_request:
            return latency.step_time(new_tokens, decodes, (), extra_us)
        steady = self.steady
        assert steady is not None
        bulk: BulkLatency = latency  # type: ignore[assignment]  # (`bulk`: see __init__)
        return bulk.bulk_step_time(batch, steady.count, steady.context(index), extra_us)

    def _pend(self, kind: int, batch: list[Request], due: list[Request], index: int,
              end: int) -> None:
        """Leave the step's progress to its end."""
        self.under_way = kind
        self.pending_batch = batch
        self.pending_due = due
        self.pending_index = index
        self.pending_end = end

    def end_step(self, now: int) -> None:
        """The step under way ends (`now`: when its progress is seen; compat mode passes the
        step's start): its tokens are emitted and requests that finished leave."""
        kind = self.under_way
        if kind == NO_STEP:
            return
        self.under_way = NO_STEP
        self.output_tokens += self.pending_decodes
        if kind == QUIET:
            return
        self.now = now
        if kind == EXACT:
            self._execute(self.pending_batch, self.pending_index, self.pending_end)
            self.explicit = list(self.running)
        else:
            self._advance_steady(self.pending_batch, self.pending_due, self.pending_index,
                                 self.pending_end)

    def _leave_step(self, req: Request) -> None:
        """`req` leaves the batch while a step that advances it is under way: the others'
        progress still comes at the step's end. The steady path's implicit decoders are
        written back as of the step's start and the step's progress becomes the exact
        path's (every running request is in a steady step)."""
        steady = self.steady
        if self.under_way == STEADY and steady is not None:
            index = self.pending_index
            for other in self.running:
                if other.lazy_base >= 0:
                    steady.materialize(other, index)
                    other.chunk = DECODE
            steady.clear()
            self.under_way = EXACT
            self.pending_batch = list(self.running)
            self.pending_due = NO_REQUESTS
        batch = self.pending_batch
        if batch is not self.running and req in batch:
            batch.remove(req)

    def _drop_step(self) -> None:
        """The step under way never ends (the instance failed): its progress is not applied;
        the implicit decoders' state is that of the step's start."""
        if self.under_way == NO_STEP:
            return
        self.pending_batch = self.pending_due = NO_REQUESTS
        if self.steady is not None:
            self._materialize(self.pending_index)
        self.under_way = NO_STEP

    def _block_events(self, due: list[Request], index: int) -> tuple[list[Request], int]:
        """The implicit decoders whose token this step opens a KV block (slot 0) or fills
        one (last slot), and how many blocks they open."""
        block_size = self.kv.block_size
        last_slot = block_size - 1
        touched = []
        blocks = 0
        for req in due:
            slot = (req.progress + index - req.lazy_base - req.kv_phase) % block_size
            if slot == 0:
                blocks += 1
                touched.append(req)
            elif slot == last_slot:
                touched.append(req)
        return touched, blocks

    def _allocate_in_order(self, explicit: list[Request], touched: list[Request], index: int
                           ) -> None:
        """KV operations in batch order (block ids and LRU order depend on it); they all fit."""
        kv = self.kv
        block_size = kv.block_size
        last_slot = block_size - 1
        if touched:
            explicit = explicit + touched
            if len(explicit) > 1:
                sort_by_seq(explicit)
        for req in explicit:
            if req.lazy_base >= 0:
                position = req.progress + index - req.lazy_base
                slot = (position - req.kv_phase) % block_size
                if slot == 0:
                    kv.open_block(req)
                if slot == last_slot:
                    kv.publish(req, position)
            elif req.chunk != DECODE:
                kv.allocate(req, req.progress, req.chunk)
            elif (req.progress - req.kv_phase) % block_size in (0, last_slot):
                kv.allocate(req, req.progress, 1)

    def _advance_steady(self, explicit: list[Request], due: list[Request], index: int,
                        end: int) -> None:
        steady = self.steady
        assert steady is not None
        emit_at = end + self.latency.output_delay
        done = []
        still = []
        for req in explicit:
            if self._advance(req, index, emit_at):
                done.append(req)
            elif req.last_emit_step == index and req.progress >= req.prefill_target:
                steady.add(req, index + 1)  # decoding steadily from the next step on
            else:
                still.append(req)
        nxt = index + 1
        # `steady.schedule(req, nxt)` inlined: this runs twice per block per decoder.
        buckets = steady.buckets
        ring = len(buckets)
        block_size = steady.block_size
        last = block_size - 1
        for req in due:
            ahead = nxt - req.lazy_base
            left = req.max_tokens - req.emitted - ahead  # tokens after this step's
            if left <= 0:
                steady.materialize(req, nxt)
                done.append(req)
                continue
            slot = (req.progress + ahead - req.kv_phase) % block_size
            event = nxt + last - slot if 0 < slot < last else nxt
            if left - 1 < event - nxt:
                event = nxt + left - 1
            buckets[event % ring].append(req)
        due.clear()  # (this step's bucket: every event in it is handled)
        self.explicit = still
        if done:
            if len(done) > 1:
                sort_by_seq(done)
            self._complete(done, emit_at)

    def _materialize(self, index: int) -> None:
        """Make every implicit decoder explicit, its state written as of step `index`."""
        steady = self.steady
        assert steady is not None
        for req in self.running:
            if req.lazy_base >= 0:
                steady.materialize(req, index)
        steady.clear()
        self.explicit = list(self.running)

    def finish(self) -> None:
        """The run is over: write back implicit state, end the anomaly episodes still open
        and close this instance's records. A step under way when the run ends is applied,
        as if it had ended."""
        self.end_step(self.now)
        if self.steady is not None:
            self._materialize(self.step_index())
        self.watch.finish(self.last_event)
        self.log.pack(self.steps)
        self.steps = vec[i64]()
        self.log.close(self.kv.hits, self.kv.misses, self.kv.failures, self.last_event)
        if self.draft_tokens:
            self.speculation.flush(self.recorder)

    def _schedule_running(self, running: list[Request]) -> tuple[int, int, int, int]:
        """Running requests in order: a prefill chunk or one decode token each, while budget
        lasts. Returns (how many were scheduled, new prefill tokens, decodes, budget left)."""
        budget = self.token_budget
        threshold = self.threshold
        last_slot = self.kv.block_size - 1
        block_size = self.kv.block_size
        new_tokens = decodes = drafted = 0
        draft = self.draft_tokens
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            progress = req.progress
            n = req.prefill_target - progress
            if n > 0:
                n = prefill_chunk(n, threshold, budget)
                if not self._reserve(req, i, progress, n):
                    break
                req.chunk = n
                new_tokens += n
                budget -= n
            elif draft:
                # Speculation: verify 1 + d positions, d drafted (never past the output length
                # nor the budget); KV room for all of them, each step.
                d = min(draft, req.max_tokens - req.emitted - 1, budget - 1)
                if not self._reserve(req, i, progress, 1 + d):
                    break
                req.chunk = DECODE - d
                drafted += d
                decodes += 1
                budget -= 1 + d
            else:
                # A decode token touches the KV cache only when it opens a block or fills one.
                slot = (progress - req.kv_phase) % block_size
                if (slot == 0 or slot == last_slot) and not self._reserve(req, i, progress, 1):
                    break
                req.chunk = DECODE
                decodes += 1
                budget -= 1
            i += 1
        if draft:
            self.drafted = drafted
        return i, new_tokens, decodes, budget

    def _prefill_or_decode(self, running: list[Request]) -> tuple[list[Request], int, int]:
        """A step that does not mix (SGLang's default): the prefill chunks of running requests
        still prefilling, then waiting requests admitted while budget lasts, and if there is
        any such work the step is that alone, every decode waiting a step; else every running
        request decodes. Returns (the batch, its new prefill tokens, its decodes)."""
        budget, threshold = self.token_budget, self.threshold
        batch: list[Request] = []
        new_tokens = 0
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            n = req.prefill_target - req.progress
            if n > 0:
                n = prefill_chunk(n, threshold, budget)
                if not self._reserve(req, i, req.progress, n):
                    break
                req.chunk = n
                batch.append(req)
                new_tokens += n
                budget -= n
            i += 1
        kept = len(running)
        admitted, admitted_tokens = self._admit_waiting(running, budget)
        if batch or admitted:
            self.drafted = 0
            return batch + running[kept:], new_tokens + admitted_tokens, 0
        scheduled, new_tokens, decodes, _ = self._schedule_running(running)
        return running if scheduled == len(running) else running[:scheduled], new_tokens, decodes

    def _reserve(self, req: Request, position: int, start: int, tokens: int) -> bool:
        """KV room for the request at `position` in the batch, preempting until it fits.
        Victims come from the requests not yet scheduled this step (this one included), by
        the scheduler's rule (last admitted by default). False if this request was the victim."""
        kv, running, victim_of = self.kv, self.running, self.scheduler.victim
        while not kv.allocate(req, start, tokens):
            candidates = running[position:]
            if self.rescore_victims is not None:
                self._rescore(candidates, self.now, self.rescore_victims)
            pick = victim_of([r.view for r in candidates], [r.priority for r in candidates])
            victim = running.pop(position + pick)
            self._preempt(victim)
            if victim is req:
                return False
        return True

    def _preempt(self, req: Request) -> None:
        """vLLM recompute preemption: free the blocks, go back to the head of the queue, and
        later re-prefill the prompt plus every token already streamed."""
        now = self.now
        discarded = req.progress
        self._preempted = True
        self.kv.release(req)
        if self.adapters is not None and req.adapter:
            self.adapters.release(req.adapter)
        self.preemptions += 1
        req.state = State.QUEUED
        req.progress = 0
        req.prefill_target = req.input_len + req.emitted
        req.preemptions += 1
        self.queued_tokens += req.prefill_target
        self.wait_queue.appendleft(req)
        self.watch.queued(req)
        self.recorder.preemptions.append((now, self.id, req.name, discarded))
        if self.events is not None:
            self.events.append((now, "preempted", req.name, self.id))

    def _admit_waiting(self, running: list[Request], budget: int) -> tuple[int, int]:
        """Admit from the queue head while slots, budget and KV allow; strict head-of-line
        order, and nothing new is admitted in a step that preempted."""
        if self._decision is not None:  # seed G.1: the scheduler chose (`_make_batch`)
            admitted, tokens = self._admit_chosen(running, budget)
        elif self._preempted:
            admitted, tokens = 0, 0
        else:
            admitted, tokens = self._admit(running, budget)
        watch, queue = self.watch, self.wait_queue
        if watch.kv_head is not None:
            watch.head_is(self.now, queue[0] if queue else None)
        return admitted, tokens

    def _context(self, queue: Sequence[Request], running: list[Request], budget: int
                 ) -> SchedulerContext:
        return SchedulerContext(
            tuple(r.view for r in queue), tuple(r.priority for r in queue),
            tuple(r.view.priority_hints for r in queue), tuple(r.view for r in running),
            self.kv.free_blocks, self.now, self.max_running - len(running), budget)

    def _told(self, arrived: Sequence[Request], now: int) -> None:
        """The scheduler's `on_request_arrival`, for each request joining the queue."""
        hook = self.scheduler.on_request_arrival
        assert hook is not None
        ctx = self._context(self.wait_queue, self.running, self.token_budget)
        for req in arrived:
            hook(req.view, ctx)

    def _make_batch(self, scheduled: int, new_tokens: int, decodes: int, budget: int
                    ) -> tuple[int, int, int, int]:
        """The scheduler's `make_batch` (seed G.1), shown the queue and the batch as this
        step has scheduled it. Its preemption victims leave first, the last admitted first:
        preempted as under KV pressure (their blocks freed, back at the queue's head, their
        prompt and tokens computed again later), and a victim already scheduled this step
        gives its tokens back to the step's budget (as vLLM's scheduler does when it preempts
        a request it had scheduled). Returns the step's counts after that."""
        make = self.scheduler.make_batch
        assert make is not None
        queue, running = list(self.wait_queue), self.running
        decision = make(self._context(queue, running, budget))
        self._decision = (queue, decision)
        for i in sorted(decision.victims, reverse=True):
            victim = running.pop(i)
            if i < scheduled:
                scheduled -= 1
                chunk = victim.chunk
                if chunk > 0:
                    new_tokens -= chunk
                    budget += chunk
                else:
                    drafted = DECODE - chunk
                    self.drafted -= drafted
                    decodes -= 1
                    budget += 1 + drafted
            self._preempt(victim)
        return scheduled, new_tokens, decodes, budget

    def _admit_chosen(self, running: list[Request], budget: int) -> tuple[int, int]:
        """Admission by `make_batch`'s decision: the requests it names are tried in its
        order (its chunk sizes capping their prefill chunks); the rest keep their queue
        order, behind its victims."""
        assert self._decision is not None
        queue, decision = self._decision
        self._decision = None
        chosen = [queue[i] for i in decision.to_schedule]
        self._chunks = {queue[i]: n for i, n in decision.chunk_sizes.items()}
        waiting = self.wait_queue  # the victims, then `queue`
        self.wait_queue = deque(chosen)
        try:
            admitted, tokens = self._admit(running, budget)
        finally:
            self._chunks = None
            left, picked = set(self.wait_queue), set(chosen)
            self.wait_queue = deque([r for r in waiting if r not in picked or r in left])
        return admitted, tokens

    def _admit(self, running: list[Request], budget: int) -> tuple[int, int]:
        queue, kv, adapters, chunks = self.wait_queue, self.kv, self.adapters, self._chunks
        block_size, threshold, now = kv.block_size, self.threshold, self.now
        admitted = tokens = 0
        passed: list[Request] | None = None  # waiting for an adapter slot: passed over
        while queue and budget > 0 and len(running) < self.max_running:
            req = queue[0]
            if adapters is not None and req.adapter and not adapters.can_take(req.adapter):
                if passed is None:
                    passed = []
                passed.append(queue.popleft())
                continue
            req.hash_blocks(block_size)
            hit = kv.lookup(req, req.prefill_target)
            start = len(hit.blocks) * block_size
            n = prefill_chunk(req.prefill_target - start, threshold, budget)
            if chunks is not None and req in chunks:  # make_batch's cap
                n = min(n, chunks[req])
            if not kv.admit(req, hit, start, n):
                self._check_kv_blocking(req, budget)
                break
            queue.popleft()
            self.queued_tokens -= req.prefill_target
            self._load_us += hit.load_us
            if adapters is not None and req.adapter:
                self._load_us += adapters.hold(req.adapter, now)
            if req.cached_tokens < 0:
                req.cached_tokens = start
                req.first_scheduled = now
            req.progress = start
            req.chunk = n
            req.seq = self._seq
            self._seq += 1
            req.state = State.RUNNING
            running.append(req)
            self.admissions += 1
            admitted += 1
            tokens += n
            budget -= n
        if passed is not None:
            queue.extendleft(reversed(passed))
        if admitted:
            self.watch.admitted(now, running[len(running) - admitted:], queue)
        return admitted, tokens

    def _check_kv_blocking(self, head: Request, budget: int) -> None:
        """KV head-of-line blocking: the queue head does not fit in the free KV blocks while a
        request behind it would."""
        kv, threshold = self.kv, self.threshold
        for behind in itertools.islice(self.wait_queue, 1, HOL_LOOKAHEAD):
            n = prefill_chunk(behind.prefill_target, threshold, budget)
            if -(-n // kv.block_size) <= kv.free_blocks:
                self.watch.kv_blocked(self.now, head, behind)
                return

    def _execute(self, batch: list[Request], step: int, end: int) -> None:
        """Apply one step's progress; tokens are emitted at the step's end (+ output delay)."""
        emit_at = end + self.latency.output_delay
        done = [req for req in batch if self._advance(req, step, emit_at)]
        if done:
            self._complete(done, emit_at)

    def _advance(self, req: Request, step: int, emit_at: int) -> bool:
        """One scheduled request's progress this step; True when it has finished."""
        chunk = req.chunk
        if chunk == DECODE:
            req.progress += 1
        elif chunk < 0:
            self._verify(req, DECODE - chunk)
        else:
            req.progress += chunk
            if req.progress < req.prefill_target:
                return False
        emitted = req.emitted + 1
        req.emitted = emitted
        if emitted == 1:
            self.output_tokens += 1
            req.first_token_at = emit_at
            req.first_token_step = step
            self.recent_ttft.append(emit_at - req.arrival)
        elif req.last_emit_step != step - 1:
            if req.gaps is None:
                req.gaps = []
            req.gaps.append((req.last_emit_step, step))
        req.last_emit_step = step
        return emitted >= req.max_tokens

    def speculate(self, draft_tokens: int, speculation: Any) -> None:
        """Speculative decoding from now on: `draft_tokens` drafted per decode step, accepted
        as `speculation` draws (engine/speculative.py). Decodes are explicit: the steady path
        assumes one token per step."""
        self.draft_tokens = draft_tokens
        self.speculation = speculation
        self.steady = None

    def _verify(self, req: Request, drafted: int) -> None:
        """A speculative decode step's progress: the target model's token plus the accepted
        prefix of the `drafted` tokens (Speculation.accept)."""
        accepted: int = self.speculation.accept(req, drafted)
        req.progress += 1 + accepted
        req.emitted += accepted
        self.output_tokens += accepted

    def _complete(self, done: list[Request], at: int) -> None:
        observer, events = self.observer, self.events
        self.completions += len(done)
        adapters = self.adapters
        for req in done:
            self.kv.complete(req)
            if adapters is not None and req.adapter:
                adapters.release(req.adapter)
            req.state = State.COMPLETED
            req.completed_at = at
            if req.output_len > 1:
                self.recent_tpot.append((at - req.first_token_at) / (req.output_len - 1))
            if events is not None:
                events.append((self.now, "completed", req.name, self.id))
            if observer is not None:
                observer.finished(self.id, req)
            req.forget_hashes()
        running = self.running
        for req in done:
            running.remove(req)

    def empty(self, now: int) -> list[Request]:
        """The replica failed at `now`: every request leaves it (returned in queue, then batch
        order) and its KV cache is lost, cached prefixes included. A step under way is lost
        with them."""
        self._drop_step()
        if self.steady is not None:
            self._materialize(self.step_index())
        lost = [*self.wait_queue, *self.delivered, *self.running]
        kv = self.kv
        for req in self.running:
            kv.release(req)
        self.wait_queue.clear()
        self.delivered.clear()
        self.running.clear()
        self.explicit = []
        self.queued_tokens = 0
        kv.wipe()
        if self.adapters is not None:
            self.adapters.wipe()
        self.watch.emptied(now)
        return lost

    def kv_holders(self) -> list[Request]:
        """Every request holding KV blocks here (the ownership checks read it)."""
        return list(self.running)

    # -- observation (what snapshots read) -------------------------------------------------------

    def recent_ttft_ms(self) -> float:
        recent = self.recent_ttft
        return sum(recent) / len(recent) / US_PER_MS if recent else 0.0

    def recent_tpot_ms(self) -> float:
        recent = self.recent_tpot
        return sum(recent) / len(recent) / US_PER_MS if recent else 0.0

    def estimated_wait_ms(self) -> float:
        """Steps needed to prefill everything waiting, at the last step's duration."""
        if not self.queued_tokens:
            return 0.0
        steps = self.steps
        last = (steps[len(steps) - len(STEP_FIELDS) + DURATION] if len(steps)
                else self.log.last_duration())
        return -(-self.queued_tokens // self.token_budget) * last / US_PER_MS
