"""scripts/bench.py (`make bench`) on a tiny scenario: it runs, prints its table, writes a
results JSON another run can be compared with, and derives the Go reference's command line
for a compat case. The real benchmark is too slow for CI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import BASE, merge

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "scripts" / "bench.py"


def bench(*args: str) -> str:
    proc = subprocess.run([sys.executable, str(BENCH), *args], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_bench_runs_a_tiny_case_and_writes_comparable_json(tmp_path: Path) -> None:
    case = tmp_path / "tiny.yaml"
    case.write_text(yaml.safe_dump(merge(BASE, {"workload": {"num_requests": 20}})))
    saved = tmp_path / "bench.json"
    out = bench(str(case), "--repeat", "1", "--no-go", "--save", str(saved), "--search", "2",
                "--workers", "1")
    assert "tiny" in out and str(saved) in out
    assert "search evaluations (1,000 requests, 2 instances, 2 weighted candidates" in out
    assert "search evaluations (1,000 requests, 2 instances, 2 code (sandboxed) candidates" \
        in out
    data = json.loads(saved.read_text())
    row = data["cases"]["tiny"]
    assert row["arrived"] == 20 and row["completed"] == 20
    assert row["process_s"] > row["in_process_s"] > 0 and row["process_cpu_s"] > 0
    assert row["events"] > 20 and row["peak_rss_mb"] > 0 and row["requests_per_s"] > 0
    assert "go_cpu_s" not in row
    search = data["search"]
    assert search["evaluations"] == 2 and search["per_s"] > 0 and search["per_cpu_s"] > 0
    assert data["search_code"]["evaluations"] == 2 and data["search_code"]["code"]
    again = bench(str(case), "--repeat", "1", "--no-go", "--save", str(tmp_path / "b.json"),
                  "--compare", str(saved), "--search", "0")
    assert again.splitlines()[-1].startswith("tiny")


def test_go_command_follows_the_compat_case() -> None:
    sys.path.insert(0, str(BENCH.parent))
    try:
        import bench as script  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(BENCH.parent))
    case = ROOT / "blis_simpy" / "scenarios" / "bench" / "10k-4inst.yaml"
    command = script.go_command(case)
    assert command is not None and command[0] == "run"
    for flag in ("--num-instances=4", "--rate=160", "--num-requests=10000", "--seed=42",
                 "--output-tokens=256", "--prompt-tokens-stdev=256"):
        assert flag in command
    native = ROOT / "blis_simpy" / "scenarios" / "bench" / "native-roofline.yaml"
    assert script.go_command(native) is None
