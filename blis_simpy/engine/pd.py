"""The two instance roles of P/D disaggregation, as seams on the ordinary step loop.

Both roles run the ordinary step loop (`Instance.run`) through its hooks: what wakes an idle
instance, when it is idle, what it waits for when a step cannot run.

A prefill instance runs every request it is given as a request of one output token: when the
step computing that token ends, instead of completing, the request is handed to its
deployment's handoff (a SimPy Store the handoff process reads), still holding its KV blocks
here. The instance lets go
of them only when the handoff says ownership has moved (or the request was dropped), so each
block has one owner at every moment. While it holds `bound` such requests it admits nothing
new (backpressure, a `pd_backpressure` episode), and when holding them is all that keeps it
from making progress its loop waits until one is let go (`stalled`) instead of spinning.

A decode instance takes two kinds of requests: whole ones (the decider kept them monolithic),
which run as on any instance, and handed-over ones, which arrive with their KV blocks already
attached and their first token already streamed (through the inbox when the step loop is idle
and waits on it, `woken`): they go straight into
the running batch (before any waiting request, as they hold KV) and decode from there, with no
prefill. Whenever its requests finish the handoff is told, so transfers waiting for KV room
here can go on.

The monolithic instance is untouched: these classes are used only by disaggregated configs.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Protocol

import numpy as np
import simpy

from blis_simpy.core.request import Request, State
from blis_simpy.core.snapshot import Role
from blis_simpy.engine.instance import Instance


class Handoff(Protocol):
    """What the instances of a disaggregated config report to its handoff."""

    pipelined: bool  # layer-wise transfers: a prompt's KV streams out while its step runs

    def prefilled(self, instance: PrefillInstance, req: Request, ready: int) -> None:
        """The request's prompt and first token are computed by the step ending at `ready`;
        its KV is held there."""
        ...

    def abandoned(self, req: Request, reason: str) -> None:
        """Its client gave up (or its prefill instance failed) while its KV was held or
        moving: drop the handoff."""
        ...

    def failed(self, instance: DecodeInstance) -> None:
        """A decode instance failed: transfers into it are lost, those waiting for room on it
        choose again."""
        ...

    def room(self, instance: DecodeInstance) -> None:
        """KV blocks were freed on a decode instance."""
        ...


NO_TOKENS = np.zeros(0, dtype=np.int64)


def reservation(req: Request) -> Request:
    """Decode KV blocks set aside for `req`'s transfer under way: written by the link, owned
    by `req` only when the transfer completes. A stand-in request holds them meanwhile; it has
    no hashes, so nothing can hit its blocks before their content has arrived."""
    holder = Request(req.index, req.arrival, NO_TOKENS, NO_TOKENS)
    holder.name = f"{req.name} (reservation)"
    holder.tokens = None
    return holder


class PrefillInstance(Instance):
    """Computes prompts and first tokens; holds each request's KV until it moves."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, role=Role.PREFILL, **kwargs)
        self.handoff: Handoff | None = None  # set by the deployment that owns it
        self.bound = 1 << 62  # held requests at which admission stops (set with the handoff)
        self.holding: dict[str, Request] = {}  # prefilled, KV here, not yet moved
        self.blocked_at = -1  # start of the current backpressure episode, -1 if none
        self.blocked_queue: tuple[str, ...] = ()
        self.wake: simpy.Event | None = None

    def step(self, now: int) -> int | None:
        """With layer-wise pipelined transfers a prefill step's progress is applied as it
        starts: the KV of the prompts it completes streams out while the step computes it,
        so their handoffs start with it (seed 001 §6 PipelineMode). Otherwise at its end, as
        on every instance (seed D.5.2)."""
        duration = super().step(now)
        handoff = self.handoff
        if duration is not None and handoff is not None and handoff.pipelined:
            self.end_step(now)
        return duration

    def stalled(self) -> simpy.Event | None:
        """Held KV (or the bound) keeps a step from running: wait for a let-go."""
        if not self.holding:
            return None
        self.wake = self.env.event()
        return self.wake

    def _admit(self, running: list[Request], budget: int) -> tuple[int, int]:
        if len(self.holding) >= self.bound:
            if self.blocked_at < 0 and self.wait_queue:
                self.blocked_at = self.now
                self.blocked_queue = tuple(r.name for r in self.wait_queue)
            return 0, 0
        return super()._admit(running, budget)

    def _complete(self, done: list[Request], at: int) -> None:
        """Requests of one output token are done here; the others move on with their KV."""
        whole = [req for req in done if req.output_len <= 1]
        if whole:
            super()._complete(whole, at)
        if len(whole) == len(done):
            return
        assert self.handoff is not None
        running = self.running
        ready = at - self.latency.output_delay  # the step's end: its KV is all there then
        for req in done:
            if req.output_len > 1:
                running.remove(req)
                req.state = State.TRANSFERRING
                self.holding[req.name] = req
                self.handoff.prefilled(self, req, ready)

    def let_go(self, req: Request) -> None:
        """Ownership of the request's KV has moved (or the request was dropped): free the
        blocks here, and admit again if the bound stopped admission."""
        del self.holding[req.name]
        self.kv.release(req)
        now = self.env.now
        self.last_event = now
        if self.blocked_at >= 0 and len(self.holding) < self.bound:
            self._end_backpressure(now)
        if self.wake is not None and not self.wake.triggered:
            self.wake.succeed()
            self.wake = None

    def _end_backpressure(self, now: int) -> None:
        self.recorder.anomaly("pd_backpressure", self.blocked_at, self.id, self.blocked_queue,
                              f"held {self.bound} prefilled requests waiting for decode",
                              end=now)
        self.blocked_at = -1
        self.blocked_queue = ()

    def abandon(self, req: Request) -> None:
        if req.state is State.TRANSFERRING:
            assert self.handoff is not None
            self.handoff.abandoned(req, "client_timeout")  # lets go of its KV here
            if self.observer is not None:
                self.observer.finished(self.id, req)
            return
        super().abandon(req)

    def empty(self, now: int) -> list[Request]:
        """Held requests are lost too: their handoffs end (freeing their KV here first)."""
        held = list(self.holding.values())
        if self.handoff is not None:
            for req in held:
                self.handoff.abandoned(req, "instance_failure")
        self.wake = None
        return super().empty(now) + held

    def finish(self) -> None:
        if self.blocked_at >= 0:
            self._end_backpressure(self.last_event)
        super().finish()

    def kv_holders(self) -> list[Request]:
        return [*super().kv_holders(), *self.holding.values()]


