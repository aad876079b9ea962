"""The online request pipeline (BC-1..BC-3): arrival -> admission (after the admission
latency) -> priority -> routing (after the routing latency) -> the chosen instance.

Each stage is an event at its own time and priority (`core.ordering`); requests reach instances
only through `_route` (NC-1). The stages are priority callbacks rather than processes handing
requests over through Stores: they hold no capacity and never wait for anything but time, so a
Store between them would add an event per request and per stage and nothing else. A
zero-latency stage whose event would be the very next to run is run at once instead (same
order, same time; `_runs_next`): a request arriving alone takes one event, not three. The hand-over
that does involve waiting, into an instance, goes through the instance's inbox Store.

The gateway owns the router state (with the shadow KV model, updated after every routing
decision when anything reads it) and the per-instance pending and in-flight counters (keyed by
instance id) that snapshots report, and writes admission, priority and routing decisions to the
recorder when decisions are traced.

Flow control (`cluster.flow_control`, cluster/flow.py): an admitted request waits in the gateway
queue, a Store its dispatch process drains while the fleet is not saturated, and goes to routing
from there (`dispatch`); a run without it builds no queue and routes at once.

Client timeouts: a request whose client has a timeout gets one more event, at its deadline; a
request still unfinished then is abandoned wherever it is (in a gateway stage, inside an
instance's queueing delay, waiting, or running: its KV blocks freed) and ends `timed_out`.

Failures: a request lost with a failed instance (or finding no routable instance) is sent
again after a back-off, doubling with every retry, while its retries last (`faults.requests`);
then it ends `failed`. Each request is counted in flight at one instance at most
(`Request.counted`), so the counters stay exact whatever order instances report in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, cast

import simpy
from mypy_extensions import mypyc_attr
from simpy.events import EventPriority

from blis_simpy.cluster.cache_signal import CacheSignal
from blis_simpy.cluster.fleet import Fleet, ModelFleets
from blis_simpy.cluster.snapshot import SnapshotProvider, Snapshots
from blis_simpy.config.faults import RequestRecovery
from blis_simpy.config.scenario import ClusterConfig
from blis_simpy.config.workload import ClientTimeouts
from blis_simpy.core.clock import Environment
from blis_simpy.core.errors import InvariantError
from blis_simpy.core.loop import Clock, runs_next
from blis_simpy.core.ordering import ADMISSION, ROUTING, StageEvent
from blis_simpy.core.records import Candidate, Decision, Recorder
from blis_simpy.core.request import RejectCode, Request, State
from blis_simpy.core.router_state import RouterState
from blis_simpy.core.shadow_kv import ShadowKV
from blis_simpy.core.snapshot import InstanceSnapshot
from blis_simpy.core.units import MAX_ADMISSION_DELAYS, MAX_SIM_US, US_PER_S
from blis_simpy.engine.instance import Instance
from blis_simpy.policies.admission import AdmissionPolicy
from blis_simpy.policies.priority import PriorityDecision, PriorityPolicy
from blis_simpy.policies.routing import RoutingDecision, RoutingPolicy


class Queue(Protocol):
    """Where admitted requests wait before routing (cluster/flow.py: FlowControl)."""

    def enqueue(self, req: Request) -> None: ...

    def abandon(self, req: Request) -> bool: ...


def settle(req: Request) -> None:
    """Wake whoever waits on this request's outcome (a session's next turn, a user)."""
    if req.done is not None and not req.done.triggered:
        req.done.succeed()


@mypyc_attr(allow_interpreted_subclasses=True)
class Gateway:
    """Admission, priority and routing for the fleet's routable instances."""

    def __init__(self, env: Environment, fleet: Fleet, config: ClusterConfig,
                 admission: AdmissionPolicy, priority: PriorityPolicy, routing: RoutingPolicy,
                 recorder: Recorder, block_size: int,
                 timeouts: ClientTimeouts | None = None,
                 recovery: RequestRecovery | None = None, checks: bool = False) -> None:
        self.env = env
        self.clock = Clock(env)  # the time without the interpreted `env.now` property
        self.fleet = fleet
        self.config = config
        self.admission = admission
        self.priority = priority
        self.routing = routing
        self.recorder = recorder
        self.events = recorder.events
        self.decisions = recorder.decisions
        self.block_size = block_size
        self.state = RouterState()
        if routing.reads_shadow_kv or self.decisions is not None:
            self.state.shadow_kv = ShadowKV(config.shadow_kv_capacity)
        self.pending: dict[str, int] = {}  # routed, not yet in the instance's wait queue
        self.in_flight: dict[str, int] = {}  # routed, not yet finished
        self.snapshots = SnapshotProvider(config.observability, self.pending, self.in_flight)
        # the instances' real prefix caches, for the scorers that read them
        signal = CacheSignal(fleet, config.observability.cached_blocks)
        self.state.cache_signal = self.snapshots.cache_signal = signal
        self.state.fleet_view = self
        self.state.adapter_signal = fleet
        self.deciding: Request | None = None  # the request admission is deciding on
        self.delays: dict[Request, int] = {}  # how often admission delayed each waiting one
        self.flow: Queue | None = None  # the gateway queue (cluster.flow_control)
        self.keep_tokens = False  # set to export the requests' token ids
        self.timeouts = timeouts if timeouts else None
        self.timed_out = 0
        self.recovery = recovery if recovery is not None else RequestRecovery()
        self.checks = checks  # raise InvariantError on a negative count
        self.models: ModelFleets | None = None  # several models: each request to its own
        # P/D: the pool of its model's fleet a request is routed in (cluster/pd.py)
        self.pools: Callable[[Request, Fleet], Fleet] | None = None
        # P/D with a policy that `routes_pd`: the decode pool `pools` names for this request
        self.joint: Fleet | None = None

    def hand_back(self, instance: str, req: Request) -> None:
        """A draining instance gives back a request it has queued or started (it has already
        let go of it and its KV blocks): the request is routed again, as if just admitted, and
        restarts from scratch there, as a client retrying a broken stream would; its latencies
        still count from its first arrival."""
        self._uncount(instance, req)
        self._restart(req)
        StageEvent(self.env, self.config.routing_latency_us, ROUTING, req, self._route)

    @staticmethod
    def _restart(req: Request) -> None:
        """Back to just admitted: what it computed on an instance is gone."""
        req.state = State.ARRIVING
        req.instance = ""
        req.queued_at = req.first_scheduled = req.cached_tokens = -1
        req.first_token_at = req.first_token_step = req.last_emit_step = -1
        req.progress = req.emitted = 0
        req.prefill_target = req.input_len
        req.max_tokens = max(req.output_len, 1)
        req.gaps = None

    # -- in-flight counts -----------------------------------------------------------------------

    def _count(self, instance: str, req: Request, pending: bool = True) -> None:
        """The request is in flight at `instance` (and, when `pending`, not yet queued)."""
        if req.counted:
            raise InvariantError(f"{req.name} counted in flight at {instance} while still "
                                 f"counted at {req.counted}")
        req.counted = instance
        if pending:
            self.pending[instance] = self.pending.get(instance, 0) + 1
        self.in_flight[instance] = self.in_flight.get(instance, 0) + 1

    def _uncount(self, instance: str, req: Request) -> bool:
        """The request is no longer in flight at `instance`; False if it was not counted
        there (a second report of the same end changes nothing)."""
        if req.counted != instance:
            return False
        req.counted = ""
        if req.queued_at < 0:  # never queued there
            self._decrement(self.pending, instance)
        self._decrement(self.in_flight, instance)
        return True

    def _decrement(self, counts: dict[str, int], instance: str) -> None:
        left = counts[instance] - 1
        if left < 0 and self.checks:
            raise InvariantError(f"in-flight count of {instance} went negative")
        counts[instance] = left

    def took_over(self, instance: str, req: Request) -> None:
        """P/D: a decode instance owns the request's KV now (its prefill instance has
        reported it handed off)."""
        self._count(instance, req, pending=False)

    # -- stages -------------------------------------------------------------------------------

    def arrive(self, req: Request, alone: bool = False) -> None:
        """ClusterArrival: the request exists; admission follows after its latency. `alone`:
        the source knows no other request arrives at this time (`_runs_next`)."""
        now = self.clock.now()
        self.recorder.requests.append(req)
        req.observe(self.block_size, self.keep_tokens)
        if self.models is not None and not req.model:  # several: the one it is for, on record
            req.model = self.models.name_of(req)
        self.state.on_arrival(req.tenant_id, now)
        if self.events is not None:
            self.events.append((now, "arrival", req.name, ""))
        if self.timeouts is not None:
            wait = self.timeouts.for_tenant(req.tenant_id)
            if wait is not None:
                req.deadline = now + wait
                self.env.timeout(wait, req).callbacks.append(self._give_up)
        latency = self.config.admission_latency_us
        if alone and latency == 0 and self._runs_next(ADMISSION):
            self._admit_now(req)
        else:
            StageEvent(self.env, latency, ADMISSION, req, self._admit)

    def _runs_next(self, priority: EventPriority) -> bool:
        """Whether a stage event now would be the very next to run (`core.loop.runs_next`).
        Then the stage runs at once instead, in the same order and at the same time, without
        an event (zero-latency stages: two fewer events per request)."""
        return runs_next(self.env, priority)

    def _admit(self, event: simpy.Event) -> None:
        self._admit_now(cast(Request, event.value))

    def _admit_now(self, req: Request) -> None:
        if req.state is State.TIMED_OUT:
            self.delays.pop(req, None)
            return
        now = self.clock.now()
        self.state.clock = now
        self.deciding = req
        decision = self.admission.decide(req.view, self.state, now)
        if self.events is not None:
            self.events.append((now, "admission", req.name, decision.action))
        if self.decisions is not None:
            self.decisions.append(Decision(now, req.name, "admission", decision.action, "",
                                           decision.reason, tenant=req.tenant_id,
                                           slo_class=req.slo_class))
        if decision.action == "admit":
            if self.delays:
                self.delays.pop(req, None)
            self.state.on_admit(req.tenant_id)
            req.admitted_at = now
            scored = self.priority.compute(req.view, self.state, now)
            if isinstance(scored, PriorityDecision):  # a score with hints (seed G.1)
                req.priority = scored.score
                req.hint(scored.hints)
            else:
                req.priority = scored
            if self.decisions is not None:
                self.decisions.append(Decision(now, req.name, "priority", "score", "",
                                               self.priority.name, priority=req.priority,
                                               tenant=req.tenant_id, slo_class=req.slo_class))
            if self.flow is not None:
                self.flow.enqueue(req)
            else:
                self.dispatch(req)
        elif decision.action == "delay":
            if decision.delay_us <= 0:
                raise ValueError(f"admission policy {self.admission.name!r} delayed "
                                 f"{req.name} by {decision.delay_us} µs; a delay must be > 0")
            self.delay(req, decision.delay_us, now)
        else:
            self._reject(req, RejectCode.ADMISSION, decision.reason or "rejected by admission")

    def delay(self, req: Request, delay_us: int, now: int) -> None:
        """Decide on `req` again `delay_us` from now; a request delayed MAX_ADMISSION_DELAYS
        times, or past the clock's limit, is rejected: a policy that never admits it would
        keep the run going for ever (or overflow the clock)."""
        count = self.delays.get(req, 0) + 1
        if count > MAX_ADMISSION_DELAYS or now + delay_us > MAX_SIM_US:
            self.delays.pop(req, None)
            self._reject(req, RejectCode.ADMISSION_DELAYS, f"admission delayed it {count - 1} "
                         f"times and then by {delay_us} µs more: past the limit of "
                         f"{MAX_ADMISSION_DELAYS:,} delays or the simulated clock's "
                         f"{MAX_SIM_US // US_PER_S:,} s")
            return
        self.delays[req] = count
        StageEvent(self.env, delay_us, ADMISSION, req, self._admit)

    def _reject(self, req: Request, code: str, reason: str) -> None:
        req.state = State.REJECTED
        req.reject_code = code
        req.reject_reason = reason
        self.state.on_reject(req.tenant_id)
        self.recorder.rejections.append((self.env.now, "", req.name))
        settle(req)

    def refuse(self, req: Request, code: str, reason: str) -> None:
        """The gateway queue turns away an admitted request (full, shed or expired)."""
        self.state.on_finish(req.tenant_id)
        if self.events is not None:
            self.events.append((self.env.now, "refused", req.name, code))
        self._reject(req, code, reason)

    def dispatch(self, req: Request) -> None:
        """An admitted request goes on to routing (from admission, or from the queue)."""
        latency = self.config.routing_latency_us
        if latency == 0 and self._runs_next(ROUTING):
            self._route_now(req)
        else:
            StageEvent(self.env, latency, ROUTING, req, self._route)

    def admission_snapshots(self, clock: int) -> Sequence[InstanceSnapshot]:
        """The routable instances of the request being admitted, as admission sees them."""
        req = self.deciding
        fleet = self.fleet if self.models is None or req is None \
            else self.models.fleet_of(req)
        return self.snapshots_now(fleet.routable)

    def snapshots_now(self, instances: Sequence[Instance]) -> Snapshots:
        return Snapshots(self.snapshots, instances, self.env.now)

    def _route(self, event: simpy.Event) -> None:
        self._route_now(cast(Request, event.value))

    def _route_now(self, req: Request) -> None:
        if req.state is State.TIMED_OUT:
            return
        now = self.clock.now()
        state = self.state
        state.clock = now
        fleet = self.fleet if self.models is None else self.models.fleet_of(req)
        joint = None
        if self.pools is not None:  # P/D: the pool the request goes to first
            fleet = self.pools(req, fleet)
            joint, self.joint = self.joint, None
        if not fleet.routable:  # every instance it could go to has failed
            self._retry_or_fail(req, "", "no routable instance")
            return
        if joint is not None:  # seed G.1: prefill and decode chosen in one call
            target, decision, snapshots, fleet = self._choose_both(req, fleet, joint, now)
        else:
            target, decision, snapshots = self.choose(req, fleet, now)
        if self.events is not None:
            self.events.append((now, "routing", req.name, target.id))
        if self.decisions is not None:
            self.decisions.append(self._routing_record(req, decision, snapshots, fleet, now))
        if state.shadow_kv is not None:
            state.shadow_kv.routed(target.id, req.view.prefix_hashes)
        self._count(target.id, req)
        req.routed_at = now
        target.accept(req)

    def choose(self, req: Request, fleet: Fleet, now: int,
               routing: RoutingPolicy | None = None
               ) -> tuple[Instance, RoutingDecision, Snapshots]:
        """The routing policy's (or `routing`'s: a P/D pool's own) choice among the fleet's
        routable instances."""
        policy = self.routing if routing is None else routing
        self.state.instances = fleet.routable_ids
        routable = fleet.routable
        snapshots = Snapshots(self.snapshots, routable, now)
        decision = policy.route(req.view, req.priority, snapshots, self.state, now)
        target = fleet.get(decision.target)
        if target is None or not target.routable:
            raise ValueError(f"routing policy {policy.name!r} chose instance "
                             f"{decision.target!r}; routable: "
                             + ", ".join(i.id for i in routable))
        return target, decision, snapshots

    def _choose_both(self, req: Request, prefill: Fleet, decode: Fleet, now: int
                     ) -> tuple[Instance, RoutingDecision, Snapshots, Fleet]:
        """A `routes_pd` policy's one call for a disaggregated request: it sees both pools'
        routable instances (prefill first) and names the prefill instance (`prefill`, else
        `target`) and the decode one (`decode`; "" leaves it to the decode pool's call at
        the handoff). Returns the pools together as the fleet the decision was made in."""
        both = Fleet()
        for inst in (*prefill, *decode):
            both.add(inst)
        self.state.instances = both.routable_ids
        snapshots = Snapshots(self.snapshots, both.routable, now)
        decision = self.routing.route(req.view, req.priority, snapshots, self.state, now)
        target = prefill.get(decision.prefill or decision.target)
        chosen = decode.get(decision.decode) if decision.decode else None
        if target is None or not target.routable or (
                decision.decode and (chosen is None or not chosen.routable)):
            raise ValueError(
                f"routing policy {self.routing.name!r} chose prefill instance "
                f"{decision.prefill or decision.target!r} and decode instance "
                f"{decision.decode!r}; routable: prefill "
                + ", ".join(prefill.routable_ids) + "; decode " + ", ".join(decode.routable_ids))
        req.decode_target = decision.decode
        return target, decision, snapshots, both

    def _routing_record(self, req: Request, decision: RoutingDecision, snapshots: Snapshots,
                        fleet: Fleet, now: int) -> Decision:
        """The decision with its context: every routable instance as a candidate (best score
        first, ties in fleet order) with its scorer shares, the snapshot the policy read of it,
        its estimated wait and the prompt tokens the shadow KV expects cached there. Reading
        nothing the policy did not read keeps the run the same at every trace level. `fleet`
        is the request's model's (its instances not routable now are the filtered ones)."""
        shadow = self.state.shadow_kv
        assert shadow is not None  # kept whenever decisions are recorded
        view, block = req.view, self.block_size
        scores, breakdown = decision.scores, decision.breakdown or {}
        routable = fleet.routable
        ranked = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
        candidates = tuple(
            Candidate(routable[i].id, scores[i],
                      tuple((name, shares[i]) for name, shares in breakdown.items()),
                      snapshots.taken.get(i), routable[i].estimated_wait_ms(),
                      min(view.input_tokens,
                          shadow.expected_hit(routable[i].id, view.prefix_hashes) * block))
            for i in ranked)
        ids = set(fleet.routable_ids)
        filtered = tuple(i.id for i in fleet if i.id not in ids) + tuple(decision.filtered)
        return Decision(now, req.name, "routing", "route", decision.target, decision.reason,
                        candidates, req.priority, req.tenant_id, req.slo_class,
                        view.input_tokens,
                        f"{view.prefix_hashes[0]:016x}"
                        if view.prefix_hashes else "", filtered)

    def _give_up(self, event: simpy.Event) -> None:
        """The request's client timeout has passed: abandon it unless it has ended. A request
        the engine has finished whose last token is still on its way (output delay) times out
        too: its client never sees it complete."""
        req = cast(Request, event.value)
        state = req.state
        if state is State.REJECTED or state is State.FAILED or (
                state is State.COMPLETED and req.completed_at <= self.env.now):
            return
        if state is not State.COMPLETED:
            instance = self.fleet.get(req.instance) if req.instance else None
            if instance is not None:
                instance.abandon(req)  # it reports back through `finished`
            else:  # in an admission or routing stage, or the gateway queue
                if self.flow is not None:
                    self.flow.abandon(req)
                if req.admitted_at >= 0:
                    self.state.on_finish(req.tenant_id)
                settle(req)
        self._time_out(req)

    def _time_out(self, req: Request) -> None:
        now = self.env.now
        req.state = State.TIMED_OUT
        req.timed_out_at = now
        req.completed_at = -1
        if req.first_token_at > now:  # emitted after the client left
            req.first_token_at = -1
        self.timed_out += 1
        if self.events is not None:
            self.events.append((now, "timed_out", req.name, req.instance))

    # -- instance observer --------------------------------------------------------------------

    def queued(self, instance: str, req: Request) -> None:
        if req.counted == instance:
            self._decrement(self.pending, instance)

    def handed_off(self, instance: str, req: Request) -> None:
        """P/D: the request's KV has left the instance for a decode instance."""
        self._uncount(instance, req)

    def finished(self, instance: str, req: Request) -> None:
        if self._uncount(instance, req):
            self.state.on_finish(req.tenant_id)
            if req.state is State.COMPLETED:
                self.state.on_complete(self.clock.now())
            settle(req)

    def lost(self, instance: str, req: Request) -> None:
        """The instance failed with the request in it: send it again, or it fails."""
        if self._uncount(instance, req):
            self.recorder.faults.append((self.env.now, "lost", instance, req.name,
                                         str(req.progress)))
            self._retry_or_fail(req, instance, f"lost with {instance}")

    def _retry_or_fail(self, req: Request, instance: str, why: str) -> None:
        """Route the request again after its back-off while retries last; else it fails."""
        now = self.env.now
        recovery = self.recovery
        if recovery.on_failure == "retry" and req.retries < recovery.max_retries:
            req.retries += 1
            self._restart(req)
            self.recorder.faults.append((now, "retry", instance, req.name, why))
            if self.events is not None:
                self.events.append((now, "retried", req.name, instance))
            wait = recovery.backoff_us << (req.retries - 1)
            StageEvent(self.env, wait + self.config.routing_latency_us, ROUTING, req,
                       self._route)
            return
        req.state = State.FAILED
        req.completed_at = -1
        req.reject_reason = why if not req.retries else f"{why} after {req.retries} retries"
        if req.first_token_at > now:  # computed, but its token never left the instance
            req.first_token_at = -1
        self.recorder.faults.append((now, "failed", instance, req.name, req.reject_reason))
        if self.events is not None:
            self.events.append((now, "failed", req.name, instance))
        self.state.on_finish(req.tenant_id)
        settle(req)
