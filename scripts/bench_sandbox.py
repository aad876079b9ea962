"""Benchmark: what the sandbox around code candidates costs (docs/security.md, "Cost").

The evaluation is the search issue's unit: 1,000 requests on 2 instances, one routing
candidate, every evaluation on the same seed as a search evaluates its candidates (common
random numbers: each worker prepares the seed's workload once and shares it). The same policy
(least loaded) runs as the `least-loaded` template and as a code candidate in the sandbox, so
the difference is the boundary's cost. Every figure is CPU time (user + system) of every
process involved, the evaluator's (getrusage), each candidate process's (wait4 in the
template) and the template's (/proc), which a busy machine inflates far less than wall time;
each is the median of `--repeat` interleaved rounds.

* start: the template (bubblewrap, a fresh interpreter, its imports, the lock-down self-test),
  once per evaluating process.
* per candidate process: fork, lock-down, load the source, close (no decision).
* per evaluation and per decision: code minus template, on the 1,000-request evaluation.
* forked whole run: the run itself in a process forked per evaluation (what running the
  simulation inside the sandbox would cost instead, without its lock-down), for comparison.
* evaluations/s with 2 workers: what 2 free cores give (2 / CPU per evaluation), and the wall
  rate of `run_many` here (distinct candidates on one seed: weighted-routing templates, and
  least-loaded code candidates differing by a comment), which a loaded machine lowers.

`--aligned` runs this evaluator with address-space randomisation off, as the sandbox runs, so
the interpreter's code sits at the same addresses on both sides of the boundary (a
measurement, not what a search does, and left off: docs/security.md, "The address layout").

    python scripts/bench_sandbox.py [--repeat N] [--evaluations N] [--unpinned] [--aligned]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from blis_simpy.config.scenario import Scenario
from blis_simpy.search import contain, jail
from blis_simpy.search.code import CodePolicy
from blis_simpy.search.sweep import evaluate, plan, run_many
from blis_simpy.sim.run import run

EVALUATION: dict[str, Any] = {
    "version": 1, "name": "eval-1k-2inst", "seed": 42,
    "model": {"name": "meta-llama/llama-3.1-8b-instruct", "gpu": "H100", "tp": 1},
    "cluster": {"instances": 2}, "fitness": {"weights": {"mean_ttft": 1.0}},
    "workload": {"type": "distribution", "num_requests": 1000, "rate_per_s": 40,
                 "prefix_tokens": 128,
                 "prompt": {"mean": 512, "stdev": 256, "min": 16, "max": 4096},
                 "output": {"mean": 128, "stdev": 64, "min": 1, "max": 1024}},
}
LEAST_LOADED = """
class Policy(RoutingPolicy):
    def route(self, req, priority, snapshots, state, clock):
        loads = [s.effective_load for s in snapshots]
        best = loads.index(min(loads))
        return RoutingDecision(snapshots[best].id, "least load",
                               tuple(1.0 / (1.0 + load) for load in loads))
