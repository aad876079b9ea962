"""The autoscaler (seed 001 §4, G.1): one SimPy process per deployment config, evaluating the
config's policy every poll interval, and also on events where the scenario asks (a config's
waiting requests reaching a threshold, its recent TTFT above one). Evaluations run after
every instance event of their timestamp (SCALE_CHECK, seed E.3), see aggregate signals only
(D.7), and act through the config's DeploymentPool.

Every target is clamped into the pool's [min, max]; after acting, min <= replicas <= max is
asserted (invariant scale_bounds: an InvariantError names the config). Only failures take a
pool below its min (a replica dead for good no longer counts): whatever its policy says, an
evaluation then grows the pool back to min, as a deployment controller replaces lost pods.
Each action is written to the ScaleLog with the signals behind it; flapping
(scale_oscillation) is judged from them when the run ends (metrics/anomalies.py).

With no horizon the polls stop once nothing but polls is left to happen (every request has
arrived and ended), so an autoscaled run ends as a fixed one does.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Generator

import simpy

from blis_simpy.cluster.actuation import STARTING, DeploymentPool
from blis_simpy.cluster.gateway import Gateway
from blis_simpy.config.deployment import AutoscalerConfig
from blis_simpy.config.workload import SLOLookup, met
from blis_simpy.core.clock import Environment
from blis_simpy.core.errors import InvariantError, PolicyError
from blis_simpy.core.ordering import SCALE_CHECK, Background, StageEvent, only_background_left
from blis_simpy.core.records import Recorder
from blis_simpy.core.request import Request, State
from blis_simpy.core.scale_log import ScaleEvent, ScaleLog
from blis_simpy.core.units import US_PER_MS, US_PER_S
from blis_simpy.engine.step import InstanceObserver
from blis_simpy.policies.autoscale import (
    SIGNAL_HISTORY,
    AutoscalePolicy,
    DeploymentSignals,
    ScaleContext,
    ScaleDecision,
)


class Poll(Background):
    """A periodic evaluation's wake-up, after every instance event of its time."""

    def __init__(self, env: Environment, delay: int) -> None:
        super().__init__(env, delay, SCALE_CHECK)


class ConfigScaler:
    """One config's autoscaling state: its pool, its policy object, what it last did."""

    def __init__(self, pool: DeploymentPool, policy: AutoscalePolicy) -> None:
        self.pool = pool
        self.policy = policy
        self.last_action: ScaleEvent | None = None
        self.last_trigger = -1
        self.process: simpy.Process | None = None  # its poll loop, once started
        self.seen_requests = 0  # recorder.requests already counted for the request rate
        self.seen_tokens: dict[str, int] = {}  # instance -> output tokens already counted
        self.seen_at = 0
        self.judged = self.good = 0  # completions with SLO targets since the last look
        self.history: deque[DeploymentSignals] = deque(maxlen=SIGNAL_HISTORY)


