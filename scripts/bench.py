"""Benchmark: run the cases in blis_simpy/scenarios/bench/ and print one table of timings.

For each case:

* whole process: `blis-simpy run CASE --out TMP --quiet` timed from outside, the median of
  `--repeat` runs: interpreter start, imports, workload, simulation, writing every file. This
  is what a user (or a search loop calling the CLI) pays.
* in process: `blis_simpy.run(scenario)` timed after the imports, in a fresh interpreter
  (workload, event loop and metrics; nothing written), the median of the same runs.
* the same runs' CPU time (user + system, median): on a busy machine the wall time also
  counts waiting for a core, the CPU time does not.
* simulated requests per second (arrived requests / in-process time), events per second of
  the event loop, and the whole process's peak RSS.
* the Go reference: for a `compat: blis` distribution case, the equivalent `blis run` command
  line is derived from the scenario and run once, side by side, when the binary is present
  ($BLIS_GO_DIR/blis, default ~/.cache/blis-go/blis). Its CPU time (user + system) is divided
  by our whole-process wall time (the ratio column: how many times faster we are), and its
  completed count and mean E2E are checked against ours.

Then the policy-search evaluation rate (`--search N`, default 40; 0 skips it): N
parameterized candidates (weighted routing, each with its own weights) evaluated by
`run_many` on the 1,000-request, 2-instance evaluation (quickstart with 2 instances, 1,000
requests at 24 req/s) on a pool of `--workers` processes (default 2), in a fresh interpreter,
timed from the call to the table (planning, the default score's baseline run, the pool's
start-up and every row included): evaluations per second of wall time, and per second of
CPU (the parent's and its workers'); on a busy machine the wall rate counts waiting for a
core, the CPU rate times the workers is what that many free cores give. The median of
`--repeat` runs. The same for code candidates (`--search-code N`, default as many as
`--search`; 0 skips it):
N least-loaded routing policies as code, each its own source (a numbered comment), every
one evaluated in the sandbox (docs/security.md), so the rate includes the boundary.

Results are saved as JSON (`--save`, default out/bench/latest.json); `--compare OLD.json`
prints the change of each case against an earlier file.

    python scripts/bench.py [CASE.yaml ...] [--repeat N] [--no-go] [--compare OLD.json]
                            [--search N] [--search-code N] [--workers N]
"""

from __future__ import annotations

import argparse
import compileall
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "blis_simpy" / "scenarios" / "bench"
DEFAULT_SAVE = ROOT / "out" / "bench" / "latest.json"
CLI = [sys.executable, "-m", "blis_simpy.cli"]


# ---------------------------------------------------------------- child: in-process timing

def measure_in_process(path: str) -> dict[str, Any]:
    """Import, run once without writing anything, and say how long the run took."""
    import blis_simpy
    from blis_simpy.sim.build import RunProgress

    final: list[RunProgress] = []
    scenario = blis_simpy.Scenario.from_yaml(path)
    started = time.perf_counter()
    result = blis_simpy.run(scenario, progress=lambda p: final.append(p) if p.done else None)
    elapsed = time.perf_counter() - started
    return {
        "in_process_s": elapsed,
        "event_loop_s": result.wall_time_s,
        "events": final[-1].events,
        "arrived": int(result.summary.get("arrived_requests", len(result.requests))),
        "completed": int(result.summary["completed_requests"]),
        "e2e_mean_ms": float(result.summary["e2e_mean_ms"]),
    }


SEARCH_OVERRIDES = {"cluster.instances": 2, "workload.num_requests": 1000,
                    "workload.rate_per_s": 24}


