"""Counterfactual regret by replay: what a routing decision actually cost.

The decision trace estimates, for every routing decision, the TTFT the request would have had
on each candidate (`metrics/trace/regret.py`): cheap, but a model (it ignores the running
batch, the steps the request shares, what later requests do). The simulator is deterministic,
so the real answer is one run away: run the scenario again, identical up to the sampled
decision, send that one request to the alternative instance instead, and read the request's
actual TTFT and E2E latency (and the run's mean TTFT) there. `replay_regret` does that for a
sample of a run's routing decisions and every alternative each had, and reports the estimate
beside the replay, so the estimate's error is measured, not assumed.

A replay runs from the start (a simulation's state is generators and callbacks: it cannot be
copied at the decision), so it costs one run per (decision, alternative). Only the cluster's
own routing decisions are replayed (not a P/D pool's choice of decode instance).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.records import Decision, Recorder
from blis_simpy.core.request import RequestView
from blis_simpy.core.router_state import RouterState
from blis_simpy.core.snapshot import InstanceSnapshot
from blis_simpy.metrics.trace.regret import estimated_ttft_ms, prefill_ms_per_token
from blis_simpy.policies.routing import RoutingDecision, RoutingPolicy
from blis_simpy.sim.run import load, prepare, simulate

if TYPE_CHECKING:
    import pandas as pd

    from blis_simpy.config.scenario import Scenario
    from blis_simpy.sim.result import Result


class Forced(RoutingPolicy):
    """The run's own routing policy, except that one request goes to `target`. The policy
    still decides that request (its state evolves as in the run); only the target changes."""

    def __init__(self, inner: RoutingPolicy, request: str, target: str) -> None:
        super().__init__(None)
        self.inner, self.request, self.target = inner, request, target
        self.reads_shadow_kv = inner.reads_shadow_kv
        self.name = inner.name

    def route(self, req: RequestView, priority: float, snapshots: Sequence[InstanceSnapshot],
              state: RouterState, clock: int) -> RoutingDecision:
        decision = self.inner.route(req, priority, snapshots, state, clock)
        if req.id != self.request:
            return decision
        return decision._replace(target=self.target, reason=f"replayed on {self.target}")


@dataclass(frozen=True)
class Outcome:
    ttft_ms: float
    e2e_ms: float
    run_ttft_mean_ms: float


def outcome(result: Result, request: str) -> Outcome:
    requests = result.requests
    row = requests[requests.id == request].iloc[0]
    return Outcome(float(row["ttft_ms"]), float(row["e2e_ms"]),
                   float(result.summary.get("ttft_mean_ms") or math.nan))


def replayed(scenario: Scenario, request: str, target: str) -> Outcome:
    """Run `scenario` again with `request` routed to `target`."""
    sim = prepare(scenario, recorder=Recorder())
    sim.gateway.routing = Forced(sim.gateway.routing, request, target)
    return outcome(simulate(sim), request)


def sampled(decisions: Sequence[Decision], completed: set[str], count: int
            ) -> list[Decision]:
    """`count` routing decisions spread evenly over the run (deterministic: no random
    source), among those whose request completed and that had an alternative."""
    routing = [d for d in decisions if d.stage == "routing" and d.request in completed
               and len(d.candidates) > 1]
    if count >= len(routing):
        return routing
    step = len(routing) / count
    return [routing[int(i * step)] for i in range(count)]


def replay_regret(scenario: Scenario | str | Path, *, sample: int = 10,
                  seed: int | None = None, overrides: Mapping[str, Any] | None = None
                  ) -> pd.DataFrame:
    """For `sample` routing decisions of a run and every alternative instance each had: the
    request's actual TTFT and E2E latency where it went and where it would have gone (each
    alternative replayed), the run's mean TTFT both ways, and the decision trace's estimates
    of the same TTFTs. One row per (decision, alternative); `regret_summary` condenses it."""
    import pandas as pd

    if isinstance(sample, bool) or not isinstance(sample, int) or sample < 1:
        raise ScenarioError("sample", f"{sample!r}", "a whole number of decisions >= 1")
    base = load(scenario, seed=seed, overrides=overrides)
    sim = prepare(base, recorder=Recorder(decisions=True))
    if sim.scenario.deployment is not None:
        raise ScenarioError("scenario", "replays cover a fixed cluster's routing only",
                            "a scenario without a deployment section")
    actual = simulate(sim)
    decisions = sim.recorder.decisions or []
    requests = actual.requests
    completed = set(requests.id[requests.final_state == "completed"])
    steps = actual.steps
    per_token = prefill_ms_per_token(steps.prefill_tokens.to_numpy(),
                                     steps.decode_requests.to_numpy(),
                                     steps.duration_ms.to_numpy() * 1000)
    rows = []
    for decision in sampled(decisions, completed, sample):
        mine = outcome(actual, decision.request)
        estimate = {c.instance: estimated_ttft_ms(c, decision.input_tokens, per_token)
                    for c in decision.candidates}
        for candidate in decision.candidates:
            if candidate.instance == decision.instance:
                continue
            other = replayed(sim.scenario, decision.request, candidate.instance)
            rows.append({
                "request": decision.request, "time_s": decision.time / 1e6,
                "chosen": decision.instance, "alternative": candidate.instance,
                "ttft_ms": mine.ttft_ms, "alternative_ttft_ms": other.ttft_ms,
                "e2e_ms": mine.e2e_ms, "alternative_e2e_ms": other.e2e_ms,
                "run_ttft_mean_ms": mine.run_ttft_mean_ms,
                "alternative_run_ttft_mean_ms": other.run_ttft_mean_ms,
                "est_ttft_ms": estimate[decision.instance],
                "est_alternative_ttft_ms": estimate[candidate.instance]})
    return pd.DataFrame(rows)


def regret_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per decision: the replayed regret (the request's TTFT where it went minus its best
    TTFT on any alternative, >= 0) and E2E regret, beside the decision trace's estimate of the
    TTFT regret, and the estimate's errors: how far its regret is from the replay's, and how
    far its TTFT on the chosen instance is from the actual one."""
    import pandas as pd

    out = []
    for request, group in table.groupby("request", sort=False):
        first = group.iloc[0]
        best_alt = group.alternative_ttft_ms.min()
        est_best = min(group.est_alternative_ttft_ms.min(), first.est_ttft_ms)
        replay = max(0.0, first.ttft_ms - best_alt)
        estimate = max(0.0, first.est_ttft_ms - est_best)
        out.append({"request": request, "chosen": first.chosen,
                    "best_alternative": group.alternative.iloc[
                        int(group.alternative_ttft_ms.to_numpy().argmin())],
                    "ttft_ms": first.ttft_ms, "best_alternative_ttft_ms": best_alt,
                    "replay_regret_ms": replay,
                    "replay_e2e_regret_ms": max(0.0, first.e2e_ms
                                                - group.alternative_e2e_ms.min()),
                    "estimated_regret_ms": estimate,
                    "regret_error_ms": abs(estimate - replay),
                    "est_ttft_error_ms": abs(first.est_ttft_ms - first.ttft_ms)})
    return pd.DataFrame(out)
