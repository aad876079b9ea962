"""Shared fixtures: small scenarios built in code, so tests say exactly what they simulate."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from blis_simpy.config.scenario import Scenario

DATA = Path(__file__).parent / "data"

# Hypothesis profiles. `make test` runs each property's own count (100 unless it sets one);
# `make test-long` selects `long` through BLIS_TEST_PROFILE: the invariant properties, which
# leave their count to the profile, then run 1,000 examples each.
settings.register_profile("long", max_examples=1000)
if os.environ.get("BLIS_TEST_PROFILE"):
    settings.load_profile(os.environ["BLIS_TEST_PROFILE"])

LLAMA_ALPHA = [232.46191091038054, 1.752360364195244, 3357.4400353290152]
LLAMA_BETA = [5752.705191348184, 17.25086436834028, 5.999143920128404]

BASE: dict[str, Any] = {
    "version": 1,
    "name": "test",
    "seed": 7,
    "model": {"name": "meta-llama/llama-3.1-8b-instruct", "gpu": "H100", "tp": 1},
    "latency": {"alpha": LLAMA_ALPHA, "beta": LLAMA_BETA},
    "engine": {"kv_blocks": 2000},
    "workload": {
        "type": "distribution", "num_requests": 40, "rate_per_s": 20,
        "prompt": {"mean": 300, "stdev": 150, "min": 8, "max": 1200},
        "output": {"mean": 60, "stdev": 30, "min": 1, "max": 200},
    },
}


def merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def scenario(**changes: Any) -> Scenario:
    """The base test scenario with nested `changes` applied."""
    return Scenario.from_dict(merge(BASE, changes))


@pytest.fixture
def make_scenario():
    return scenario


def write_trace(path: Path, rows: list[tuple[float, list[int], int]]) -> Path:
    """A trace CSV in the reference's format: (arrival seconds, prompt token ids, output length).
    Request ids are `request_<row>`, the names the reference gives trace rows."""
    lines = ["arrival_time,request_id,model,prefill_tokens,decode_tokens"]
    for i, (arrival, prompt, out_len) in enumerate(rows):
        output = list(range(1, out_len + 1))
        lines.append(f'{arrival},request_{i},m,"{prompt}","{output}"')
    path.write_text("\n".join(lines) + "\n")
    return path


def trace_run_scenario(trace: Path, **changes: Any) -> Scenario:
    """A native-mode scenario replaying `trace` with the base model and coefficients."""
    data = merge(BASE, changes)
    data["workload"] = {"type": "trace", "path": str(trace)}
    return Scenario.from_dict(data)


def const(value: float) -> dict[str, Any]:
    return {"type": "constant", "value": value}


def tenant(tid: str, slo_class: str, rate_fraction: float, arrival: str, prompt: int,
           output: int, **extra: Any) -> dict[str, Any]:
    """A tenant with constant lengths and a deterministic arrival process: `constant`
    arrives at 0, 1/rate, ...; `periodic` (no jitter) at 0.5/rate, 1.5/rate, ..."""
    return {"id": tid, "slo_class": slo_class, "rate_fraction": rate_fraction,
            "arrival": {"type": arrival}, "prompt": const(prompt), "output": const(output),
            **extra}


def tenants_scenario(tenants: list[dict[str, Any]], rate_per_s: float, duration_s: float,
                     **changes: Any) -> Scenario:
    data = merge(BASE, changes)
    data["workload"] = {"type": "tenants", "rate_per_s": rate_per_s, "duration_s": duration_s,
                        "tenants": tenants}
    return Scenario.from_dict(data)
