"""Converting reference BLIS command lines into compat-mode scenarios (engine.md §7)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml

from blis_simpy.api import prepare
from blis_simpy.compat.convert import blis_command, to_yaml
from blis_simpy.config import catalog
from blis_simpy.config.scenario import Scenario
from blis_simpy.config.workload import TraceWorkload
from blis_simpy.core.errors import ScenarioError
from tests.compat.helpers import BASE, COEFFS, LLAMA, convert, policies

DATA = Path(__file__).parents[1] / "data"
GOLDEN = json.loads((DATA / "golden" / "goldendataset.json").read_text())["tests"]
MODEL_CONFIGS = Path(catalog.__file__).parents[1] / "data" / "model_configs"
HARDWARE = Path(catalog.__file__).parents[1] / "data" / "hardware_config.json"


def golden_argv(case: dict) -> list[str]:
    return shlex.split(case["blis-cmd"])[1:]  # drop ./simulation_worker


@pytest.mark.parametrize("index", range(len(GOLDEN)), ids=lambda i: f"golden{i}")
def test_golden_commands_convert_and_load(index):
    argv = golden_argv(GOLDEN[index])
    flags = dict(zip(argv[1::2], argv[2::2], strict=True))
    data = blis_command(argv)
    scenario = Scenario.from_dict(data)
    assert list(data) == ["version", "model", "seed", "compat", "latency", "engine", "cluster",
                          "policies", "workload"]
    assert scenario.compat == "blis" and scenario.seed == 42 and scenario.horizon_s is None
    assert scenario.cluster.instances == 1
    assert [p.type for p in (scenario.policies.admission, scenario.policies.priority,
                             scenario.policies.routing, scenario.policies.scheduler)] == [
        "always-admit", "constant", "round-robin", "fcfs"]
    assert scenario.model.gpu == "H100" and scenario.model.tp == int(flags["--tp"])
    assert scenario.latency.type == "blackbox"
    assert scenario.latency.alpha == [float(v) for v in flags["--alpha-coeffs"].split(",")]
    assert scenario.latency.beta == [float(v) for v in flags["--beta-coeffs"].split(",")]
    engine = scenario.engine
    assert engine.kv_blocks == int(flags["--total-kv-blocks"])
    assert (engine.max_running_requests, engine.max_scheduled_tokens, engine.block_size,
            engine.long_prefill_threshold, engine.max_model_len) == (256, 2048, 16, 0, 4096)
    wl = scenario.workload
    assert (wl.num_requests, wl.rate_per_s, wl.arrival) == (
        int(flags["--num-requests"]), 10.0, "constant")
    assert wl.prefix_tokens == int(flags["--prefix-tokens"])
    assert (wl.prompt.mean, wl.prompt.stdev, wl.prompt.min, wl.prompt.max) == tuple(
        int(flags[f"--prompt-tokens{s}"]) for s in ("", "-stdev", "-min", "-max"))
    assert (wl.output.mean, wl.output.stdev, wl.output.min, wl.output.max) == tuple(
        int(flags[f"--output-tokens{s}"]) for s in ("", "-stdev", "-min", "-max"))
    loaded = scenario.to_dict()["workload"]
    assert loaded.pop("timeout_s") is None  # the reference has no client timeouts
    assert loaded == data["workload"]


def test_golden0_spot_values():
    data = blis_command(golden_argv(GOLDEN[0]))
    assert data["latency"]["alpha"][0] == 232.46191091038054
    assert data["engine"]["kv_blocks"] == 7463
    assert data["workload"]["prompt"] == {"mean": 70.0, "stdev": 35.0, "min": 2, "max": 200}


def test_defaults_follow_the_reference_table():
    data, scenario = convert("--model", LLAMA, *COEFFS)
    assert data["engine"] == {"max_running_requests": 256, "max_scheduled_tokens": 2048,
                              "long_prefill_threshold": 0, "kv_blocks": 1_000_000,
                              "block_size": 16}
    wl = scenario.workload
    assert (wl.num_requests, wl.rate_per_s, wl.prefix_tokens) == (100, 1.0, 0)
    assert (wl.prompt.mean, wl.prompt.stdev, wl.prompt.min, wl.prompt.max) == (512, 256, 2, 7000)
    assert scenario.seed == 42 and "horizon_s" not in data


def test_repeated_coefficient_flags_append_and_extra_values_are_dropped():
    data, _ = convert("--model", LLAMA, "--alpha-coeffs", "1", "--alpha-coeffs", "2,3,99",
                      "--beta-coeffs", "4,5,6,7")
    assert data["latency"] == {"type": "blackbox", "alpha": [1.0, 2.0, 3.0],
                               "beta": [4.0, 5.0, 6.0]}


def test_horizon_microseconds_become_seconds():
    data, scenario = convert("--model", LLAMA, *COEFFS, "--horizon", "2500000")
    assert data["horizon_s"] == 2.5 and scenario.horizon_us == 2_500_000


@pytest.mark.parametrize("name", ["chatbot", "summarization", "contentgen", "multidoc"])
def test_presets_take_lengths_from_the_catalog(name):
    _, scenario = convert("--model", LLAMA, *COEFFS, "--workload", name,
                          "--rate", "4", "--num-requests", "30")
    preset = catalog.bundled().workload_preset(name)
    wl = scenario.workload
    assert (wl.num_requests, wl.rate_per_s) == (30, 4.0)
    assert wl.prefix_tokens == preset.get("prefix_tokens", 0)  # multidoc has none: 0
    assert (wl.prompt.mean, wl.prompt.stdev, wl.prompt.min, wl.prompt.max) == (
        preset["prompt_tokens"], preset["prompt_tokens_stdev"],
        preset["prompt_tokens_min"], preset["prompt_tokens_max"])
    assert wl.output.max == preset["output_tokens_max"]


def test_preset_ignores_length_flags():
    data, _ = convert("--model", LLAMA, *COEFFS, "--workload", "chatbot",
                      "--prompt-tokens", "99999")
    assert data["workload"]["prompt"]["mean"] == 256.0


def test_traces_path_resolves_against_cwd(tmp_path):
    (tmp_path / "t.csv").write_text("arrival_time,a,b,c,d\n")
    data, scenario = convert("--model", LLAMA, *COEFFS, "--workload", "traces",
                             "--workload-traces-filepath", "t.csv", "--rate", "0", cwd=tmp_path)
    assert data["workload"] == {"type": "trace", "path": str(tmp_path / "t.csv"),
                                "format": "blis"}
    assert isinstance(scenario.workload, TraceWorkload)
    assert prepare(scenario).input_notes == []  # not the reference's header: read by position


def test_catalog_lookup_fills_model_coefficients_and_kv_blocks():
    data, scenario = convert("--model", "meta-llama/Llama-3.1-8B-Instruct")
    assert (scenario.model.tp, scenario.model.gpu, scenario.model.vllm_version) == (
        2, "H100", "vllm/vllm-openai:v0.8.4")
    assert scenario.engine.kv_blocks == 132139
    entry = catalog.bundled().find(LLAMA, "H100", 2, "vllm/vllm-openai:v0.8.4")
    assert data["latency"] == {"type": "blackbox", "alpha": list(entry.alpha),
                               "beta": list(entry.beta)}


def test_explicit_kv_blocks_beat_the_catalog_even_at_the_default_value():
    data, _ = convert("--model", LLAMA, "--total-kv-blocks", "1000000")
    assert data["engine"]["kv_blocks"] == 1_000_000


def test_catalog_miss_falls_back_to_bundled_roofline():
    data, _ = convert("--model", "qwen/qwen3-14b", "--hardware", "H100", "--tp", "1")
    assert data["latency"] == {"type": "roofline"}
    assert data["model"] == {"name": "qwen/qwen3-14b", "gpu": "H100", "tp": 1}
    assert data["engine"]["kv_blocks"] == 1_000_000


def test_catalog_miss_without_roofline_config_is_an_error():
    with pytest.raises(ScenarioError) as err:
        blis_command(["run", "--model", "acme/unknown-7b"])
    assert err.value.path == "--model" and "acme/unknown-7b" in str(err.value)


def test_roofline_flags_give_roofline_with_absolute_paths(tmp_path, monkeypatch):
    folder = MODEL_CONFIGS / "llama-3.1-8b-instruct"
    data, scenario = convert("--model", LLAMA, "--model-config-folder", str(folder),
                             "--hardware-config", str(HARDWARE), "--hardware", "H100",
                             "--tp", "2")
    assert data["latency"] == {"type": "roofline", "model_config": str(folder),
                               "hardware_config": str(HARDWARE)}
    assert scenario.model.tp == 2 and scenario.engine.kv_blocks == 1_000_000


@pytest.mark.parametrize("missing", ["--hardware", "--tp"])
def test_q13_roofline_without_hardware_or_tp_is_an_error(missing):
    argv = ["run", "--model", LLAMA, "--model-config-folder", str(MODEL_CONFIGS / "qwen3-14b"),
            "--hardware-config", str(HARDWARE), "--hardware", "H100", "--tp", "2"]
    i = argv.index(missing)
    del argv[i:i + 2]
    with pytest.raises(ScenarioError, match="Q13") as err:
        blis_command(argv)
    assert err.value.path == missing


def test_custom_defaults_file_is_read_with_the_same_rules(tmp_path):
    (tmp_path / "my.yaml").write_text(yaml.safe_dump({
        "defaults": {"acme/m": {"GPU": "A100", "tensor_parallelism": 4, "vllm_version": "v1"}},
        "workloads": {"tiny": {"prompt_tokens": 5, "prompt_tokens_stdev": 1,
                               "prompt_tokens_min": 1, "prompt_tokens_max": 9,
                               "output_tokens": 3, "output_tokens_stdev": 1,
                               "output_tokens_min": 1, "output_tokens_max": 4}},
        "models": [{"id": "acme/m", "GPU": "A100", "tensor_parallelism": 4,
                    "vllm_version": "v1", "alpha_coeffs": [1, 2, 3],
                    "beta_coeffs": [4, 5, 6], "total_kv_blocks": 321}],
    }))
    data, _ = convert("--model", "ACME/M", "--defaults-filepath", "my.yaml",
                      "--workload", "tiny", cwd=tmp_path)
    assert data["model"] == {"name": "ACME/M", "gpu": "A100", "tp": 4, "vllm_version": "v1"}
    assert data["latency"]["alpha"] == [1.0, 2.0, 3.0] and data["engine"]["kv_blocks"] == 321
    assert data["workload"]["prompt"] == {"mean": 5.0, "stdev": 1.0, "min": 1, "max": 9}
    assert data["workload"]["prefix_tokens"] == 0


def test_results_path_and_log_are_accepted_and_ignored():
    plain = blis_command(["run", "--model", LLAMA, *COEFFS])
    assert blis_command(["run", "--model", LLAMA, *COEFFS, "--results-path", "r.json",
                         "--log", "debug", "--scheduler", "fcfs",
                         "--priority-policy", "constant"]) == plain


def test_to_yaml_names_the_command_and_round_trips():
    argv = golden_argv(GOLDEN[3])
    text = to_yaml(blis_command(argv), argv)
    assert text.startswith("#") and "--total-kv-blocks 105497" in text.splitlines()[1]
    assert Scenario.from_yaml_text(text) == Scenario.from_dict(blis_command(argv))
    assert to_yaml(blis_command(argv)).startswith("# Converted")


ERRORS = {
    "unknown flag": (["--foo", "1"], "--foo"),
    "fitness-weights flag": (["--fitness-weights", "x:1"], "--fitness-weights"),
    "kv-cpu-blocks < 0": (["--kv-cpu-blocks", "-1"], "--kv-cpu-blocks"),
    "offload threshold > 1": (["--kv-offload-threshold", "1.5"], "--kv-offload-threshold"),
    "transfer bandwidth 0": (["--kv-transfer-bandwidth", "0"], "--kv-transfer-bandwidth"),
    "transfer base < 0": (["--kv-transfer-base-latency", "-1"], "--kv-transfer-base-latency"),
    "workload-spec flag": (["--workload-spec", "w.yaml"], "--workload-spec"),
    "missing value at end": (["--rate"], "--rate"),
    "missing value before flag": (["--rate", "--seed", "1"], "--rate"),
    "bad float": (["--rate", "fast"], "--rate"),
    "bad int": (["--num-requests", "1.5"], "--num-requests"),
    "bad list": (["--alpha-coeffs", "1,x,3"], "--alpha-coeffs"),
    "rate 0": (["--rate", "0"], "--rate"),
    "rate inf": (["--rate", "inf"], "--rate"),
    "prompt stdev above max": (["--prompt-tokens-stdev", "8000"], "--prompt-tokens-stdev"),
    "output stdev below min (Q12)": (["--output-tokens-min", "10", "--output-tokens-stdev",
                                      "5"], "--output-tokens-stdev"),
    "prompt mean outside": (["--prompt-tokens", "1"], "--prompt-tokens"),
    "kv-blocks 0": (["--total-kv-blocks", "0"], "--total-kv-blocks"),
    "block size 0": (["--block-size-in-tokens", "0"], "--block-size-in-tokens"),
    "traces without path": (["--workload", "traces"], "--workload-traces-filepath"),
    "2 alpha values": (["--alpha-coeffs", "1,2"], "--alpha-coeffs"),
    "unknown workload": (["--workload", "poisson"], "--workload"),
    "schema bound": (["--max-num-running-reqs", "0"], "--max-num-running-reqs"),
    "horizon 0": (["--horizon", "0"], "--horizon"),
    "scheduler": (["--scheduler", "lifo"], "--scheduler"),
    "priority policy": (["--priority-policy", "edf"], "--priority-policy"),
    "admission policy": (["--admission-policy", "always"], "--admission-policy"),
    "routing policy": (["--routing-policy", "random"], "--routing-policy"),
    "num-instances 0": (["--num-instances", "0"], "--num-instances"),
    "bad num-instances": (["--num-instances", "two"], "--num-instances"),
    "admission latency < 0": (["--admission-latency", "-1"], "--admission-latency"),
    "routing latency < 0": (["--routing-latency", "-5"], "--routing-latency"),
    "snapshot interval < 0": (["--snapshot-refresh-interval", "-1"],
                              "--snapshot-refresh-interval"),
    "trace level": (["--trace-level", "all"], "--trace-level"),
    "counterfactual-k < 0": (["--counterfactual-k", "-1"], "--counterfactual-k"),
    "bucket capacity 0": (["--admission-policy", "token-bucket", "--token-bucket-capacity",
                           "0"], "--token-bucket-capacity"),
    "bucket refill inf": (["--admission-policy", "token-bucket", "--token-bucket-refill-rate",
                           "inf"], "--token-bucket-refill-rate"),
    "bad summarize-trace": (["--summarize-trace=maybe"], "--summarize-trace"),
    "log level": (["--log", "loud"], "--log"),
    "model empty": (["--model="], "--model"),
}


@pytest.mark.parametrize("extra,flag", ERRORS.values(), ids=ERRORS.keys())
def test_bad_input_names_the_flag(extra, flag):
    with pytest.raises(ScenarioError) as err:
        blis_command(["run", *BASE, *extra])
    assert err.value.path == flag and flag in str(err.value)


def test_model_is_required():
    with pytest.raises(ScenarioError, match="--model"):
        blis_command(["run", *COEFFS])


def test_unknown_workload_lists_valid_names():
    with pytest.raises(ScenarioError) as err:
        blis_command(["run", *BASE, "--workload", "poisson"])
    assert "chatbot" in err.value.valid and "traces" in err.value.valid


# ---------------------------------------------------------------- cluster flags


def test_cluster_defaults_match_the_reference():
    data, scenario = convert(*BASE, "--alpha-coeffs", "1,2,3")
    cluster = scenario.cluster
    assert (cluster.instances, cluster.admission_latency_us, cluster.routing_latency_us,
            cluster.trace_level) == (1, 0, 0, "none")
    obs = cluster.observability
    # the reference refreshes every snapshot field on every read unless told otherwise;
    # blis-simpy's own default for cache_hit_rate is periodic, so it is written out
    assert {f: getattr(obs, f).mode for f in ("queue_depth", "batch_size", "kv_utilization",
                                              "cache_hit_rate")} == dict.fromkeys(
        ("queue_depth", "batch_size", "kv_utilization", "cache_hit_rate"), "immediate")
    assert data["cluster"]["observability"]["cache_hit_rate"] == {"mode": "immediate"}
    assert policies(scenario) == {"admission": ("always-admit", {}),
                                  "priority": ("constant", {}),
                                  "routing": ("round-robin", {}), "scheduler": ("fcfs", {})}


def test_cluster_flags_map_to_the_cluster_section():
    _, scenario = convert(*BASE, *COEFFS[:2], "--num-instances", "4", "--admission-latency",
                          "150", "--routing-latency", "0x10", "--trace-level", "decisions",
                          "--counterfactual-k", "5", "--summarize-trace")
    cluster = scenario.cluster
    assert (cluster.instances, cluster.admission_latency_us, cluster.routing_latency_us) == (
        4, 150, 16)
    assert cluster.trace_level == "decisions" and cluster.top_k == 5


def test_trace_level_none_and_k_zero_leave_recording_defaults():
    data, scenario = convert(*BASE, *COEFFS[:2], "--trace-level", "none",
                             "--counterfactual-k", "0", "--summarize-trace=false")
    assert "trace_level" not in data["cluster"] and "top_k" not in data["cluster"]
    assert scenario.cluster.trace_level == "none"


def test_snapshot_refresh_interval_makes_the_kv_group_periodic():
    _, scenario = convert(*BASE, *COEFFS[:2], "--snapshot-refresh-interval", "2500")
    obs = scenario.cluster.observability
    for field in (obs.kv_utilization, obs.cache_hit_rate):
        assert field.mode == "periodic" and field.interval_us == 2500
    assert obs.queue_depth.mode == obs.batch_size.mode == "immediate"


def test_snapshot_refresh_interval_zero_is_immediate():
    _, scenario = convert(*BASE, *COEFFS[:2], "--snapshot-refresh-interval", "0")
    obs = scenario.cluster.observability
    assert obs.kv_utilization.mode == obs.cache_hit_rate.mode == "immediate"


@pytest.mark.parametrize(("flags", "named"), [
    (["--max-model-len", "1200"], "--max-model-len"),
    (["--routing-policy", "prefix-affinity"], "--routing-policy prefix-affinity"),
    (["--routing-policy", "weighted", "--block-size-in-tokens", "32"],
     "the prefix-affinity scorer"),
    (["--routing-policy", "weighted", "--snapshot-refresh-interval", "5000",
      "--routing-latency", "300"], "--snapshot-refresh-interval"),
])
def test_convert_names_the_flags_compat_does_not_reproduce(flags, named):
    """The converted header claims the reference's numbers only where compat reproduces them:
    a flag whose behaviour blis-simpy corrects on purpose is named, with what differs."""
    argv = ["run", "--model", LLAMA, *COEFFS, *flags]
    text = to_yaml(blis_command(argv), argv)
    assert "compat: blis reproduces the reference's reported numbers except" in text
    assert f"#  - {named}" in text
    plain = to_yaml(blis_command(["run", "--model", LLAMA, *COEFFS]))
    assert "# compat: blis reproduces the reference's reported numbers.\n" in plain
