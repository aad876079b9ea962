"""Instructions per routing decision: record the arguments of a scenario's first K routing
decisions during a real run, then replay them N times through the same policy. Run it twice
under callgrind, with N = 0 and N > 0; the difference of the two totals over N x K is one
decision's cost (the run, imports and start-up cancel out).

    valgrind --tool=callgrind python scripts/route_cost.py 0
    valgrind --tool=callgrind python scripts/route_cost.py 5
    # (Ir(5) - Ir(0)) / (5 x 400)

The policy's own state (a scorer's memory, the shadow KV) is the run's end state, the same
for every build compared.
"""

from __future__ import annotations

import argparse
from typing import Any

from blis_simpy.sim.run import prepare


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("replays", type=int, help="times the recorded decisions are replayed")
    parser.add_argument("--scenario", default="routing-weighted")
    parser.add_argument("--decisions", type=int, default=400)
    parser.add_argument("--duration-s", type=float, default=10.0)
    args = parser.parse_args()
    sim = prepare(args.scenario, overrides={"workload.duration_s": args.duration_s})
    policy = sim.gateway.routing
    calls: list[tuple[Any, ...]] = []
    route = policy.route

    def recording(req: Any, priority: float, snaps: Any, state: Any, clock: int) -> Any:
        if len(calls) < args.decisions:
            calls.append((req, priority, list(snaps), state, clock))
        return route(req, priority, snaps, state, clock)

    setattr(policy, "route", recording)  # noqa: B010 (an instance attribute shadows it)
    sim.run()
    del policy.route
    if len(calls) < args.decisions:
        raise SystemExit(f"only {len(calls)} decisions: a longer --duration-s")
    for _ in range(args.replays):
        for req, priority, snaps, state, clock in calls:
            route(req, priority, snaps, state, clock)
    print(f"{type(policy).__name__}: {len(calls)} decisions over {len(calls[0][2])} instances, "
          f"replayed {args.replays}x")


if __name__ == "__main__":
    main()
