"""The importers read what the common benchmark clients write into measured sets: vLLM's
serving benchmark JSON (with and without per-request arrays), SGLang's JSON lines, GuideLLM's
benchmarks file, per-request CSV and JSONL; what a file cannot say comes from the hints, and
a file of no known shape is one clear error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from blis_simpy.core.errors import ScenarioError
from blis_simpy.validate.harness import Latency, stage_scenario
from blis_simpy.validate.importers import Hints, read

HINTS = Hints(model="Qwen/Qwen3-8B", gpu="H100", tp=1, server="vllm", version="0.11.0")

# Figures of vllm bench serve's result for Qwen3-8B at concurrency 4 (gpustack/gpustack
# docs/performance-lab/qwen3-8b/h100-latency.md), in the keys that tool writes.
VLLM = {"backend": "vllm", "model_id": "Qwen/Qwen3-8B", "num_prompts": 100,
        "request_rate": "inf", "max_concurrency": 4, "duration": 44.40, "completed": 100,
        "total_input_tokens": 23260, "total_output_tokens": 22061,
        "request_throughput": 2.25, "output_throughput": 496.88,
        "mean_ttft_ms": 64.00, "median_ttft_ms": 60.26, "p99_ttft_ms": 98.59,
        "mean_tpot_ms": 7.38, "median_tpot_ms": 7.40, "p99_tpot_ms": 7.96,
        "mean_itl_ms": 7.78, "median_itl_ms": 7.37, "p99_itl_ms": 40.98}
# One run of sglang.bench_serving (datacrunch-research/h200-benchmarks), its keys.
SGLANG = {"backend": "sglang", "dataset_name": "random", "request_rate": 4.0,
          "max_concurrency": None, "total_input_tokens": 615860, "total_output_tokens": 607936,
          "mean_e2e_latency_ms": 12896.33, "median_e2e_latency_ms": 12534.85,
          "median_ttft_ms": 106.06, "median_itl_ms": 19.42, "output_throughput": 2047.91,
          "random_input_len": 1024, "random_output_len": 1024, "random_range_ratio": 0.0,
          "duration": 296.86, "completed": 1200}


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_vllm_benchmark_json(tmp_path: Path):
    measured = read(write(tmp_path, "run.json", json.dumps(VLLM)), HINTS)
    stage, = measured.stages
    assert (stage.model, stage.gpu, stage.server) == ("Qwen/Qwen3-8B", "H100", "vllm")
    assert stage.load.arrival == "concurrency" and stage.load.concurrency == 4
    assert stage.prompt == {"type": "constant", "value": 233}
    assert stage.measured.stat("tpot", "mean") == 7.38
    assert stage.measured.stat("ttft", "p99") == 98.59
    assert stage.measured.requests_per_s == 2.25
    stage_scenario(stage, Latency.default(), max_requests=10)


def test_vllm_per_request_arrays_give_the_lengths(tmp_path: Path):
    detailed = {**VLLM, "request_rate": 2.0, "max_concurrency": None, "completed": 3,
                "num_prompts": 3, "input_lens": [100, 200, 300], "output_lens": [10, 20, 30]}
    stage, = read(write(tmp_path, "d.json", json.dumps(detailed)), HINTS).stages
    assert stage.load.arrival == "poisson" and stage.load.rate == 2.0
    assert stage.prompt == {"type": "empirical", "values": [100, 200, 300]}
    assert stage.mean_output == 20


def test_sglang_json_lines(tmp_path: Path):
    lines = [json.dumps(SGLANG), json.dumps({**SGLANG, "request_rate": 1.0, "completed": 300,
                                             "total_input_tokens": 152612,
                                             "total_output_tokens": 160347})]
    measured = read(write(tmp_path, "online.jsonl", "\n".join(lines)),
                    Hints(model="meta-llama/Llama-3.3-70B-Instruct", gpu="H200", tp=4,
                          server="sglang"))
    first, second = measured.stages
    assert first.load.rate == 4.0 and second.load.rate == 1.0
    assert first.prompt["type"] == "uniform" and first.prompt["high"] == 1025
    assert first.mean_prompt == pytest.approx(615860 / 1200, abs=1)
    assert first.measured.stat("itl", "median") == 19.42
    assert first.measured.requests_per_s == pytest.approx(1200 / 296.86)
    assert first.server == "sglang"


def test_guidellm_benchmarks(tmp_path: Path):
    bench = {"benchmarks": [{
        "args": {"strategy": {"type_": "constant", "rate": 5.0}},
        "request_totals": {"successful": 500, "errored": 2},
        "metrics": {
            "requests_per_second": {"successful": {"mean": 4.97}},
            "request_latency": {"successful": {"mean": 3.1, "median": 3.0,
                                               "percentiles": {"p90": 3.6, "p99": 4.2}}},
            "time_to_first_token_ms": {"successful": {"mean": 80.0, "median": 70.0}},
            "time_per_output_token_ms": {"successful": {"mean": 12.0}},
            "prompt_token_count": {"successful": {"mean": 512.0}},
            "output_token_count": {"successful": {"mean": 256.0}}}}]}
    stage, = read(write(tmp_path, "g.json", json.dumps(bench)), HINTS).stages
    assert stage.load.arrival == "poisson" and stage.load.rate == 5.0
    assert stage.measured.stat("e2e", "p90") == pytest.approx(3600.0)
    assert stage.measured.stat("tpot", "mean") == 12.0 and stage.measured.failed == 2


@pytest.mark.parametrize("name, text", [
    ("r.csv", "arrival_s,input_tokens,output_tokens,ttft_ms,e2e_ms\n"
              "0.0,100,10,50,150\n0.5,120,12,60,180\n1.0,80,8,40,120\n"),
    ("r.jsonl", "\n".join(json.dumps({"arrival_s": t, "input_tokens": 100, "output_tokens": 10,
                                      "ttft_s": 0.05, "e2e_s": 0.15}) for t in (0.0, 0.5, 1.0))),
])
def test_per_request_records(tmp_path: Path, name, text):
    stage, = read(write(tmp_path, name, text), HINTS).stages
    assert stage.measured.completed == 3 and stage.load.arrival == "poisson"
    assert stage.load.rate == pytest.approx(2.0)
    assert stage.measured.stat("tpot", "mean") == pytest.approx(
        sum((e - t) / (o - 1) for e, t, o in ((150, 50, 10), (180, 60, 12), (120, 40, 8))) / 3
        if name.endswith("csv") else 100 / 9)


@pytest.mark.parametrize("name, text, message", [
    ("x.json", json.dumps({"hello": 1}), "no known benchmark format"),
    ("x.json", "{", "not valid JSON"),
    ("x.csv", "arrival_s,input_tokens\n0,1\n", "needs"),
    ("x.csv", "arrival_s,input_tokens,output_tokens,ttft_ms,e2e_ms\n0,1,1,1,1\n", "at least 2"),
    ("x.json", json.dumps({**VLLM, "completed": 0}), "completed"),
    ("x.json", json.dumps({k: v for k, v in VLLM.items() if k != "total_input_tokens"}),
     "total_input_tokens"),
])
def test_bad_files_name_what_is_wrong(tmp_path: Path, name, text, message):
    with pytest.raises(ScenarioError, match=message):
        read(write(tmp_path, name, text), HINTS)


def test_the_model_comes_from_the_file_or_the_hints(tmp_path: Path):
    path = write(tmp_path, "run.json", json.dumps({**VLLM, "model_id": None}))
    with pytest.raises(ScenarioError, match="--model"):
        read(path, Hints())
    assert read(path, HINTS).stages[0].model == "Qwen/Qwen3-8B"