def measure_search(candidates: int, workers: int, code: bool = False) -> dict[str, Any]:
    """In a fresh interpreter: `candidates` weighted-routing candidates (`code`: least-loaded
    routing as code, in the sandbox) on the 1,000-request, 2-instance evaluation with
    run_many on `workers` processes."""
    from blis_simpy.search.sweep import run_many
    from blis_simpy.sim.run import load

    scenario = load("quickstart", overrides=SEARCH_OVERRIDES)
    policies: dict[str, Any] = {
        f"w{i}": {"routing.type": "weighted", "routing.weights.queue-depth": 1.0,
                  "routing.weights.prefix-affinity": round(0.25 + 0.05 * i, 2)}
        for i in range(candidates)}
    if code:
        from bench_sandbox import LEAST_LOADED  # (this folder: sys.path[0])

        from blis_simpy.search.code import CodePolicy
        policies = {f"c{i}": CodePolicy("routing", f"# candidate {i}\n{LEAST_LOADED}",
                                        id=f"c{i}") for i in range(candidates)}
    before, started = os.times(), time.perf_counter()
    table = run_many(scenario, policies, [42], workers=workers)
    wall, after = time.perf_counter() - started, os.times()
    cpu = sum(after[i] - before[i] for i in range(4))  # user + system, own and children's
    assert len(table) == candidates and (table.error == "").all()
    return {"evaluations": candidates, "workers": workers, "wall_s": wall, "cpu_s": cpu,
            "per_s": candidates / wall, "per_cpu_s": candidates / cpu}


