"""The Perfetto / Chrome trace-event export, checked against the Trace Event Format: the JSON
object form, each event's required fields for its phase, async slices that open and close in
order, and what the file shows (instance tracks, steps, requests, routing, anomalies, counters).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import blis_simpy
from tests.conftest import scenario

REQUIRED = {
    "M": {"name", "pid", "args"},
    "X": {"name", "ts", "dur", "pid", "tid"},
    "C": {"name", "ts", "pid", "args"},
    "b": {"name", "cat", "id", "ts", "pid"},
    "e": {"name", "cat", "id", "ts", "pid"},
    "i": {"name", "ts", "pid", "s"},
}


def validate(trace: dict) -> list[dict]:
    """Raise AssertionError unless `trace` is a valid trace-event file; its events."""
    assert set(trace) == {"traceEvents", "displayTimeUnit"}
    assert trace["displayTimeUnit"] in ("ms", "ns")
    events = trace["traceEvents"]
    open_slices: dict[tuple, list[tuple[str, int]]] = defaultdict(list)
    for event in events:
        phase = event["ph"]
        assert phase in REQUIRED, phase
        assert REQUIRED[phase] <= set(event), (phase, event)
        assert isinstance(event["pid"], int)
        if "ts" in event:
            assert isinstance(event["ts"], int) and event["ts"] >= 0
        if phase == "X":
            assert isinstance(event["dur"], int) and event["dur"] >= 0
        if phase == "C":
            assert all(isinstance(v, int | float) for v in event["args"].values())
        if phase == "i":
            assert event["s"] in ("g", "p", "t")
        if phase in "be":  # async slices nest per (cat, id): each end closes the last open
            key = (event["cat"], event["id"])
            if phase == "b":
                open_slices[key].append((event["name"], event["ts"]))
            else:
                name, ts = open_slices[key].pop()
                assert name == event["name"] and ts <= event["ts"]
    assert not any(open_slices.values()), "async slices left open"
    return events


def test_perfetto_file_validates_and_shows_instances_steps_requests_and_decisions(
        tmp_path: Path):
    s = scenario(cluster={"instances": 2, "trace_level": "decisions"},
                 policies={"routing": {"type": "always-busiest"}},
                 workload={"num_requests": 60, "rate_per_s": 200},
                 evaluation={"slo_targets": {"": {"ttft_ms": 5}}},
                 outputs={"trace_formats": ["perfetto"]})
    result = blis_simpy.run(s)
    result.save(tmp_path / "out", "csv")
    events = validate(json.loads((tmp_path / "out" / "trace.json").read_text()))
    names = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {"gateway", "instance_0", "instance_1"}
    steps = [e for e in events if e["ph"] == "X"]
    assert len(steps) == len(result.steps)
    assert {"batch_size", "prefill_tokens", "decode_requests"} <= set(steps[0]["args"])
    requests = [e for e in events if e["ph"] == "b" and e["name"].startswith("request_")]
    assert len(requests) == 60
    routes = [e for e in events if e["ph"] == "i" and e["cat"] == "routing"]
    assert len(routes) == 60 and "ttft_regret_ms" in routes[0]["args"]
    anomalies = [e for e in events if e["ph"] == "i" and e["cat"] == "anomaly"]
    assert len(anomalies) == len(result.anomalies) > 0
    counters = {e["name"] for e in events if e["ph"] == "C"}
    assert counters == {"load", "kv_blocks_used"}


def test_perfetto_needs_no_decision_trace(tmp_path: Path):
    s = scenario(outputs={"trace_formats": ["perfetto"]}, horizon_s=1.0)
    text = blis_simpy.run(s).trace_files["trace.json"]
    events = validate(json.loads(text))
    assert not [e for e in events if e.get("cat") == "routing"]
