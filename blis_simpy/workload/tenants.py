"""The multi-tenant workload as SimPy processes.

Open-loop tenants draw arrival times from their arrival process (modulated by the load
profile); closed-loop tenants run a fixed number of users. One arrival starts a completion,
a reasoning request, or a session (chat, agentic) whose next request is issued only after the
previous response completes plus a think or tool time, so the source reacts to the system.
Token ids are real: shared prefixes are the same ids for everyone, a chat turn carries the
conversation so far, and the KV cache and prefix-aware routing see genuine reuse.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING

import numpy as np
import simpy

from blis_simpy.config.arrivals import ConstantProfile
from blis_simpy.config.distributions import Distribution
from blis_simpy.config.workload import Shape, TenantSpec, TenantsWorkload
from blis_simpy.core.clock import Environment
from blis_simpy.core.hashing import block_hashes
from blis_simpy.core.loop import NamedProcess
from blis_simpy.core.ordering import CLUSTER_ARRIVAL, StageEvent
from blis_simpy.core.request import Request, State
from blis_simpy.core.units import MAX_REQUESTS, US_PER_S, VOCAB
from blis_simpy.rng.streams import stream
from blis_simpy.workload.arrivals import arrival_times
from blis_simpy.workload.prehash import hash_request
from blis_simpy.workload.sampling import (
    UniformIds,
    WeightedPick,
    one_duration,
    one_token_count,
)

if TYPE_CHECKING:  # imported where used: every run imports this module, few use them
    from blis_simpy.workload.session_walk import SessionWalk

Process = Generator[simpy.Event, object, None]


class TenantStreams:
    """One tenant's independent random streams."""

    def __init__(self, seed: int, tenant: str) -> None:
        self.arrivals = stream(seed, f"tenant:{tenant}:arrivals")
        self.lengths = stream(seed, f"tenant:{tenant}:lengths")
        self.tokens = UniformIds(stream(seed, f"tenant:{tenant}:tokens"), VOCAB)
        self.choices = stream(seed, f"tenant:{tenant}:choices")

    def count(self, dist: Distribution, factor: float = 1.0) -> int:
        return max(1, round(one_token_count(dist, self.lengths) * factor))

    def counts(self, prompt: Distribution, output: Distribution, rho: float,
               factors: tuple[float, float]) -> tuple[int, int]:
        """A request's (prompt, output) token counts: independent draws, or correlated by a
        Gaussian copula with coefficient `rho` (workload/copula.py)."""
        if rho == 0:
            return self.count(prompt, factors[0]), self.count(output, factors[1])
        from blis_simpy.workload.copula import correlated_counts
        p, o = correlated_counts(prompt, output, rho, self.lengths)
        return max(1, round(p * factors[0])), max(1, round(o * factors[1]))

    def seconds(self, dist: Distribution) -> float:
        return one_duration(dist, self.lengths)

    def ids(self, n: int) -> np.ndarray:
        return self.tokens.take(n)


