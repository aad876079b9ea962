"""Converting reference BLIS command lines into compat-mode scenarios (engine.md §7)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml

from blis_simpy.compat.convert import blis_command, to_yaml
from blis_simpy.compat.flags import go_float, go_int
from blis_simpy.config import catalog
from blis_simpy.config.scenario import Scenario
from blis_simpy.config.workload import TraceWorkload
from blis_simpy.core.errors import ScenarioError

DATA = Path(__file__).parents[1] / "data"
GOLDEN = json.loads((DATA / "golden" / "goldendataset.json").read_text())["tests"]
MODEL_CONFIGS = Path(catalog.__file__).parents[1] / "data" / "model_configs"
HARDWARE = Path(catalog.__file__).parents[1] / "data" / "hardware_config.json"
LLAMA = "meta-llama/llama-3.1-8b-instruct"
COEFFS = ["--alpha-coeffs", "1,2,3", "--beta-coeffs", "4,5,6"]


def golden_argv(case: dict) -> list[str]:
    return shlex.split(case["blis-cmd"])[1:]  # drop ./simulation_worker


def convert(*args: str, cwd: Path | None = None) -> tuple[dict, Scenario]:
    data = blis_command(["run", *args], cwd=cwd)
    return data, Scenario.from_dict(data)


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
    assert scenario.to_dict()["workload"] == data["workload"]


def test_golden0_spot_values():
    data = blis_command(golden_argv(GOLDEN[0]))
    assert data["latency"]["alpha"][0] == 232.46191091038054
    assert data["engine"]["kv_blocks"] == 7463
    assert data["workload"]["prompt"] == {"mean": 70.0, "stdev": 35.0, "min": 2, "max": 200}


def test_equals_syntax_and_single_dash_match_space_syntax():
    spaced = blis_command(["run", "--model", LLAMA, "--rate", "10", "--seed", "7", *COEFFS])
    equals = blis_command(["run", f"--model={LLAMA}", "--rate=10", "-seed=7",
                           "-alpha-coeffs", "1,2,3", "--beta-coeffs=4,5,6"])
    assert equals == spaced
    assert spaced["seed"] == 7 and spaced["workload"]["rate_per_s"] == 10.0


def test_defaults_follow_the_reference_table():
    data, scenario = convert("--model", LLAMA, *COEFFS)
    assert data["engine"] == {"max_running_requests": 256, "max_scheduled_tokens": 2048,
                              "long_prefill_threshold": 0, "kv_blocks": 1_000_000,
                              "block_size": 16}
    wl = scenario.workload
    assert (wl.num_requests, wl.rate_per_s, wl.prefix_tokens) == (100, 1.0, 0)
    assert (wl.prompt.mean, wl.prompt.stdev, wl.prompt.min, wl.prompt.max) == (512, 256, 2, 7000)
    assert scenario.seed == 42 and "horizon_s" not in data


def test_go_number_syntax():
    assert go_int("0x10") == 16 and go_int("010") == 8 and go_int("-3") == -3
    assert go_int("1_000") == 1000  # base 0 allows underscores between digits
    assert go_float("1e3") == 1000.0 and go_float("0x1p-2") == 0.25
    for bad in ("1.5", "1__0", " 1", "9223372036854775808"):
        with pytest.raises(ValueError):
            go_int(bad)
    for bad in ("1_0", "1e400", "", "0x1"):
        with pytest.raises(ValueError):
            go_float(bad)


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
    assert data["workload"] == {"type": "trace", "path": str(tmp_path / "t.csv")}
    assert isinstance(scenario.workload, TraceWorkload)


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


BASE = ["--model", LLAMA, "--beta-coeffs", "4,5,6"]  # blackbox; alpha left to the cases
ERRORS = {
    "unknown flag": (["--foo", "1"], "--foo"),
    "tiered-KV flag": (["--kv-cpu-blocks", "2"], "--kv-cpu-blocks"),
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


def test_first_positional_must_be_run():
    with pytest.raises(ScenarioError, match="run"):
        blis_command(["simulate", *BASE])
    with pytest.raises(ScenarioError, match="run"):
        blis_command(BASE)


# ---------------------------------------------------------------- cluster and policy flags

def policies(scenario: Scenario) -> dict[str, tuple[str, dict]]:
    p = scenario.policies
    return {axis: (getattr(p, axis).type, getattr(p, axis).params)
            for axis in ("admission", "priority", "routing", "scheduler")}


def test_cluster_defaults_match_the_reference():
    data, scenario = convert(*BASE, "--alpha-coeffs", "1,2,3")
    cluster = scenario.cluster
    assert (cluster.instances, cluster.admission_latency_us, cluster.routing_latency_us,
            cluster.record_decisions) == (1, 0, 0, False)
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
    assert cluster.record_decisions is True and cluster.top_k == 5


def test_trace_level_none_and_k_zero_leave_recording_defaults():
    data, scenario = convert(*BASE, *COEFFS[:2], "--trace-level", "none",
                             "--counterfactual-k", "0", "--summarize-trace=false")
    assert "record_decisions" not in data["cluster"] and "top_k" not in data["cluster"]
    assert scenario.cluster.record_decisions is False


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


def test_token_bucket_takes_the_reference_defaults():
    _, scenario = convert(*BASE, *COEFFS[:2], "--admission-policy", "token-bucket")
    assert policies(scenario)["admission"] == ("token-bucket", {
        "capacity": 10000.0, "refill_per_s": 1000.0, "cost": "tokens"})


def test_token_bucket_flags_map_to_params_and_build():
    from blis_simpy.policies.admission import ADMISSION, TokenBucket

    _, scenario = convert(*BASE, *COEFFS[:2], "--admission-policy", "token-bucket",
                          "--token-bucket-capacity", "500", "--token-bucket-refill-rate", "2.5")
    policy = ADMISSION.create(scenario.policies.admission, "policies.admission")
    assert isinstance(policy, TokenBucket)
    assert (policy.params.capacity, policy.params.refill_per_s, policy.params.cost,
            policy.params.per_tenant) == (500.0, 2.5, "tokens", False)


def test_bucket_flags_are_ignored_without_token_bucket():
    data, _ = convert(*BASE, *COEFFS[:2], "--token-bucket-capacity", "0")
    assert data["policies"]["admission"] == {"type": "always-admit"}


@pytest.mark.parametrize("name", ["always-admit", "reject-all", ""])
def test_admission_policy_names(name):
    _, scenario = convert(*BASE, *COEFFS[:2], "--admission-policy", name)
    assert scenario.policies.admission.type == (name or "always-admit")


@pytest.mark.parametrize("name", ["round-robin", "least-loaded", "prefix-affinity",
                                  "always-busiest", ""])
def test_routing_policy_names(name):
    from blis_simpy.policies.routing import ROUTING

    _, scenario = convert(*BASE, *COEFFS[:2], "--routing-policy", name, "--num-instances", "2")
    assert scenario.policies.routing.type == (name or "round-robin")
    assert scenario.policies.routing.params == {}
    ROUTING.create(scenario.policies.routing, "policies.routing")


@pytest.mark.parametrize("name", ["constant", "slo-based", "inverted-slo", ""])
def test_priority_policy_names(name):
    from blis_simpy.policies.priority import PRIORITY

    _, scenario = convert(*BASE, *COEFFS[:2], "--priority-policy", name)
    assert scenario.policies.priority.type == (name or "constant")
    PRIORITY.create(scenario.policies.priority, "policies.priority")


@pytest.mark.parametrize("name", ["fcfs", "priority-fcfs", "sjf", "reverse-priority", ""])
def test_scheduler_names(name):
    from blis_simpy.policies.scheduler import SCHEDULER

    _, scenario = convert(*BASE, *COEFFS[:2], "--scheduler", name)
    assert scenario.policies.scheduler.type == (name or "fcfs")
    assert SCHEDULER.create(scenario.policies.scheduler, "policies.scheduler").params.preemption \
        == "lifo"


def test_weighted_without_scorers_gets_the_reference_default_profile():
    data, scenario = convert(*BASE, *COEFFS[:2], "--routing-policy", "weighted")
    scorers = data["policies"]["routing"]["params"]["scorers"]
    assert list(scorers.items()) == [("prefix-affinity", 3.0), ("queue-depth", 2.0),
                                     ("kv-utilization", 2.0)]
    assert scenario.policies.routing.params == {"scorers": scorers}


def test_routing_scorers_are_parsed_trimmed_and_keep_their_order():
    from blis_simpy.policies.routing import ROUTING, Weighted

    data, scenario = convert(*BASE, *COEFFS[:2], "--routing-policy", "weighted",
                             "--num-instances", "2", "--routing-scorers",
                             " load-balance : 1 , queue-depth:0.5,kv-utilization:2e0 ")
    assert list(data["policies"]["routing"]["params"]["scorers"].items()) == [
        ("load-balance", 1.0), ("queue-depth", 0.5), ("kv-utilization", 2.0)]
    policy = ROUTING.create(scenario.policies.routing, "policies.routing")
    assert isinstance(policy, Weighted)
    assert [w for _, _, w in policy.scorers] == [1 / 3.5, 0.5 / 3.5, 2 / 3.5]


def test_routing_scorers_without_weighted_are_ignored_unparsed():
    data, _ = convert(*BASE, *COEFFS[:2], "--routing-scorers", "bogus")
    assert data["policies"]["routing"] == {"type": "round-robin"}


SCORER_ERRORS = {
    "missing colon": ("queue-depth", "invalid scorer config 'queue-depth'"),
    "empty item": ("queue-depth:1,", "invalid scorer config ''"),
    "blank": (" ", "invalid scorer config ''"),
    "unknown name": ("cache:1", "unknown scorer 'cache'"),
    "duplicate": ("queue-depth:1, queue-depth :2", "duplicate scorer 'queue-depth'"),
    "weight zero": ("queue-depth:0", "finite positive number, got 0.0"),
    "weight negative": ("queue-depth:-1", "finite positive number, got -1.0"),
    "weight inf": ("queue-depth:Inf", "finite positive number, got inf"),
    "weight nan": ("queue-depth:NaN", "finite positive number, got nan"),
    "weight text": ("queue-depth:high", "invalid weight for scorer 'queue-depth'"),
    "weight empty": ("queue-depth:", "invalid weight for scorer 'queue-depth'"),
}


@pytest.mark.parametrize("text,message", SCORER_ERRORS.values(), ids=SCORER_ERRORS.keys())
def test_routing_scorer_errors(text, message):
    with pytest.raises(ScenarioError) as err:
        blis_command(["run", *BASE, *COEFFS[:2], "--routing-policy", "weighted",
                      "--routing-scorers", text])
    assert err.value.path == "--routing-scorers" and message in str(err.value)


def test_unknown_scorer_lists_the_valid_names():
    with pytest.raises(ScenarioError) as err:
        blis_command(["run", *BASE, *COEFFS[:2], "--routing-policy", "weighted",
                      "--routing-scorers", "x:1"])
    assert err.value.valid == "kv-utilization, load-balance, prefix-affinity, queue-depth"


def test_unknown_policy_names_list_every_valid_name():
    with pytest.raises(ScenarioError) as err:
        blis_command(["run", *BASE, *COEFFS[:2], "--scheduler", "edf"])
    assert err.value.valid == "fcfs, priority-fcfs, reverse-priority, sjf"


def test_summarize_trace_takes_no_separate_value():
    with pytest.raises(ScenarioError, match="unexpected argument"):
        blis_command(["run", *BASE, *COEFFS[:2], "--summarize-trace", "false"])


# ---------------------------------------------------------------- --policy-config precedence

POLICIES = Path(__file__).parents[1] / "data" / "policies"


def bundle(tmp_path: Path, text: str, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_policy_config_fills_unset_flags(tmp_path):
    path = bundle(tmp_path, """