class Autoscaler:
    def __init__(self, env: Environment, config: AutoscalerConfig, scalers: list[ConfigScaler],
                 gateway: Gateway, recorder: Recorder, log: ScaleLog, policy_path: str,
                 one_model: bool, slo: SLOLookup) -> None:
        self.env = env
        self.config = config
        self.scalers = scalers
        self.gateway = gateway
        self.recorder = recorder
        self.log = log
        self.policy_path = policy_path
        self.one_model = one_model
        self.interval = round(config.interval_s * US_PER_S)
        self.slo = slo
        for scaler in scalers:
            scaler.process = env.process(self._poll(scaler))
            scaler.pool.watch(self._watch_for(scaler))

    def _watch_for(self, scaler: ConfigScaler
                   ) -> Callable[[InstanceObserver], InstanceObserver]:
        def wrap(inner: InstanceObserver) -> InstanceObserver:
            return ScalerWatch(self, scaler, inner)
        return wrap

    def _poll(self, scaler: ConfigScaler) -> Generator[simpy.Event, object, None]:
        while True:
            yield Poll(self.env, self.interval)
            if only_background_left(self.env):
                return
            self.evaluate(scaler, "periodic")

    def trigger(self, scaler: ConfigScaler, reason: str) -> None:
        """An event trigger fired: evaluate once the instance events of this time are done,
        at most once per min_gap."""
        now = self.env.now
        gap = round(self.config.triggers.min_gap_s * US_PER_S)
        if scaler.last_trigger >= 0 and now - scaler.last_trigger < gap:
            return
        scaler.last_trigger = now
        StageEvent(self.env, 0, SCALE_CHECK, scaler,
                   lambda event: self.evaluate(scaler, reason))

    # -- one evaluation ----------------------------------------------------------------------

    def evaluate(self, scaler: ConfigScaler, trigger: str) -> None:
        pool = scaler.pool
        now = self.env.now
        bounds = pool.bounds
        before = pool.replicas
        last = scaler.last_action
        signals = self.signals(scaler)
        ctx = ScaleContext(pool.config, pool.model, before, bounds.min, bounds.max, now,
                           now - (last.time if last is not None else 0), trigger,
                           signals, tuple(scaler.history))
        scaler.history.append(signals)
        decision = self._decide(scaler, ctx)
        if before < bounds.min and (decision.action != "up" or decision.target < bounds.min):
            decision = ScaleDecision("up", bounds.min, f"replace failed replicas: {before} "
                                     f"left, min {bounds.min}")  # failures only go below min
        if decision.action == "none":
            return
        target = min(max(decision.target, bounds.min), bounds.max)
        note = ""
        if decision.action == "up" and target > before:
            note = pool.grow(target - before)
        elif decision.action == "down" and target < before:
            pool.shrink(before - target)
        else:
            return  # clamped to the current count: nothing to do
        after = pool.replicas
        if not bounds.min <= after <= bounds.max:
            raise InvariantError(f"scale_bounds: config {pool.config!r} has {after} replicas "
                                 f"after scaling {decision.action}, outside [{bounds.min}, "
                                 f"{bounds.max}]")
        event = ScaleEvent(now, pool.config, decision.action, before, after,
                           decision.reason + note, shown(ctx.signals), trigger)
        self.log.events.append(event)  # flapping is judged from these (metrics/anomalies.py)
        scaler.last_action = event

    def _decide(self, scaler: ConfigScaler, ctx: ScaleContext) -> ScaleDecision:
        """The policy's decision; a user policy's error or malformed answer names it."""
        policy = scaler.policy
        try:
            decision = policy.evaluate(ctx)
        except Exception as exc:
            raise PolicyError(self.policy_path, f"{policy.name}.evaluate for config "
                              f"{ctx.config!r} raised {type(exc).__name__}: {exc}") from exc
        if not isinstance(decision, ScaleDecision) or decision.action not in (
                "none", "up", "down") or not isinstance(decision.target, int):
            raise PolicyError(self.policy_path, f"{policy.name}.evaluate returned "
                              f"{decision!r}; expected a ScaleDecision(action none|up|down, "
                              "target int, reason)")
        return decision

    def signals(self, scaler: ConfigScaler) -> DeploymentSignals:
        """The config's aggregate load over its routable replicas."""
        pool = scaler.pool
        ready = [inst for inst in pool.members if inst.routable]
        starting = [inst for inst in pool.members
                    if inst.state in STARTING and not inst.routable]
        in_flight = self.gateway.in_flight
        n = len(ready)
        now = self.env.now
        arrived = self.recorder.requests
        count = len(arrived) - scaler.seen_requests
        if not self.one_model:
            count = sum(1 for req in itertools.islice(arrived, scaler.seen_requests, None)
                        if self._serves(pool, req))
        elapsed = now - scaler.seen_at
        rate = count / (elapsed / US_PER_S) if elapsed > 0 else 0.0
        tokens = 0
        for inst in pool.members:  # emitted since the last look, by every replica serving
            tokens += inst.output_tokens - scaler.seen_tokens.get(inst.id, 0)
            scaler.seen_tokens[inst.id] = inst.output_tokens
        scaler.seen_requests, scaler.seen_at = len(arrived), now
        judged, scaler.judged, good, scaler.good = scaler.judged, 0, scaler.good, 0
        return DeploymentSignals(
            ready_replicas=n,
            starting_replicas=len(starting),
            queued_requests=sum(inst.queue_depth for inst in ready),
            running_requests=sum(len(inst.running) for inst in ready),
            in_flight=sum(in_flight.get(inst.id, 0) for inst in ready),
            utilization=sum(len(inst.running) / inst.max_running for inst in ready) / n
            if n else 0.0,
            kv_utilization=sum(inst.kv.used / inst.kv.total for inst in ready) / n if n else 0.0,
            kv_capacity_tokens=sum(inst.capacity for inst in ready),
            kv_used_tokens=sum(inst.kv.used * inst.kv.block_size for inst in ready),
            starting_kv_capacity_tokens=sum(inst.capacity for inst in starting),
            request_rate=rate,
            recent_ttft_ms=sum(inst.recent_ttft_ms() for inst in ready) / n if n else 0.0,
            recent_tpot_ms=sum(inst.recent_tpot_ms() for inst in ready) / n if n else 0.0,
            output_tokens_per_s=tokens / (elapsed / US_PER_S) if elapsed > 0 else 0.0,
            slo_attainment=good / judged if judged else None,
            ttft_p99_ms=p99([t for inst in ready for t in inst.recent_ttft]) / US_PER_MS,
        )

    def judge(self, scaler: ConfigScaler, req: Request) -> None:
        """A request the config's replicas completed, against its SLO targets (if any)."""
        target = self.slo.of(req.tenant_id, req.slo_class)
        if target is None or not target.any_set:
            return
        scaler.judged += 1
        first, done = req.first_token_at, req.completed_at
        tpot = (done - first) / (req.output_len - 1) if req.output_len > 1 else 0.0
        if met(target, (first - req.arrival) / US_PER_MS, tpot / US_PER_MS,
               (done - req.arrival) / US_PER_MS):
            scaler.good += 1

    def _serves(self, pool: DeploymentPool, req: Request) -> bool:
        models = self.gateway.models
        return models is None or models.model_of(req) == pool.model.lower()