"""
TICK = os.sysconf("SC_CLK_TCK")


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def tree_cpu(pid: int) -> float:
    """CPU seconds of `pid` and every process below it, as /proc counts them now."""
    total, queue = 0.0, [pid]
    while queue:
        current = queue.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / TICK
            for task in os.listdir(f"/proc/{current}/task"):
                queue += map(int, Path(f"/proc/{current}/task/{task}/children").read_text()
                             .split())
        except OSError:
            continue
    return total


class Candidates:
    """The CPU seconds of every candidate process that ended (reported by the template)."""

    def __init__(self) -> None:
        self.cpu = 0.0
        finish = contain.Session.finish

        def counted(session: contain.Session) -> str:
            how = finish(session)
            self.cpu += session.cpu_s
            return how

        contain.Session.finish = counted  # type: ignore[method-assign,assignment]


def measured(action: Callable[[], object], candidates: Candidates) -> float:
    """CPU seconds of `action` in this process, its candidate processes and the template."""
    template = contain.sandbox().process.pid
    before = own_cpu(), candidates.cpu, tree_cpu(template)
    action()
    return own_cpu() - before[0] + candidates.cpu - before[1] + tree_cpu(template) - before[2]


def forked_runs(scenario: Scenario, n: int) -> float:
    """CPU seconds of each run done in a child forked for it (parent and child)."""
    total = 0.0
    for _ in range(n):
        started = own_cpu()
        pid = os.fork()
        if pid == 0:
            run(scenario)
            os._exit(0)
        _, _, usage = os.wait4(pid, 0)
        total += own_cpu() - started + usage.ru_utime + usage.ru_stime
    return total


def aligned() -> bool:
    """Whether this process runs without address-space randomisation; if not, turn it off
    for the next exec (False)."""
    current = jail.personality(jail.PERSONALITY_QUERY)
    if current < 0 or current & jail.ADDR_NO_RANDOMIZE:
        return True
    if jail.personality(current | jail.ADDR_NO_RANDOMIZE) < 0:
        raise SystemExit("bench_sandbox: the kernel refused to turn randomisation off")
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--evaluations", type=int, default=10)
    parser.add_argument("--unpinned", action="store_true",
                        help="run both sides of a session unpinned (what pinning saves)")
    parser.add_argument("--aligned", action="store_true",
                        help="run this evaluator without address-space randomisation, as the "
                        "sandbox runs (what the layout costs)")
    args = parser.parse_args()
    if args.aligned and not aligned():
        os.execv(sys.executable, [sys.executable, *sys.argv])  # (now without randomisation)
    contain.PIN = not args.unpinned
    n = args.evaluations
    scenario = Scenario.from_dict(EVALUATION)
    code = CodePolicy("routing", LEAST_LOADED, id="least-loaded-code")
    template = {"routing.type": "least-loaded"}
    weighted = {f"w{i}": {"routing.type": "weighted", "routing.weights.queue-depth": 1.0,
                          "routing.weights.prefix-affinity": round(0.25 + 0.05 * i, 2)}
                for i in range(4 * n)}
    codes = {f"c{i}": CodePolicy("routing", f"# candidate {i}\n{LEAST_LOADED}", id=f"c{i}")
             for i in range(4 * n)}

    started, wall = own_cpu(), time.perf_counter()
    contain.sandbox()
    start_wall = time.perf_counter() - wall
    start_cpu = own_cpu() - started + tree_cpu(contain.sandbox().process.pid)
    candidates = Candidates()
    tasks = {name: plan({"eval": scenario}, {name: policy}, [scenario.seed], contain.Limits())[0]
             for name, policy in (("template", template), ("code", code))}
    for task in tasks.values():  # warm: the seed's workload prepared, the imports done
        evaluate(task)
    rows: dict[str, list[float]] = {k: [] for k in (
        "process", "template", "code", "forked", "rate template", "rate code")}

    def empty_sessions() -> None:
        for _ in range(n):
            contain.spawn(contain.Limits()).close()

    def evaluations(task: Any) -> Callable[[], None]:
        def action() -> None:
            for _ in range(n):
                assert not evaluate(task)["error"]
        return action

    for _ in range(args.repeat):
        rows["process"].append(measured(empty_sessions, candidates) / n)
        rows["template"].append(measured(evaluations(tasks["template"]), candidates) / n)
        rows["code"].append(measured(evaluations(tasks["code"]), candidates) / n)
        rows["forked"].append(forked_runs(scenario, n) / n)
        for name, policies in (("rate template", weighted), ("rate code", codes)):
            wall = time.perf_counter()
            table = run_many(scenario, policies, [scenario.seed], workers=2)
            rows[name].append(len(policies) / (time.perf_counter() - wall))
            assert (table.error == "").all()
    med = {k: statistics.median(v) for k, v in rows.items()}
    per_eval = med["code"] - med["template"]
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; "
          f"median of {args.repeat} rounds of {n} evaluations"
          f"{'; sessions unpinned' if args.unpinned else ''}"
          f"{'; evaluator at the sandbox addresses' if args.aligned else ''}")
    print(f"template start                      {start_wall:7.3f} s wall, {start_cpu:7.3f} s CPU")
    print(f"candidate process (fork..close)     {med['process'] * 1e3:7.1f} ms CPU")
    print(f"evaluation, template policy         {med['template'] * 1e3:7.1f} ms CPU "
          f"(= {2 / med['template']:.1f} evaluations/s on 2 free cores)")
    print(f"evaluation, code in the sandbox     {med['code'] * 1e3:7.1f} ms CPU "
          f"(= {2 / med['code']:.1f} evaluations/s on 2 free cores)")
    print(f"  the boundary's cost               {per_eval * 1e3:7.1f} ms CPU per evaluation, "
          f"{per_eval * 1e6 / 1000:.0f} us per routing decision")
    print(f"evaluation, whole run forked        {med['forked'] * 1e3:7.1f} ms CPU")
    print(f"evaluations/s, run_many, 2 workers, wall here: {med['rate template']:.1f} "
          f"(weighted templates), {med['rate code']:.1f} (code)")


if __name__ == "__main__":
    main()