admission: {policy: token-bucket, token_bucket_capacity: 64, token_bucket_refill_rate: 8}
routing: {policy: least-loaded}
priority: {policy: slo-based}
scheduler: priority-fcfs
""")
    _, scenario = convert(*BASE, *COEFFS[:2], "--policy-config", str(path))
    assert policies(scenario) == {
        "admission": ("token-bucket", {"capacity": 64.0, "refill_per_s": 8.0, "cost": "tokens"}),
        "priority": ("slo-based", {}), "routing": ("least-loaded", {}),
        "scheduler": ("priority-fcfs", {})}


def test_explicit_flags_beat_the_policy_config_even_at_their_defaults(tmp_path):
    path = bundle(tmp_path, """
admission: {policy: token-bucket, token_bucket_capacity: 64, token_bucket_refill_rate: 8}
routing: {policy: least-loaded}
priority: {policy: slo-based}
scheduler: priority-fcfs
""")
    _, scenario = convert(*BASE, *COEFFS[:2], "--policy-config", str(path),
                          "--token-bucket-capacity", "10000", "--routing-policy", "round-robin",
                          "--priority-policy", "inverted-slo", "--scheduler", "fcfs")
    assert policies(scenario) == {
        "admission": ("token-bucket", {"capacity": 10000.0, "refill_per_s": 8.0,
                                       "cost": "tokens"}),
        "priority": ("inverted-slo", {}), "routing": ("round-robin", {}),
        "scheduler": ("fcfs", {})}


def test_explicit_empty_flag_means_its_default_not_the_bundle(tmp_path):
    path = bundle(tmp_path, "admission: {policy: reject-all}\n")
    _, scenario = convert(*BASE, *COEFFS[:2], "--policy-config", str(path),
                          "--admission-policy", "")
    assert scenario.policies.admission.type == "always-admit"


def test_unset_bundle_keys_keep_flag_defaults(tmp_path):
    path = bundle(tmp_path, "routing:\n  policy: weighted\n")
    data, scenario = convert(*BASE, *COEFFS[:2], "--policy-config", str(path))
    assert policies(scenario)["admission"] == ("always-admit", {})
    assert policies(scenario)["scheduler"] == ("fcfs", {})
    # no scorers in the bundle or on the command line: the reference's default profile
    assert data["policies"]["routing"]["params"]["scorers"] == {
        "prefix-affinity": 3.0, "queue-depth": 2.0, "kv-utilization": 2.0}


def test_bundle_scorers_apply_when_weighted_and_no_routing_scorers():
    _, scenario = convert(*BASE, *COEFFS[:2], "--policy-config",
                          str(POLICIES / "epp-estimate-prefix.yaml"))
    assert scenario.policies.routing.params == {
        "scorers": {"prefix-affinity": 1.0, "load-balance": 1.0}}


def test_routing_scorers_flag_beats_bundle_scorers():
    _, scenario = convert(*BASE, *COEFFS[:2], "--policy-config",
                          str(POLICIES / "epp-estimate-prefix.yaml"),
                          "--routing-scorers", "queue-depth:1")
    assert scenario.policies.routing.params == {"scorers": {"queue-depth": 1.0}}


def test_empty_routing_scorers_flag_still_uses_bundle_scorers():
    _, scenario = convert(*BASE, *COEFFS[:2], "--policy-config",
                          str(POLICIES / "epp-precise-prefix.yaml"), "--routing-scorers=")
    assert list(scenario.policies.routing.params["scorers"]) == [
        "prefix-affinity", "kv-utilization", "queue-depth"]


def test_bundle_scorers_are_dropped_when_the_flag_picks_another_router():
    data, _ = convert(*BASE, *COEFFS[:2], "--policy-config",
                      str(POLICIES / "weighted-routing.yaml"), "--routing-policy", "least-loaded")
    assert data["policies"]["routing"] == {"type": "least-loaded"}


def test_flag_weighted_with_bundle_scorers_for_another_router(tmp_path):
    path = bundle(tmp_path, "routing:\n  policy: round-robin\n  scorers:\n"
                  "    - {name: load-balance, weight: 4}\n")
    _, scenario = convert(*BASE, *COEFFS[:2], "--policy-config", str(path),
                          "--routing-policy", "weighted")
    assert scenario.policies.routing.params == {"scorers": {"load-balance": 4.0}}


def test_policy_config_path_is_relative_to_cwd(tmp_path):
    bundle(tmp_path, "scheduler: sjf\n", "rel.yaml")
    _, scenario = convert(*BASE, *COEFFS[:2], "--policy-config", "rel.yaml", cwd=tmp_path)
    assert scenario.policies.scheduler.type == "sjf"


def test_bucket_values_from_the_bundle_are_checked_where_they_come_from(tmp_path):
    path = bundle(tmp_path, "admission:\n  policy: token-bucket\n  token_bucket_capacity: 0\n")
    with pytest.raises(ScenarioError) as err:
        blis_command(["run", *BASE, *COEFFS[:2], "--policy-config", str(path)])
    assert err.value.path == f"--policy-config {path}: admission.token_bucket_capacity"
    # a capacity of 0 is valid YAML for the reference; it only fails with token-bucket
    _, scenario = convert(*BASE, *COEFFS[:2], "--policy-config", str(path),
                          "--admission-policy", "always-admit")
    assert scenario.policies.admission.type == "always-admit"
    # and a flag can repair it
    _, scenario = convert(*BASE, *COEFFS[:2], "--policy-config", str(path),
                          "--token-bucket-capacity", "7")
    assert scenario.policies.admission.params["capacity"] == 7.0


def test_bad_policy_config_names_flag_file_and_key(tmp_path):
    path = bundle(tmp_path, "routing:\n  policy: random\n")
    with pytest.raises(ScenarioError) as err:
        blis_command(["run", *BASE, *COEFFS[:2], "--policy-config", str(path)])
    assert err.value.path == f"--policy-config {path}: routing.policy"
    assert "round-robin" in err.value.valid


def test_invalid_bundle_fails_even_when_flags_override_it(tmp_path):
    path = bundle(tmp_path, "scheduler: lifo\n")
    with pytest.raises(ScenarioError, match="unknown scheduler 'lifo'"):
        blis_command(["run", *BASE, *COEFFS[:2], "--policy-config", str(path),
                      "--scheduler", "fcfs"])


def test_missing_policy_config_file(tmp_path):
    with pytest.raises(ScenarioError, match="cannot read") as err:
        blis_command(["run", *BASE, *COEFFS[:2], "--policy-config", "nope.yaml"],
                     cwd=tmp_path)
    assert err.value.path == "--policy-config nope.yaml"
