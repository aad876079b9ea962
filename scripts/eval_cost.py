"""One policy-search evaluation, N times, for instruction counts (docs/performance.md,
"Policy-search evaluations").

`template`: bench_sandbox's evaluation (1,000 requests, 2 instances, the `least-loaded`
template); `sweep`: bench.py's search evaluation (the quickstart with 2 instances and 1,000
requests at 24 req/s, one weighted-routing candidate). Either is planned as `run_many` plans
it and run through `sweep.evaluate` (the workload prepared once, by the warm-up evaluation,
which always runs), so under callgrind (Ir(N) - Ir(0)) / N is one evaluation's instructions:

    cd scripts && valgrind --tool=callgrind python eval_cost.py template 0   # and 2
    cd scripts && valgrind --tool=callgrind python eval_cost.py sweep 0      # and 2

Without valgrind it prints the CPU time per evaluation (noisy on a shared machine).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from bench_sandbox import EVALUATION

from blis_simpy.config.scenario import Scenario
from blis_simpy.search.contain import Limits
from blis_simpy.search.sweep import evaluate, plan
from blis_simpy.sim.run import load

SEARCH_OVERRIDES = {"cluster.instances": 2, "workload.num_requests": 1000,
                    "workload.rate_per_s": 24}  # scripts/bench.py's search evaluation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("evaluation", choices=("template", "sweep"))
    parser.add_argument("n", type=int, help="evaluations after the warm-up one")
    args = parser.parse_args()
    if args.evaluation == "template":
        scenario = Scenario.from_dict(EVALUATION)
        candidate: dict[str, Any] = {"routing.type": "least-loaded"}
    else:
        scenario = load("quickstart", overrides=SEARCH_OVERRIDES)
        candidate = {"routing.type": "weighted", "routing.weights.queue-depth": 1.0,
                     "routing.weights.prefix-affinity": 0.3}
    task = plan({"eval": scenario}, {"candidate": candidate}, [42], Limits())[0]
    evaluate(task)  # warm: the seed's workload prepared, the imports done
    started = time.process_time()
    for _ in range(args.n):
        row = evaluate(task)
        assert not row["error"]
    if args.n:
        print(f"{(time.process_time() - started) / args.n * 1e3:.1f} ms CPU per evaluation")


if __name__ == "__main__":
    main()