class DecodeInstance(Instance):
    """Decodes requests whose KV was handed over, and runs whole requests too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, role=Role.DECODE, **kwargs)
        self.handoff: Handoff | None = None
        self.arrived: deque[Request] = deque()  # handed over, waiting for a batch slot
        self.reservations: list[Request] = []  # transfers under way into this instance
        self.awaiting = 0  # handoffs waiting for KV room here (kept by the handoff)
        self.wake: simpy.Event | None = None

    @property
    def queue_depth(self) -> int:
        """Requests waiting here: whole ones in the queue, handed-over ones for a batch slot,
        and handoffs for KV room (what the autoscaler and routing see of decode demand)."""
        return len(self.wait_queue) + len(self.inbox.items) + len(self.arrived) + self.awaiting

    def receive(self, req: Request) -> None:
        """Ownership of the request's KV (already in `req.blocks`) is here now: its full
        blocks become hits for later requests, and it joins through the inbox."""
        req.instance = self.id
        kv = self.kv
        for block in range(req.input_len // kv.block_size):
            kv.publish(req, block * kv.block_size)
        self.last_event = self.env.now
        # no token run on this instance yet: the token gaps start from its next step
        req.first_token_step = req.last_emit_step = self.step_index() - 1
        self.arrived.append(req)
        if self.inbox.get_queue:  # the step loop is idle, waiting on its inbox: wake it
            self.inbox.put(req)
        self._wake()

    def unreserve(self, holder: Request) -> None:
        """A transfer under way into this instance ended early: its reserved blocks are free."""
        self.reservations.remove(holder)
        self.kv.release(holder)
        self._wake()

    def deliver(self, req: Request) -> None:
        super().deliver(req)
        self._wake()

    def stalled(self) -> simpy.Event | None:
        """Nothing runs and the queue's head does not fit: the KV that transfers under way
        reserve here holds it. Wait until something changes (a transfer lands or ends, a
        request arrives, leaves or completes) rather than step at the same instant for ever."""
        self.wake = self.env.event()
        return self.wake

    def _wake(self) -> None:
        wake = self.wake
        if wake is not None:
            self.wake = None
            wake.succeed()

    def idle(self) -> bool:
        return super().idle() and not self.arrived

    def woken(self, req: Request) -> None:
        if req.state is not State.TRANSFERRING:  # a handed-over one is in `arrived`
            super().woken(req)

    def step(self, now: int) -> int | None:
        if self.arrived:
            self._seat()
        return super().step(now)

    def _seat(self) -> None:
        """Handed-over requests take free batch slots ahead of the wait queue: their KV is
        here and their next token is a decode."""
        arrived, running = self.arrived, self.running
        last = self.step_index() - 1
        while arrived and len(running) < self.max_running:
            req = arrived.popleft()
            req.state = State.RUNNING
            req.seq = self._seq
            self._seq += 1
            req.first_token_step = req.last_emit_step = last
            running.append(req)
            self.explicit.append(req)
            self.admissions += 1

    def abandon(self, req: Request) -> None:
        if req.state is State.TRANSFERRING:  # waiting for a batch slot
            self.arrived.remove(req)
            self.kv.release(req)
            if self.observer is not None:
                self.observer.finished(self.id, req)
            self._freed()
            return
        super().abandon(req)
        self._freed()

    def _complete(self, done: list[Request], at: int) -> None:
        super()._complete(done, at)
        self._freed()

    def empty(self, now: int) -> list[Request]:
        """Handed-over requests waiting for a batch slot are lost too, and the transfers into
        this instance (their handoffs see to them)."""
        if self.handoff is not None:
            self.handoff.failed(self)
        self.wake = None
        arrived = list(self.arrived)
        self.arrived.clear()
        for req in arrived:
            self.kv.release(req)
        return super().empty(now) + arrived

    def _freed(self) -> None:
        if self.handoff is not None:
            self.handoff.room(self)
        self._wake()

    def kv_holders(self) -> list[Request]:
        return [*super().kv_holders(), *self.arrived, *self.reservations]