class TenantWorkload:
    """Starts one process per tenant (plus its users, sessions and bursts) on `env`."""

    def __init__(self, env: Environment, workload: TenantsWorkload, seed: int,
                 deliver: Callable[[Request], None], block_size: int | None = None) -> None:
        """`block_size`: hash each request's blocks before delivering it, reusing the hashes
        of a shared prefix and of the conversation so far (None: leave it to the gateway, which
        then can keep the token ids)."""
        self.env = env
        self.block_size = block_size
        self.workload = workload
        self.seed = seed
        self.deliver = deliver
        self.issued = 0
        self.sessions = 0
        self.end_us = round(workload.duration_s * US_PER_S)
        self.prefixes = {g.id: stream(seed, f"prefix:{g.id}") for g in workload.prefix_groups}
        self.prefix_tokens = {
            g.id: self.prefixes[g.id].integers(0, VOCAB, one_token_count(
                g.length, self.prefixes[g.id]))
            for g in workload.prefix_groups
        }
        self.prefix_hashes = {
            name: block_hashes(tokens, block_size) if block_size else []
            for name, tokens in self.prefix_tokens.items()
        }
        popularity = {g.id: g.popularity for g in workload.prefix_groups}
        # Each tenant's prefix groups and its pick among them by popularity, made once.
        self.prefix_choice: dict[str, tuple[list[str], WeightedPick]] = {}
        for tenant in workload.tenants:
            if tenant.prefix is not None:
                names = list(tenant.prefix.groups or sorted(self.prefix_tokens))
                pick = WeightedPick.of([popularity[n] for n in names])
                self.prefix_choice[tenant.id] = (names, pick)
        # Each tenant's request shapes (its own, or its archetypes') and the pick among them.
        self.shapes: dict[str, tuple[list[Shape], WeightedPick | None]] = {}
        for tenant in workload.tenants:
            shapes = [shape for shape, _ in workload.shapes(tenant)]
            mix = (WeightedPick.of(list(tenant.archetypes.values())) if tenant.archetypes
                   else None)
            self.shapes[tenant.id] = (shapes, mix)
        # LoRA: each tenant's adapters and its pick among them, with its own stream (drawn
        # only by tenants that name adapters, so no other draw moves)
        self.adapter_choice: dict[str, tuple[list[str], WeightedPick, np.random.Generator]] = {
            tenant.id: (tenant.adapters.names(tenant.id),
                        WeightedPick.of(tenant.adapters.weights()),
                        stream(seed, f"tenant:{tenant.id}:adapters"))
            for tenant in workload.tenants if tenant.adapters is not None}
        open_total = workload.open_fraction_total
        for tenant in workload.tenants:
            streams = TenantStreams(seed, tenant.id)
            if tenant.closed_loop is not None:
                for user in range(tenant.closed_loop.users):
                    NamedProcess(env, self._user(tenant, streams, user),
                                 f"{tenant.id} user {user}")
            elif tenant.rate_fraction > 0:
                rate = workload.rate_per_s * tenant.rate_fraction / open_total
                if tenant.behavior.type == "abusive":
                    rate *= tenant.behavior.rate_multiplier
                NamedProcess(env, self._open_loop(tenant, streams, rate), f"{tenant.id} arrivals")
            if tenant.behavior.type in ("bursty", "adversarial"):
                NamedProcess(env, self._bursts(tenant, streams), f"{tenant.id} bursts")

    # -- request construction -----------------------------------------------------------------

    @property
    def exhausted(self) -> bool:
        """The request cap is reached: max_requests, else the limit (closed-loop users, not
        counted before the run, stop there: metrics/warnings.py says so)."""
        cap = self.workload.max_requests
        return self.issued >= (MAX_REQUESTS if cap is None else cap)

    def _issue(self, tenant: TenantSpec, prompt: np.ndarray, output: np.ndarray, kind: str,
               known: list[int], session: str = "", turn: int = 0) -> tuple[Request, list[int]]:
        """Deliver a request; `known`: the block hashes of a sequence its prompt starts with.
        Returns it and its block hashes (empty if the gateway hashes it)."""
        req = Request(self.issued, self.env.now, prompt, output, tenant.id, tenant.slo_class)
        req.request_type = kind
        req.session_id = session
        req.turn = turn
        if tenant.adapters is not None:
            req.adapter = self._adapter(tenant)
        self.issued += 1
        hashes = hash_request(req, self.block_size, known) if self.block_size else []
        self.deliver(req)
        return req, hashes

    def _prefix(self, tenant: TenantSpec, streams: TenantStreams) -> tuple[np.ndarray, list[int]]:
        """The shared prefix a request starts with (maybe none), and its block hashes."""
        use = tenant.prefix
        if use is None or streams.choices.random() >= use.reuse_probability:
            return np.zeros(0, dtype=np.int64), []
        names, pick = self.prefix_choice[tenant.id]
        name = names[pick.pick(streams.choices)]
        return self.prefix_tokens[name], self.prefix_hashes[name]

    def _shape(self, tenant: TenantSpec, streams: TenantStreams) -> Shape:
        """The shape of one arrival's requests: the tenant's, or an archetype's by its share."""
        shapes, mix = self.shapes[tenant.id]
        return shapes[0] if mix is None else shapes[mix.pick(streams.choices)]

    def _adapter(self, tenant: TenantSpec) -> str:
        """The LoRA adapter a request names, by popularity; "" (the base model) for the
        tenant's share of requests that name none."""
        use = tenant.adapters
        assert use is not None
        names, pick, rng = self.adapter_choice[tenant.id]
        if use.fraction < 1 and rng.random() >= use.fraction:
            return ""
        return names[pick.pick(rng)]

    def _counts(self, tenant: TenantSpec, shape: Shape, streams: TenantStreams,
                walk: SessionWalk | None = None) -> tuple[int, int]:
        """One request's (prompt, output) token counts; a session state's lengths, if set,
        stand in for the shape's."""
        abusive = tenant.behavior.type == "abusive"
        factors = ((tenant.behavior.prompt_multiplier, tenant.behavior.output_multiplier)
                   if abusive else (1.0, 1.0))
        prompt, output = shape.prompt, shape.output
        if walk is not None:
            prompt, output = walk.lengths(prompt, output)
        return streams.counts(prompt, output, shape.correlation, factors)

    def _output(self, tenant: TenantSpec, shape: Shape, streams: TenantStreams) -> np.ndarray:
        factor = tenant.behavior.output_multiplier if tenant.behavior.type == "abusive" else 1
        return streams.ids(streams.count(shape.output, factor))

    # -- processes ----------------------------------------------------------------------------

    def _wait_until(self, at_us: int) -> Process:
        if at_us > self.env.now:
            yield StageEvent(self.env, at_us - self.env.now, CLUSTER_ARRIVAL)

    def _open_loop(self, tenant: TenantSpec, streams: TenantStreams, rate: float) -> Process:
        profile = self.workload.load_profile or ConstantProfile()
        for t in arrival_times(tenant.arrival, rate, profile, streams.arrivals, 0.0,
                               self.workload.duration_s):
            yield from self._wait_until(round(t * US_PER_S))
            if self.exhausted:
                return
            self._start(tenant, streams)

    def _start(self, tenant: TenantSpec, streams: TenantStreams) -> simpy.Process | Request:
        """One arrival: a single request, or a session process."""
        kind = tenant.request_type
        shape = self._shape(tenant, streams)
        if kind in ("chat", "agentic"):
            self.sessions += 1
            session = f"{tenant.id}-s{self.sessions}"
            run = self._chat if kind == "chat" else self._agentic
            return NamedProcess(self.env, run(tenant, shape, streams, session), session)
        prefix, known = self._prefix(tenant, streams)
        prompt_n, output_n = self._counts(tenant, shape, streams)
        prompt = np.concatenate((prefix, streams.ids(prompt_n)))
        output = streams.ids(output_n)
        if kind == "reasoning":
            steps = streams.count(tenant.reasoning.chain_length)
            thinking = sum(streams.count(tenant.reasoning.tokens_per_step) for _ in range(steps))
            output = np.concatenate((streams.ids(thinking), output))
        return self._issue(tenant, prompt, output, kind, known)[0]

    def _respond(self, req: Request) -> Generator[simpy.Event, object, bool]:
        """Wait until the response is complete (its last token delivered), rejected or given
        up on (the client's timeout); True if it was delivered."""
        req.done = self.env.event()
        yield req.done
        if req.state is not State.COMPLETED:
            return False
        end = req.completed_at
        delivered = req.deadline < 0 or end <= req.deadline
        if not delivered:
            end = req.deadline
        if end > self.env.now:
            yield self.env.timeout(end - self.env.now)
        return delivered

    def _chat(self, tenant: TenantSpec, shape: Shape, streams: TenantStreams, session: str
              ) -> Process:
        """A chat session: a fixed number of turns, or a walk of the session model's states."""
        chat = tenant.chat
        prefix, known = self._prefix(tenant, streams)
        walk: SessionWalk | None = None
        if chat.session is not None:
            from blis_simpy.workload.session_walk import SessionWalk
            walk = SessionWalk(chat.session, streams.choices)
        turns = streams.count(chat.turns) if walk is None else walk.max_turns
        exchanges: list[np.ndarray] = []
        for turn in range(turns):
            if self.exhausted:
                return
            message_n, output_n = self._counts(tenant, shape, streams, walk)
            message = streams.ids(message_n)
            prompt = np.concatenate([prefix, *carried(exchanges, chat.context_growth,
                                                      chat.max_context_tokens, turn), message])
            output = streams.ids(output_n)
            req, hashes = self._issue(tenant, prompt, output, "chat", known, session, turn)
            if not (yield from self._respond(req)):
                return
            if chat.context_growth == "linear":  # the next prompt starts with this exchange
                known = hashes
            exchanges.append(np.concatenate((message, output)))
            think = chat.think_time_s
            if walk is not None:
                think = walk.think(think)
                if not walk.advance():
                    return
            yield from self._wait_until(self.env.now + round(
                streams.seconds(think) * US_PER_S))

    def _agentic(self, tenant: TenantSpec, shape: Shape, streams: TenantStreams, session: str
                 ) -> Process:
        """An agentic task; a length correlation pairs the task's prompt with the first step's
        output (a later step's output is drawn alone)."""
        agent = tenant.agentic
        prefix, known = self._prefix(tenant, streams)
        first = 0
        if shape.correlation == 0:
            factor = tenant.behavior.prompt_multiplier if tenant.behavior.type == "abusive" \
                else 1
            prompt_n = streams.count(shape.prompt, factor)
        else:
            prompt_n, first = self._counts(tenant, shape, streams)
        context = np.concatenate((prefix, streams.ids(prompt_n)))
        calls_left = streams.count(agent.max_tool_calls)
        step = 0
        while not self.exhausted:
            output = streams.ids(first) if first else self._output(tenant, shape, streams)
            first = 0
            req, known = self._issue(tenant, context, output, "agentic", known, session, step)
            delivered = yield from self._respond(req)
            if (not delivered or calls_left <= 0 or self.exhausted
                    or streams.choices.random() >= agent.tool_call_probability):
                return
            calls_left -= 1
            step += 1
            yield from self._wait_until(self.env.now + round(
                streams.seconds(agent.tool_latency_s) * US_PER_S))
            result = streams.ids(streams.count(agent.tool_result_tokens))
            context = np.concatenate((context, output, result))

    def _user(self, tenant: TenantSpec, streams: TenantStreams, user: int) -> Process:
        """A closed-loop user: send, wait for the whole response (or session), think, repeat."""
        loop = tenant.closed_loop
        assert loop is not None
        yield from self._wait_until(round(streams.seconds(loop.think_time_s) * US_PER_S))
        while self.env.now < self.end_us and not self.exhausted:
            started = self._start(tenant, streams)
            if isinstance(started, Request):
                yield from self._respond(started)
            else:
                yield started
            yield from self._wait_until(self.env.now + round(
                streams.seconds(loop.think_time_s) * US_PER_S))

    def _bursts(self, tenant: TenantSpec, streams: TenantStreams) -> Process:
        """Extra bursts of simultaneous requests; adversarial tenants burst at the same
        instants (multiples of burst_every_s) so they synchronise with each other."""
        behavior = tenant.behavior
        every = round(behavior.burst_every_s * US_PER_S)
        at = every
        while at < self.end_us:
            yield from self._wait_until(at)
            for _ in range(streams.count(behavior.burst_size)):
                if self.exhausted:
                    return
                self._start(tenant, streams)
            if behavior.type == "adversarial":
                at += every
            else:
                at += max(1, round(streams.arrivals.exponential(behavior.burst_every_s)
                                   * US_PER_S))


def carried(exchanges: list[np.ndarray], growth: str, limit: int, turn: int) -> list[np.ndarray]:
    """The conversation history a chat turn carries (after the shared prefix)."""
    if growth == "sublinear":
        return exchanges[len(exchanges) - math.ceil(math.sqrt(turn)):] if turn else []
    if growth == "bounded":
        history = np.concatenate(exchanges) if exchanges else np.zeros(0, dtype=np.int64)
        return [history[-limit:]] if len(history) > limit else [history]
    return exchanges