def search_rate(candidates: int, workers: int, repeat: int, code: bool = False
                ) -> dict[str, Any]:
    runs = []
    for _ in range(repeat):
        text, *_ = timed([sys.executable, __file__, "--one-search", str(candidates),
                          "--workers", str(workers), *(["--code"] if code else [])])
        runs.append(json.loads(text.strip().splitlines()[-1]))
    runs.sort(key=lambda r: r["per_s"])
    row = dict(runs[len(runs) // 2])
    row["per_cpu_s_median"] = statistics.median(r["per_cpu_s"] for r in runs)
    row["code"] = code
    return row


def search_line(row: dict[str, Any]) -> str:
    kind = "code (sandboxed)" if row.get("code") else "weighted"
    return (f"search evaluations (1,000 requests, 2 instances, {row['evaluations']} {kind} "
            f"candidates, {row['workers']} workers): {row['per_s']:.1f}/s wall "
            f"({row['wall_s']:.2f} s), {row['per_cpu_s_median']:.1f} per CPU-second "
            f"(= {row['per_cpu_s_median'] * row['workers']:.1f}/s on {row['workers']} free "
            "cores)")


# ---------------------------------------------------------------- timing child processes

def timed(cmd: list[str], cwd: Path | None = None) -> tuple[str, float, float, float]:
    """Run `cmd`; its stdout, wall seconds, CPU seconds (user + system) and peak RSS (MiB),
    taken from the child's own resource usage."""
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        stderr = proc.stderr.read().decode() if proc.stderr else ""
        if proc.returncode != 0:
            raise SystemExit(f"bench: {' '.join(cmd)} failed ({proc.returncode}):\n{stderr}")
        out.seek(0)
        text = out.read().decode()
    return text, wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def whole_process(path: Path, repeat: int) -> dict[str, Any]:
    """The CLI run end to end, `repeat` times: median wall time, peak RSS of the largest."""
    walls, cpus, rss = [], [], 0.0
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            _, wall, cpu, peak = timed([*CLI, "run", str(path), "--out", f"{tmp}/out",
                                        "--quiet"])
        walls.append(wall)
        cpus.append(cpu)
        rss = max(rss, peak)
    return {"process_s": statistics.median(walls), "process_runs_s": walls,
            "process_cpu_s": statistics.median(cpus), "peak_rss_mb": rss}


def in_process(path: Path, repeat: int) -> dict[str, Any]:
    """The in-process measurement in `repeat` fresh interpreters; the median run."""
    runs = []
    for _ in range(repeat):
        text, *_ = timed([sys.executable, __file__, "--one", str(path)])
        runs.append(json.loads(text.strip().splitlines()[-1]))
    runs.sort(key=lambda r: r["in_process_s"])
    return runs[len(runs) // 2]


# ---------------------------------------------------------------- the Go reference

def go_binary() -> Path | None:
    folder = Path(os.environ.get("BLIS_GO_DIR", Path.home() / ".cache" / "blis-go"))
    binary = folder / "blis"
    return binary if binary.is_file() and os.access(binary, os.X_OK) else None


def go_command(path: Path) -> list[str] | None:
    """The reference's `blis run` flags for a compat distribution case (engine.md §7 flag
    names), or None when the case has no reference equivalent."""
    import yaml

    data = yaml.safe_load(path.read_text())
    workload = data.get("workload", {})
    if data.get("compat") != "blis" or workload.get("type") != "distribution":
        return None
    model = data["model"]
    prompt, output = workload["prompt"], workload["output"]
    flags = {
        "model": model["name"], "hardware": model["gpu"], "tp": model["tp"],
        "num-instances": data.get("cluster", {}).get("instances", 1),
        "routing-policy": data.get("policies", {}).get("routing", {}).get("type",
                                                                          "round-robin"),
        "rate": workload["rate_per_s"], "num-requests": workload["num_requests"],
        "prompt-tokens": prompt["mean"], "prompt-tokens-stdev": prompt["stdev"],
        "prompt-tokens-min": prompt["min"], "prompt-tokens-max": prompt["max"],
        "output-tokens": output["mean"], "output-tokens-stdev": output["stdev"],
        "output-tokens-min": output["min"], "output-tokens-max": output["max"],
        "seed": data["seed"],
    }
    return ["run", *(f"--{name}={value}" for name, value in flags.items())]


def cluster_metrics(stdout: str) -> dict[str, Any]:
    """The reference's last `=== Simulation Metrics ===` block: the cluster's."""
    blocks = re.findall(r"=== Simulation Metrics ===\n(\{.*?\n\})", stdout, re.S)
    if not blocks:
        raise SystemExit("bench: the Go reference printed no metrics block")
    return dict(json.loads(blocks[-1]))


def go_reference(path: Path, binary: Path | None, ours: dict[str, Any]) -> dict[str, Any]:
    """One run of the reference, its CPU time, and whether its outcome matches ours."""
    command = go_command(path)
    if command is None:
        return {"go": "no reference equivalent"}
    if binary is None:
        return {"go": "binary not found", "go_command": command}
    stdout, wall, cpu, rss = timed([str(binary), *command], cwd=binary.parent)
    metrics = cluster_metrics(stdout)
    agrees = (metrics["completed_requests"] == ours["completed"]
              and metrics["e2e_mean_ms"] == ours["e2e_mean_ms"])
    return {"go": "agrees" if agrees else "DIFFERS", "go_command": command, "go_cpu_s": cpu,
            "go_wall_s": wall, "go_peak_rss_mb": rss,
            "go_completed": metrics["completed_requests"],
            "go_e2e_mean_ms": metrics["e2e_mean_ms"]}


# ---------------------------------------------------------------- table, JSON, comparison

def measure(path: Path, repeat: int, binary: Path | None, use_go: bool) -> dict[str, Any]:
    row: dict[str, Any] = {"scenario": str(path)}
    row.update(in_process(path, repeat))
    row.update(whole_process(path, repeat))
    row["requests_per_s"] = row["arrived"] / row["in_process_s"]
    row["events_per_s"] = row["events"] / row["event_loop_s"] if row["event_loop_s"] else 0.0
    if use_go:
        row.update(go_reference(path, binary, row))
        if "go_cpu_s" in row:
            row["go_ratio"] = row["go_cpu_s"] / row["process_s"]
    return row


HEADER = (f"{'case':<26}{'requests':>9}{'process s':>10}{'CPU s':>7}"
          f"{'in-proc s':>10}{'req/s':>9}"
          f"{'events/s':>10}{'peak MiB':>9}{'Go CPU s':>9}{'x Go':>7}  Go check")


def table_line(name: str, row: dict[str, Any]) -> str:
    go_cpu = f"{row['go_cpu_s']:>9.2f}" if "go_cpu_s" in row else f"{'-':>9}"
    ratio = f"{row['go_ratio']:>7.1f}" if "go_ratio" in row else f"{'-':>7}"
    return (f"{name:<26}{row['arrived']:>9}{row['process_s']:>10.2f}"
            f"{row['process_cpu_s']:>7.2f}{row['in_process_s']:>10.2f}"
            f"{row['requests_per_s']:>9,.0f}{row['events_per_s']:>10,.0f}"
            f"{row['peak_rss_mb']:>9.0f}{go_cpu}{ratio}  {row.get('go', '-')}")


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def compare(old: dict[str, Any], new: dict[str, Any]) -> str:
    """Per case present in both: old and new whole-process wall and CPU time, in-process
    time and peak RSS, and the change in percent (negative: faster or smaller)."""
    lines = [f"{'case':<26}{'process s':>18}{'change':>8}{'CPU s':>18}{'change':>8}"
             f"{'in-proc s':>18}{'change':>8}{'peak MiB':>18}{'change':>8}"]
    for name, row in new["cases"].items():
        before = old["cases"].get(name)
        if before is None:
            continue
        cells = ""
        for key, fmt in (("process_s", ".2f"), ("process_cpu_s", ".2f"),
                         ("in_process_s", ".2f"), ("peak_rss_mb", ".0f")):
            if key not in before:  # an older file without this figure
                cells += f"{'-':>18}{'-':>8}"
                continue
            a, b = before[key], row[key]
            change = f"{(b - a) / a:+.0%}" if a else "-"
            cells += f"{format(a, fmt):>8} -> {format(b, fmt):>7}{change:>8}"
        lines.append(f"{name:<26}{cells}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", help="scenario files (default: every bench case)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs per case, the median kept (default: 3)")
    parser.add_argument("--no-go", action="store_true", help="skip the Go reference")
    parser.add_argument("--save", type=Path, default=DEFAULT_SAVE,
                        help=f"results JSON (default: {DEFAULT_SAVE.relative_to(ROOT)})")
    parser.add_argument("--compare", type=Path, help="an earlier results JSON to compare with")
    parser.add_argument("--search", type=int, default=40, metavar="N",
                        help="candidates for the search evaluation rate (default 40; 0: skip)")
    parser.add_argument("--search-code", type=int, metavar="N",
                        help="code candidates (in the sandbox) for the same rate (default: as "
                        "many as --search; 0: skip)")
    parser.add_argument("--workers", type=int, default=2,
                        help="worker processes for the search evaluation rate (default 2)")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--one-search", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--code", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure_in_process(args.one)))
        return
    if args.one_search:
        print(json.dumps(measure_search(args.one_search, args.workers, args.code)))
        return
    earlier = json.loads(args.compare.read_text()) if args.compare else None  # fail early
    paths = [Path(p) for p in args.cases] or sorted(BENCH.glob("*.yaml"))
    binary = None if args.no_go else go_binary()
    if not args.no_go and binary is None:
        print("note: no Go reference binary ($BLIS_GO_DIR/blis, default ~/.cache/blis-go/blis):"
              " the Go columns are left empty", file=sys.stderr)
    # Time the package as installed: a wheel install compiles the bytecode, an editable one
    # under PYTHONDONTWRITEBYTECODE=1 would compile every module (and the dataclasses'
    # methods: core/dataclass_code.py) on each start.
    compileall.compile_dir(ROOT / "blis_simpy", quiet=1)
    subprocess.run([sys.executable, "-c", "from blis_simpy.core.dataclass_code import build; "
                    "build()"], check=True, cwd=ROOT)  # the dataclass methods' likewise
    print(HEADER, flush=True)
    cases: dict[str, Any] = {}
    for path in paths:
        row = measure(path, args.repeat, binary, not args.no_go)
        cases[path.stem] = row
        print(table_line(path.stem, row), flush=True)
    result = {"commit": git_commit(), "date": datetime.datetime.now(datetime.UTC).isoformat(),
              "machine": platform.platform(), "cpus": os.cpu_count(),
              "python": platform.python_version(), "repeat": args.repeat, "cases": cases}
    if args.search:
        result["search"] = search_rate(args.search, args.workers, args.repeat)
        print(search_line(result["search"]), flush=True)
    code = args.search if args.search_code is None else args.search_code
    if code:
        result["search_code"] = search_rate(code, args.workers, args.repeat, True)
        print(search_line(result["search_code"]), flush=True)
    args.save.parent.mkdir(parents=True, exist_ok=True)
    args.save.write_text(json.dumps(result, indent=2) + "\n")
    print(f"saved {args.save}")
    if earlier is not None:
        print(compare(earlier, result), end="")
    differs = [name for name, row in cases.items() if row.get("go") == "DIFFERS"]
    if differs:
        raise SystemExit(f"bench: the Go reference's outcome differs from ours: {differs}")


if __name__ == "__main__":
    main()