def p99(values: list[int]) -> float:
    """The nearest-rank 99th percentile (0 without values)."""
    if not values:
        return 0.0
    values.sort()
    return float(values[-(-99 * len(values) // 100) - 1])


def shown(signals: DeploymentSignals) -> str:
    """The signals as `key=value` pairs for the scale_events table."""
    return " ".join(f"{name}={value:.3g}" if isinstance(value, float) else f"{name}={value}"
                    for name, value in ((f, getattr(signals, f))
                                        for f in DeploymentSignals.__dataclass_fields__))


class ScalerWatch:
    """An instance observer (wrapping the gateway) that judges each request its config's
    replicas complete against its SLO targets (the `slo_attainment` signal), and fires the
    config's evaluation when the config's waiting requests reach `triggers.queue_depth`, or
    when a request finishes while the mean recent TTFT of the config's routable replicas is
    above `triggers.recent_ttft_ms` (latency, hence SLO attainment, degrading). Installed only
    with an autoscaler, so a fixed cluster pays nothing."""

    def __init__(self, autoscaler: Autoscaler, scaler: ConfigScaler,
                 inner: InstanceObserver) -> None:
        self.autoscaler = autoscaler
        self.scaler = scaler
        self.inner = inner
        triggers = autoscaler.config.triggers
        self.queue_depth = triggers.queue_depth
        self.ttft_ms = triggers.recent_ttft_ms

    def queued(self, instance: str, req: Request) -> None:
        self.inner.queued(instance, req)
        if self.queue_depth is not None:
            waiting = 1 + sum(inst.queue_depth for inst in self.scaler.pool.members
                              if inst.routable)  # this one joins the queue right after
            if waiting >= self.queue_depth:
                self.autoscaler.trigger(self.scaler, "queue_depth")

    def handed_off(self, instance: str, req: Request) -> None:
        self.inner.handed_off(instance, req)

    def lost(self, instance: str, req: Request) -> None:
        self.inner.lost(instance, req)

    def finished(self, instance: str, req: Request) -> None:
        self.inner.finished(instance, req)
        if req.state is State.COMPLETED:
            self.autoscaler.judge(self.scaler, req)
        if self.ttft_ms is not None:
            ready = [inst for inst in self.scaler.pool.members if inst.routable]
            if ready and sum(inst.recent_ttft_ms() for inst in ready) / len(ready) \
                    > self.ttft_ms:
                self.autoscaler.trigger(self.scaler, "recent_ttft")
