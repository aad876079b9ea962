"""Test helpers: the bundled public sets, and inference-perf result folders rebuilt from their
facts (exp-config.yaml, results/config.yaml, stage_N_lifecycle_metrics.json), so importers and
harness are exercised on the layout users have without any copied file."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from blis_simpy.validate.sets import Stage, bundled_sets

TRAINING = "inference-sim-training"
SAMPLE = ("llama-2-7b-tp1-general/0", "mixtral-8x7b-v0-1-tp2-codegen/0",
          "llama-2-70b-tp4-roleplay/0", "codellama-34b-tp2-reasoning/0")


def stages(set_name: str = TRAINING, names: tuple[str, ...] | None = None) -> list[Stage]:
    found = [s for ms in bundled_sets() if ms.name == set_name for s in ms.stages]
    return [s for s in found if names is None or s.name in names]


def training_facts() -> dict:
    from importlib import resources

    text = resources.files("blis_simpy.data").joinpath(
        "ground_truth", f"{TRAINING}.json").read_text()
    return json.loads(text)


def write_ground_truth(root: Path, names: tuple[str, ...] = SAMPLE) -> Path:
    """inference-sim/training's layout holding the bundled figures of `names`."""
    for stage in training_facts()["stages"]:
        if stage["name"] not in names:
            continue
        folder = root / stage["experiment"]
        (folder / "results").mkdir(parents=True)
        engine = stage["engine"]
        (folder / "exp-config.yaml").write_text(yaml.safe_dump({
            "model": stage["model"], "tensor_parallelism": stage["tp"],
            "max_model_len": engine["max_model_len"],
            "max_num_batched_tokens": engine["max_num_batched_tokens"],
            "max_num_seqs": engine["max_num_seqs"]}))
        load = stage["load"]
        (folder / "results" / "config.yaml").write_text(yaml.safe_dump({
            "data": {"type": "shared_prefix", "shared_prefix": {
                "num_groups": 10, "num_prompts_per_group": stage["distinct_prompts"] // 10,
                "output_len": stage["output"]["value"]}},
            "load": {"type": "constant", "stages": [
                {"rate": load["rate"], "duration": load["duration_s"]}]},
            "server": {"type": "vllm", "ignore_eos": True}}))
        m = stage["measured"]
        seconds = {k: v / 1e3 for k, v in m["ttft_ms"].items()}
        metrics = {"successes": {
            "count": m["completed"],
            "latency": {"request_latency": {k: v / 1e3 for k, v in m["e2e_ms"].items()},
                        "time_to_first_token": seconds},
            "throughput": {"requests_per_sec": m["requests_per_s"],
                           "output_tokens_per_sec": m["output_tokens_per_s"]},
            "prompt_len": {"median": stage["prompt"]["value"]},
            "output_len": {"median": 1.0}},  # ignore_eos: the profile's output_len counts
            "failures": {"count": m["failed"]}}
        if m["failed"]:
            metrics["failures"]["request_latency"] = {"min": m["timeout_s"] + 0.0007}
        (folder / "results" / "stage_0_lifecycle_metrics.json").write_text(json.dumps(metrics))
    return root
