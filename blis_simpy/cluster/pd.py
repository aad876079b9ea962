"""P/D disaggregation of one deployment config: which pool a request goes to, and the handoff
of a prefilled request's KV from its prefill instance to a decode instance (seed 001 §6).

Routing: the decider picks the pool. A disaggregated request runs on a prefill instance as a
request of one output token; a request kept whole runs on a decode instance like on any other.
The decode instance of a disaggregated request is chosen by the routing policy (an instance of
its own for the decode pool, so a stateful policy keeps per-pool state), either with the
prefill one (`decode_choice: routing`) or when its prefill is done (`handoff`), among the decode
pool's routable instances; policies see the pool through the snapshots' `role`.

Handoff (one process per prefilled request, started by the dispatcher that reads the Store the
prefill instances put into):
1. room: the decode instance must set aside blocks for the whole prompt. If it has too few
   free, the transfer waits (backpressure, never a drop) in that instance's FIFO, retried
   whenever the instance frees blocks, up to `handoff_timeout_s` after the prefill finished;
   then the request is dropped (`pd_handoff_timeout`). One that can never fit the decode pool
   is dropped at once (`pd_exceeds_decode_kv`).
2. transfer: over its link (one per prefill instance, or one shared), a SimPy Resource of
   capacity 1 (`TransferLink`): transfers sharing a link queue for it, first come first
   served, and each holds it for the base latency plus the prompt's blocks times the bytes
   per block (model config, prefill TP) over the bandwidth; sent in chunks or block by block
   (`link.granularity`), each unit pays the base latency. With `link.pipeline` (layer-wise,
   seed 001 §6 PipelineMode) the handoff starts when the prefill step starts: layer i's KV
   can leave once the step has computed i+1 of the model's L layers, so the transfer ends at
   max(max(t, S + c/L) + d, E + d/L) for a step from S to E (c = E - S) and a link taken at
   t for a transfer of d: the later of the link's own time from the first layer on and the
   last layer's share after the step.
3. ownership moves in one step: the prefill instance frees its copy, the reserved blocks
   become the request's, and the decode instance receives it through its inbox. Until then
   the prefill instance owns the KV (and counts the request in flight), so every block has one
   owner at every moment.

The TTFT of a disaggregated request is the prefill instance's first token (streamed from
there); the gap its second token waits (room, link, a decode batch slot) is in its TPOT.
Every handoff is one row of the recorder's `transfers` channel.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator, Sequence
from typing import cast

import simpy

from blis_simpy.cluster.fleet import Fleet
from blis_simpy.cluster.gateway import Gateway
from blis_simpy.config.pd import Disaggregation
from blis_simpy.core.clock import Environment
from blis_simpy.core.errors import InvariantError
from blis_simpy.core.records import Recorder
from blis_simpy.core.request import RejectCode, Request, State
from blis_simpy.core.units import US_PER_MS, US_PER_S
from blis_simpy.engine.kv.checked import check_ownership
from blis_simpy.engine.kv.tiers import Link
from blis_simpy.engine.pd import DecodeInstance, PrefillInstance, reservation
from blis_simpy.policies.routing import RoutingPolicy


class PoolChoice:
    """The gateway's `pools`: for a disaggregated config's model fleet, the pool its handoff
    picks; any other fleet as it is."""

    def __init__(self) -> None:
        self.by_fleet: dict[int, PDHandoff] = {}  # by id() of the model's fleet

    def __call__(self, req: Request, fleet: Fleet) -> Fleet:
        handoff = self.by_fleet.get(id(fleet))
        return fleet if handoff is None else handoff.pool_of(req)


class Move:
    """One prefilled request on its way to a decode instance."""

    __slots__ = ("asked", "decode", "event", "prefill", "req", "reservation", "reserved",
                 "start", "step")

    def __init__(self, req: Request, prefill: PrefillInstance, asked: int,
                 step: tuple[int, int]) -> None:
        self.req = req
        self.prefill = prefill
        self.asked = asked  # when the handoff began: the prefill step's end (its start when
        self.step = step  # layer-wise), and that step's (start, end)
        self.decode: DecodeInstance | None = None
        self.reservation: Request | None = None
        self.reserved = self.start = -1
        self.event: simpy.Event | None = None  # set while waiting for decode KV room


class TransferLink(simpy.Resource):
    """A link between instances that KV blocks move over: one transfer at a time, in the
    order they asked for it; `duration` is how long a transfer of some blocks holds it."""

    def __init__(self, env: Environment, base_us: int, blocks_per_s: float) -> None:
        super().__init__(env, capacity=1)
        self.duration = Link(base_us, blocks_per_s).duration


class PDHandoff:
    """The decider, the decode choice and the KV handoffs of one disaggregated config."""

    def __init__(self, env: Environment, config: str, pd: Disaggregation, gateway: Gateway,
                 prefill: Fleet, decode: Fleet, recorder: Recorder, block_bytes: int,
                 block_size: int, routing: RoutingPolicy, checks: bool = False,
                 layers: int = 1) -> None:
        self.env = env
        self.config = config
        self.pd = pd
        self.gateway = gateway
        self.prefill = prefill
        self.decode = decode
        self.recorder = recorder
        self.block_bytes = block_bytes
        self.block_size = block_size
        self.routing = routing  # the decode pool's own instance of the routing policy
        self.checks = checks
        self.layers = layers
        self.pipelined = pd.link.pipeline
        self.timeout_us = round(pd.handoff_timeout_s * US_PER_S)
        link = pd.link
        self.base_us = round(link.base_latency_ms * US_PER_MS)
        self.blocks_per_s = link.bandwidth_gb_s * 1e9 / block_bytes
        self.shared = (TransferLink(env, self.base_us, self.blocks_per_s) if link.shared
                       else None)
        self.links: dict[str, TransferLink] = {}
        self.waiting: dict[str, deque[Move]] = {}  # per decode instance, FIFO
        self.moving: dict[str, Move] = {}  # by request name
        self.store = simpy.Store(env)  # a Move when its prefill step has ended
        env.process(self._dispatch())

    # -- routing (the gateway's `pools`) -------------------------------------------------------

    def pool_of(self, req: Request) -> Fleet:
        """The pool the request is routed in; a disaggregated one runs to its first token."""
        req.decode_target = ""
        self.gateway.joint = None
        if not self.disaggregate(req):
            req.max_tokens = max(req.output_len, 1)
            return self.decode
        req.max_tokens = 1
        if self.gateway.routing.routes_pd and self.decode.routable:  # one call, both pools
            self.gateway.joint = self.decode
        elif self.pd.decode_choice == "routing" and self.decode.routable:
            req.decode_target = self.gateway.choose(req, self.decode, self.env.now,
                                                    self.routing)[0].id
        return self.prefill

    def disaggregate(self, req: Request) -> bool:
        decider = self.pd.decider
        if decider.type == "never":
            return False
        if decider.type == "always":
            return True
        cached = max((len(inst.kv.lookup(req, req.input_len).blocks)
                      for inst in self.decode.routable), default=0)
        return req.input_len - cached * self.block_size > decider.threshold

    # -- the instances' reports (engine/pd.Handoff) ----------------------------------------

    def prefilled(self, instance: PrefillInstance, req: Request, ready: int) -> None:
        """`req`'s prefill step has started (now) and ends at `ready`."""
        now = self.env.now
        pipeline = self.pd.link.pipeline  # layer-wise: the handoff starts with the step
        move = Move(req, instance, now if pipeline else ready, (now, ready))
        self.moving[req.name] = move
        if pipeline:
            self.store.put(move)
            return
        self.env.timeout(ready - self.env.now, move).callbacks.append(self._ready)

    def _ready(self, event: simpy.Event) -> None:
        self.store.put(event.value)

    def abandoned(self, req: Request, reason: str) -> None:
        move = self.moving.pop(req.name)
        self._cancel(move, "abandoned", reason)

    def failed(self, instance: DecodeInstance) -> None:
        """`instance` failed: a transfer into it is lost with it (the request goes back to
        the gateway); one waiting for room on it chooses another decode instance."""
        moves = [m for m in self.moving.values() if m.decode is instance]
        for move in moves:  # first those waiting, so no room freed below goes to them
            if move.reservation is None and move.event is not None \
                    and not move.event.triggered:
                self._unwait(move)
                event, move.event = move.event, None
                event.succeed()
        for move in moves:
            if move.reservation is not None:
                self._lose(move)

    def _lose(self, move: Move) -> None:
        """The handoff fails with an instance: the request is lost (sent again or failed by
        the gateway, which counts it in flight at its prefill instance until then)."""
        del self.moving[move.req.name]
        self._cancel(move, "dropped", "instance_failure")
        observer = move.prefill.observer
        if observer is not None:
            observer.lost(move.prefill.id, move.req)

    def room(self, instance: DecodeInstance) -> None:
        """Blocks were freed on `instance`: reserve for its waiting transfers, in order."""
        queue = self.waiting.get(instance.id)
        while queue:
            move = queue[0]
            if not self._reserve(move, instance):
                return
            self._unwait(move)
            assert move.event is not None
            move.event.succeed()

    def _unwait(self, move: Move) -> None:
        """The handoff no longer waits for room on its decode instance."""
        decode = move.decode
        assert decode is not None
        self.waiting[decode.id].remove(move)
        decode.awaiting -= 1

    # -- the handoff --------------------------------------------------------------------------

    def _dispatch(self) -> Generator[simpy.Event, object, None]:
        while True:
            move = cast(Move, (yield self.store.get()))
            if self._current(move):  # not abandoned meanwhile
                self.env.process(self._handoff(move))

    def _handoff(self, move: Move) -> Generator[simpy.Event, object, None]:
        env, req = self.env, move.req
        deadline = move.asked + self.timeout_us
        while move.reservation is None:
            if not self._current(move):  # abandoned
                return
            decode = self._decode_for(req)
            if decode is None:  # the whole decode pool is down
                return self._lose(move)
            move.decode = decode
            if req.input_len + req.output_len > decode.max_len:
                return self._drop(move, RejectCode.PD_DECODE_CAPACITY,
                                  f"needs {req.input_len + req.output_len} tokens, {decode.id} "
                                  f"holds {decode.max_len}")
            if self._reserve(move, decode):
                break
            if env.now >= deadline:
                return self._drop(move, RejectCode.PD_HANDOFF_TIMEOUT,
                                  f"no KV room on {decode.id} within "
                                  f"{self.pd.handoff_timeout_s} s")
            move.event = env.event()
            self.waiting.setdefault(decode.id, deque()).append(move)
            decode.awaiting += 1
            yield move.event | env.timeout(deadline - env.now)
            if move.reservation is None:  # timed out (or abandoned: already unwaited)
                if not self._current(move):
                    return
                if move.event is None and env.now < deadline:
                    continue  # its decode instance failed: choose again
                self._unwait(move)
                move.event = None
                return self._drop(move, RejectCode.PD_HANDOFF_TIMEOUT,
                                  f"no KV room on {decode.id} within "
                                  f"{self.pd.handoff_timeout_s} s")
        move.event = None
        link = self._link(move.prefill)
        with link.request() as turn:  # (a transfer dropped meanwhile still takes its turn)
            yield turn
            move.start = env.now
            yield env.timeout(self._transfer_us(move, link, env.now))
        if self._current(move):
            self._move(move, env.now)

    def _transfer_us(self, move: Move, link: TransferLink, now: int) -> int:
        """How long the transfer holds the link from `now`: its units' base latencies plus
        its bytes, and with layer-wise pipelining what the prefill step still computes."""
        blocks = len(move.req.blocks)
        link_pd = self.pd.link
        units = (1 if link_pd.granularity == "request" else blocks
                 if link_pd.granularity == "block" else -(-blocks // link_pd.chunk_blocks))
        took = link.duration(blocks) + max(units - 1, 0) * self.base_us
        if not link_pd.pipeline:
            return took
        (start, end), layers = move.step, self.layers
        first = start + -(-(end - start) // layers)  # the first layer's KV is computed
        last = -(-took // layers)  # the last layer's share, sent after the step
        return max(max(now, first) + took, end + last) - now

    def _current(self, move: Move) -> bool:
        """The move still under way: not ended early (a request lost with an instance and
        sent again has a new move under the same name)."""
        return self.moving.get(move.req.name) is move

    def _decode_for(self, req: Request) -> DecodeInstance | None:
        """The decode instance chosen at routing while it is routable, else the routing
        policy's choice now; None if no decode instance is routable (scale-down never leaves
        a pool without one, failures can)."""
        if req.decode_target:
            chosen = self.decode.get(req.decode_target)
            if chosen is not None and chosen.routable:
                return cast(DecodeInstance, chosen)
        if not self.decode.routable:
            return None
        return cast(DecodeInstance, self.gateway.choose(req, self.decode, self.env.now,
                                                    self.routing)[0])

    def _reserve(self, move: Move, decode: DecodeInstance) -> bool:
        """Room on the decode instance for the prompt's KV, all or nothing."""
        held = reservation(move.req)
        if not decode.kv.allocate(held, 0, move.req.input_len):
            return False
        decode.reservations.append(held)
        move.decode = decode
        move.reservation = held
        move.reserved = self.env.now
        self._check()
        return True

    def _link(self, prefill: PrefillInstance) -> TransferLink:
        if self.shared is not None:
            return self.shared
        link = self.links.get(prefill.id)
        if link is None:
            link = self.links[prefill.id] = TransferLink(self.env, self.base_us,
                                                         self.blocks_per_s)
        return link

    def _move(self, move: Move, end: int) -> None:
        """Ownership of the KV moves from the prefill to the decode instance, at once."""
        req, prefill, decode, reservation = move.req, move.prefill, move.decode, \
            move.reservation
        assert decode is not None and reservation is not None
        del self.moving[req.name]
        prefill.let_go(req)
        decode.reservations.remove(reservation)
        req.blocks = reservation.blocks
        req.max_tokens = max(req.output_len, 1)
        if prefill.observer is not None:
            prefill.observer.handed_off(prefill.id, req)
        self.gateway.took_over(decode.id, req)
        decode.receive(req)
        self._record(move, end, "transferred", "")
        self._check()

    def _drop(self, move: Move, code: RejectCode, reason: str) -> None:
        """The request ends here, rejected with its prefill done: its KV is freed."""
        req, now = move.req, self.env.now
        self.moving.pop(req.name, None)
        self._cancel(move, "dropped", str(code))
        req.state = State.REJECTED
        req.reject_code = code
        req.reject_reason = reason
        self.recorder.rejections.append((now, move.prefill.id, req.name))
        if move.prefill.observer is not None:
            move.prefill.observer.finished(move.prefill.id, req)
        req.forget_hashes()

    def _cancel(self, move: Move, outcome: str, reason: str) -> None:
        """Free the prefill copy and any decode reservation of a handoff that ends early."""
        decode, reservation = move.decode, move.reservation
        if move.event is not None and not move.event.triggered:  # waiting for room
            self._unwait(move)
        if reservation is not None and decode is not None:
            decode.unreserve(reservation)
        move.prefill.let_go(move.req)
        self._record(move, self.env.now, outcome, reason)
        if reservation is not None and decode is not None:
            self.room(decode)
        self._check()

    def _record(self, move: Move, end: int, outcome: str, reason: str) -> None:
        blocks = -(-move.req.input_len // self.block_size)
        decode = move.decode.id if move.decode is not None else ""
        self.recorder.transfers.append((
            move.req.name, self.config, move.prefill.id, decode, move.asked, move.reserved,
            move.start, end, blocks, blocks * self.block_bytes, outcome, reason))

    def _check(self) -> None:
        if self.checks:
            instances: Sequence[PrefillInstance | DecodeInstance] = [
                *cast(list[PrefillInstance], list(self.prefill)),
                *cast(list[DecodeInstance], list(self.decode))]
            try:
                check_ownership(instances)
            except InvariantError as exc:
                raise InvariantError(f"{self.config}: {exc}") from None
