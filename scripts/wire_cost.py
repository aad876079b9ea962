"""Instructions per routing decision across the sandbox's wire, both sides in one process and
no crossing: record the first K routing calls of the sandbox benchmark's evaluation (a code
candidate, least loaded), then replay them N times through the evaluator's stand-in (message
built, reply read and checked, the policy guard) and the candidate's `Server` (message read,
views, snapshots and router state rebuilt, the candidate's code, reply written). Run it twice
under callgrind, with N = 0 and N > 0; the difference of the two totals over N x K is one
decision's cost on both sides, without the kernel's share (docs/security.md, "Cost").

    valgrind --tool=callgrind python scripts/wire_cost.py 0
    valgrind --tool=callgrind python scripts/wire_cost.py 4
    # (Ir(4) - Ir(0)) / (4 x 300)

`--evaluator-only` answers every call with a fixed reply instead of running the candidate's
side: the evaluator's share alone.

`--whole code|template` runs N whole evaluations instead (after one to warm up), the candidate
as code (both sides in this process, as above) or as the `least-loaded` template: under
callgrind, (Ir(code, N) - Ir(code, 0) - Ir(template, N) + Ir(template, 0)) / (N x 1,000) is
a decision's cost in a real run, where the router state changes between calls (the replay's
does not).
"""

from __future__ import annotations

import argparse
import marshal
from typing import Any

from bench_sandbox import EVALUATION, LEAST_LOADED

from blis_simpy.config.scenario import Scenario
from blis_simpy.policies.routing import RoutingDecision
from blis_simpy.search import cell, remote, wire
from blis_simpy.search.code import CodePolicy
from blis_simpy.search.contain import Limits
from blis_simpy.search.sweep import evaluate_here, plan
from blis_simpy.sim.build import build
from blis_simpy.sim.run import simulate

FIXED = wire.route_reply(RoutingDecision("instance_1", "least load", (0.5, 1.0))) or b""


class InProcess:
    """A session whose candidate side runs here: each message framed and read back as the
    sandbox would, its reply read as the evaluator does."""

    def __init__(self, code: CodePolicy, evaluator_only: bool) -> None:
        self.server = cell.Server(-1)
        self.server.load(code.source, code.axis, code.entry, "wire-cost")
        self.views, self.state = wire.ViewSender(), wire.StateSender()
        self.evaluator_only = evaluator_only

    def exchange(self, data: bytes, answer: Any = None) -> Any:
        if self.evaluator_only and b"route" in data[:24]:  # (a routing call, not read)
            return FIXED[4:]
        reply = self.server.handle(marshal.loads(data[4:]))
        body = reply[4:]
        return body if body[:1] == b"R" else wire.parse(body)

    def call(self, message: list[Any], answer: Any = None) -> Any:
        return self.exchange(wire.frame(message), answer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("replays", type=int, help="times the recorded decisions are replayed")
    parser.add_argument("--decisions", type=int, default=300)
    parser.add_argument("--evaluator-only", action="store_true")
    parser.add_argument("--whole", choices=("code", "template"),
                        help="replay whole evaluations of the candidate as code or template")
    args = parser.parse_args()
    code = CodePolicy("routing", LEAST_LOADED, id="wire-cost")
    if args.whole:
        whole(code, args.whole, args.replays)
        return
    task = plan({"eval": Scenario.from_dict(EVALUATION)}, {"code": code}, [42], Limits())[0]
    session = InProcess(code, args.evaluator_only)
    remote.SESSION.set(session)  # type: ignore[arg-type]
    remote.MODULES.add(code)
    sim = build(task.scenario)
    policy = sim.gateway.routing
    calls: list[tuple[Any, ...]] = []
    route = policy.route

    def recording(*call: Any) -> Any:
        if len(calls) < args.decisions:
            calls.append(call)
        return route(*call)

    setattr(policy, "route", recording)  # noqa: B010 (an instance attribute shadows it)
    simulate(sim)
    del policy.route
    for _ in range(args.replays):
        session.views.sent.clear()  # every view goes whole, as in the run
        session.server.views.views.clear()
        for call in calls:
            route(*call)
    print(f"{len(calls)} routing decisions replayed {args.replays}x")


def whole(code: CodePolicy, form: str, count: int) -> None:
    """`count` whole evaluations (after one), the candidate as code or as the template."""
    policy = code if form == "code" else {"routing.type": "least-loaded"}
    task = plan({"eval": Scenario.from_dict(EVALUATION)}, {form: policy}, [42], Limits())[0]
    if form == "code":
        remote.MODULES.add(code)
    for _ in range(count + 1):
        if form == "code":
            remote.SESSION.set(InProcess(code, False))  # type: ignore[arg-type]
        row = evaluate_here(task)
        assert not row["error"], row["error"]
    print(f"{count} whole evaluations ({form}) after one: mean TTFT {row['ttft_mean_ms']} ms")


if __name__ == "__main__":
    main()
