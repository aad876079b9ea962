"""Issue 35 item 8: every flag the reference's head has on `blis run` is converted or refused
with a reason; one case per flag (the converted scenario loads and, for a head feature, runs
natively).

HEAD_RUN_FLAGS lists the head's `run` flags (cmd/root.go and cmd/saturation.go at inference-sim
f90a1e3a)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

import blis_simpy
from blis_simpy.cli import app
from blis_simpy.compat.convert import blis_command, to_yaml
from blis_simpy.compat.flags import (
    ALIASES,
    AUTOSCALER_FLAGS,
    FLAGS,
    LATER_FLAGS,
    REFUSED,
)
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import ScenarioError
from tests.compat.helpers import COEFFS, LLAMA

HEAD_RUN_FLAGS = [
    "seed", "horizon", "log", "defaults-filepath", "model-config-folder", "hardware-config",
    "total-kv-blocks", "max-num-seqs", "max-num-batched-tokens", "max-num-running-reqs",
    "max-num-scheduled-tokens", "beta-coeffs", "alpha-coeffs", "block-size-in-tokens",
    "long-prefill-token-threshold", "model", "hardware", "tp", "dp", "enable-expert-parallel",
    "moe-comm-backend", "latency-model", "max-model-len", "num-instances", "admission-policy",
    "admission-latency", "routing-latency", "token-bucket-capacity", "token-bucket-refill-rate",
    "routing-policy", "routing-scorers", "lora-scorer-weight", "scheduler", "preemption-policy",
    "policy-config", "fitness-weights", "trace-level", "counterfactual-k", "summarize-trace",
    "kv-cpu-blocks", "kv-offload-threshold", "kv-transfer-bandwidth", "kv-transfer-base-latency",
    "snapshot-refresh-interval", "cache-signal-delay", "model-autoscaler-interval-us",
    "gpu-memory-utilization", "prefill-instances", "decode-instances", "prefill-decode-instances",
    "pd-decider", "pd-transfer-bandwidth", "pd-transfer-base-latency", "pd-transfer-contention",
    "pd-prefix-threshold", "prefill-routing-scorers", "decode-routing-scorers", "encode-instances",
    "encode-decider", "flow-control", "saturation-detector", "dispatch-order", "slo-targets",
    "max-gateway-queue-depth", "queue-depth-threshold", "kv-cache-util-threshold",
    "max-concurrency", "per-band-capacity", "usage-limit-threshold", "fairness-policy",
    "request-ttl", "queue-shedding", "dispatch-tick-interval", "in-flight-eviction", "prefill-tp",
    "decode-tp", "prefill-hardware", "decode-hardware", "prefill-latency-model",
    "decode-latency-model", "prefill-max-model-len", "decode-max-model-len", "lora-config",
    "lora-adapter-capacity", "lora-load-base-latency-us", "lora-load-bandwidth-bytes-us",
    "lora-footprint-bytes-per-rank", "kv-offload-config", "workload", "rate", "num-requests",
    "concurrency", "think-time-ms", "prefix-tokens", "prompt-tokens", "prompt-tokens-stdev",
    "prompt-tokens-min", "prompt-tokens-max", "output-tokens", "output-tokens-stdev",
    "output-tokens-min", "output-tokens-max", "workload-spec", "lazy-generation", "timeout",
    "slo-ttft", "slo-itl", "slo-e2e", "trace-output", "metrics-path", "detectors",
    "saturation-config", "saturation-report", "saturation-final-window"
]
RUN = ["run", "--model", LLAMA, *COEFFS, "--num-instances", "2", "--num-requests", "20",
       "--rate", "20"]


def converted(*flags: str) -> dict[str, Any]:
    data = blis_command([*RUN, *flags])
    Scenario.from_dict(data)
    return data


def test_every_head_flag_is_converted_or_refused_with_a_reason():
    handled = set(FLAGS) | set(ALIASES) | set(REFUSED) | LATER_FLAGS | AUTOSCALER_FLAGS
    assert sorted(set(HEAD_RUN_FLAGS) - handled) == []
    assert not set(REFUSED) & set(FLAGS)


# Flags the older reference had too: tests/compat/test_convert.py and test_policy_config.py
# cover them; the head's renamed ones and its new ones are here, one case each.
MAPPED: dict[str, tuple[list[str], Any]] = {
    "max-num-seqs": (["--max-num-seqs", "64"],
                     lambda d: d["engine"]["max_running_requests"] == 64),
    "max-num-batched-tokens": (["--max-num-batched-tokens", "512"],
                               lambda d: d["engine"]["max_scheduled_tokens"] == 512),
    "preemption-policy": (["--preemption-policy", "priority"],
                          lambda d: d["policies"]["scheduler"]["params"]["preemption"]
                          == "lowest-priority" and d["compat"] == "none"),
    "cache-signal-delay": (["--cache-signal-delay", "20000"],
                           lambda d: d["cluster"]["observability"]["cached_blocks"]
                           == {"mode": "periodic", "interval_s": 0.02}),
    "latency-model": (["--latency-model", "roofline", "--hardware", "H100", "--tp", "1",
                       "--alpha-coeffs", "0,0,0", "--beta-coeffs", "0,0,0"],
                      lambda d: d["latency"]["type"] == "roofline"),
    "timeout": (["--timeout", "30"],
                lambda d: d["workload"]["timeout_s"] == 30.0 and d["compat"] == "none"),
    "slo-ttft": (["--slo-ttft", "critical=100ms,standard=1.5s"],
                 lambda d: d["evaluation"]["slo_targets"] == {
                     "critical": {"ttft_ms": 100.0}, "standard": {"ttft_ms": 1500.0}}
                 and d["compat"] == "blis"),
    "slo-itl": (["--slo-itl", "critical=50ms"],
                lambda d: d["evaluation"]["slo_targets"] == {"critical": {"tpot_ms": 50.0}}),
    "slo-e2e": (["--slo-e2e", "critical=1m30s"],
                lambda d: d["evaluation"]["slo_targets"] == {"critical": {"e2e_ms": 90000.0}}),
    "lazy-generation": (["--lazy-generation"], lambda d: d["compat"] == "blis"),
    "metrics-path": (["--metrics-path", "m.json"], lambda d: d["compat"] == "blis"),
    "detectors": (["--detectors", "composite,backlog-drift"],  # the native detector runs
                  lambda d: d["compat"] == "blis" and "saturation" not in d.get("evaluation",
                                                                                {})),
    "saturation-final-window": (["--detectors", "backlog-drift", "--saturation-final-window",
                                 "1m30s"],
                                lambda d: d["evaluation"]["saturation"] == {"window_s": 90.0}
                                and d["compat"] == "blis"),
    "flow-control": (["--flow-control"],
                     lambda d: d["cluster"]["flow_control"]["saturation"] == {"type": "never"}
                     and d["cluster"]["flow_control"]["dispatch_order"] == "fifo"
                     and d["compat"] == "none"),
    "saturation-detector": (["--flow-control", "--saturation-detector", "concurrency"],
                            lambda d: d["cluster"]["flow_control"]["saturation"] == {
                                "type": "concurrency", "max_in_flight": 100}),
    "queue-depth-threshold": (["--flow-control", "--saturation-detector", "utilization",
                               "--queue-depth-threshold", "7"],
                              lambda d: d["cluster"]["flow_control"]["saturation"][
                                  "queue_depth"] == 7.0),
    "kv-cache-util-threshold": (["--flow-control", "--saturation-detector", "utilization",
                                 "--kv-cache-util-threshold", "0.5"],
                                lambda d: d["cluster"]["flow_control"]["saturation"][
                                    "kv_utilization"] == 0.5),
    "max-concurrency": (["--flow-control", "--saturation-detector", "concurrency",
                         "--max-concurrency", "8"],
                        lambda d: d["cluster"]["flow_control"]["saturation"][
                            "max_in_flight"] == 8),
    "dispatch-order": (["--flow-control", "--dispatch-order", "slo-deadline"],
                       lambda d: d["cluster"]["flow_control"]["dispatch_order"]
                       == "slo-deadline"),
    "slo-targets": (["--slo-targets", "critical=100000"],
                    lambda d: d["evaluation"]["slo_targets"] == {"critical": {"ttft_ms": 100.0}}),
    "max-gateway-queue-depth": (["--flow-control", "--max-gateway-queue-depth", "50"],
                                lambda d: d["cluster"]["flow_control"]["max_queue_depth"] == 50),
    "per-band-capacity": (["--flow-control", "--per-band-capacity", "9"],
                          lambda d: d["cluster"]["flow_control"]["band_capacity"] == 9),
    "usage-limit-threshold": (["--flow-control", "--usage-limit-threshold", "0.6"],
                              lambda d: d["cluster"]["flow_control"]["usage_limit"] == 0.6),
    "fairness-policy": (["--flow-control", "--fairness-policy", "round-robin"],
                        lambda d: d["cluster"]["flow_control"]["fairness"] == "round-robin"),
    "request-ttl": (["--flow-control", "--request-ttl", "250000"],
                    lambda d: d["cluster"]["flow_control"]["queue_ttl_s"] == 0.25),
    "queue-shedding": (["--flow-control", "--queue-shedding"],
                       lambda d: d["cluster"]["flow_control"]["on_full"] == "shed-lowest"),
    "dispatch-tick-interval": (["--flow-control", "--dispatch-tick-interval", "0"],
                               lambda d: d["cluster"]["flow_control"]["dispatch_tick_s"]
                               == 0.001),
    # issue 35 item 1: LoRA adapters (the head's defaults.yaml costs: 1500 µs + 1 µs per rank)
    "lora-adapter-capacity": (["--lora-adapter-capacity", "4"],
                              lambda d: d["engine"]["lora"] == {
                                  "slots": 4, "load_ms": 1.5, "load_ms_per_rank": 0.001}
                              and d["compat"] == "none"),
    "lora-load-base-latency-us": (["--lora-adapter-capacity", "2",
                                   "--lora-load-base-latency-us", "20000"],
                                  lambda d: d["engine"]["lora"]["load_ms"] == 20.0),
    "lora-load-bandwidth-bytes-us": (["--lora-adapter-capacity", "2",
                                      "--lora-load-bandwidth-bytes-us", "25000"],
                                     lambda d: d["engine"]["lora"]["load_ms_per_rank"]
                                     == pytest.approx(2e6 / 25000 / 1000)),
    "lora-footprint-bytes-per-rank": (["--lora-adapter-capacity", "2",
                                       "--lora-footprint-bytes-per-rank", "4e6"],
                                      lambda d: d["engine"]["lora"]["load_ms_per_rank"]
                                      == pytest.approx(0.002)),
    "lora-scorer-weight": (["--routing-policy", "weighted", "--routing-scorers",
                            "queue-depth:1", "--lora-scorer-weight", "2"],
                           lambda d: d["policies"]["routing"]["params"]["scorers"]
                           == {"queue-depth": 1.0, "lora-affinity": 2.0}
                           and d["compat"] == "none"),
}


@pytest.mark.parametrize("flag", sorted(MAPPED))
def test_head_flag_is_converted(flag):
    flags, check = MAPPED[flag]
    data = converted(*flags)
    assert check(data), data


@pytest.mark.parametrize("flag", sorted(REFUSED))
def test_head_flag_is_refused_with_its_reason(flag):
    with pytest.raises(ScenarioError) as err:
        blis_command([*RUN, f"--{flag}", "1"])
    assert err.value.path == f"--{flag}"
    assert str(err.value).startswith(f"--{flag}: {REFUSED[flag]}")


def test_every_flag_of_the_head_has_its_case():
    older = {"seed", "horizon", "log", "defaults-filepath", "model-config-folder",
             "hardware-config", "total-kv-blocks", "max-num-running-reqs",
             "max-num-scheduled-tokens", "beta-coeffs", "alpha-coeffs", "block-size-in-tokens",
             "long-prefill-token-threshold", "model", "hardware", "tp", "max-model-len",
             "num-instances", "admission-policy", "admission-latency", "routing-latency",
             "token-bucket-capacity", "token-bucket-refill-rate", "routing-policy",
             "routing-scorers", "scheduler", "policy-config", "fitness-weights", "trace-level",
             "counterfactual-k", "summarize-trace", "kv-cpu-blocks", "kv-offload-threshold",
             "kv-transfer-bandwidth", "kv-transfer-base-latency", "snapshot-refresh-interval",
             "model-autoscaler-interval-us", "workload", "rate", "num-requests",
             "prefix-tokens", "prompt-tokens", "prompt-tokens-stdev", "prompt-tokens-min",
             "prompt-tokens-max", "output-tokens", "output-tokens-stdev", "output-tokens-min",
             "output-tokens-max", "workload-spec"}
    assert sorted(set(HEAD_RUN_FLAGS) - older - set(MAPPED) - set(PARALLEL) - set(REFUSED)) == []


# -- issue 35 item 4: data and expert parallelism of a mixture of experts ---------------------

MIXTRAL_RUN = ["run", "--model", "mistralai/mixtral-8x7b-instruct-v0.1", "--num-requests",
               "40", "--rate", "20"]
PARALLEL: dict[str, tuple[list[str], dict[str, Any]]] = {
    "dp": (["--dp", "2"], {"name": "mistralai/mixtral-8x7b-instruct-v0.1", "dp": 2}),
    "enable-expert-parallel": (["--tp", "2", "--enable-expert-parallel"],
                               {"name": "mistralai/mixtral-8x7b-instruct-v0.1", "tp": 2,
                                "expert_parallel": True}),
    "moe-comm-backend": (["--dp", "4", "--enable-expert-parallel", "--moe-comm-backend",
                          "deepep_low_latency", "--latency-model", "trained-physics"],
                         {"name": "mistralai/mixtral-8x7b-instruct-v0.1", "dp": 4,
                          "expert_parallel": True, "moe_comm": "deepep_low_latency"}),
}


@pytest.mark.parametrize("flag", sorted(PARALLEL))
def test_item4_parallelism_flag_is_converted_to_the_native_physical_model(flag):
    """The head costs DP/EP with its trained-physics model (its default); the native
    physical model costs them here, and each rank's KV cache is sized from memory."""
    flags, model = PARALLEL[flag]
    data = blis_command([*MIXTRAL_RUN, *flags])
    Scenario.from_dict(data)
    assert data["model"] == model
    assert data["latency"] == {"type": "physical"} and data["compat"] == "none"
    assert "kv_blocks" not in data["engine"]
    assert f"--{flag}" in to_yaml(data)  # the header names the head feature


@pytest.mark.parametrize(("flags", "flag", "says"), [
    (["--dp", "0"], "--dp", ">= 1"),
    (["--dp", "-2"], "--dp", ">= 1"),
    (["--dp", "2", "--moe-comm-backend", "nccl"], "--moe-comm-backend", "deepep_low_latency"),
    (["--moe-comm-backend", "pplx"], "--moe-comm-backend", "no effect at --dp 1"),
    (["--dp", "2", "--latency-model", "roofline"], "--latency-model", "trained-physics"),
    (["--dp", "2", "--alpha-coeffs", "1,2,3", "--beta-coeffs", "4,5,6"], "--alpha-coeffs",
     "physical"),
    (["--dp", "2", "--hardware-config", "hw.json"], "--hardware-config", "bundled GPU"),
    (["--dp", "2", "--model-config-folder", "/nonexistent"], "--model-config-folder",
     "no config.json"),
    (["--dp", "x"], "--dp", "integer"),
    (["--enable-expert-parallel=maybe"], "--enable-expert-parallel", "true or false"),
])
def test_item4_a_bad_parallelism_flag_is_an_error_naming_it(flags, flag, says):
    with pytest.raises(ScenarioError) as err:
        blis_command([*MIXTRAL_RUN, *flags])
    assert err.value.path == flag
    assert says in str(err.value)


@pytest.mark.parametrize(("flags", "flag", "says"), [
    (["--dp", "2"], "--dp", "independent engines"),
    (["--enable-expert-parallel"], "--enable-expert-parallel", "refuses expert parallelism"),
])
def test_item4_a_dense_model_refuses_ranks_and_expert_parallelism(flags, flag, says):
    with pytest.raises(ScenarioError) as err:
        blis_command(["run", "--model", LLAMA, *flags])
    assert err.value.path == flag and says in str(err.value)
    assert "--num-instances" in str(err.value)


def test_item4_a_converted_expert_parallel_command_runs_with_every_ranks_kv_cache():
    one = Scenario.from_dict(blis_command([*MIXTRAL_RUN, "--tp", "1", "--dp", "2"]))
    four = Scenario.from_dict(blis_command([*MIXTRAL_RUN, "--tp", "1", "--dp", "4",
                                            "--enable-expert-parallel", "--moe-comm-backend",
                                            "pplx"]))
    small, big = blis_simpy.run(one), blis_simpy.run(four)
    assert small.summary["completed_requests"] == big.summary["completed_requests"] == 40
    # each rank holds 1/dp of the experts: four ranks have more than twice two ranks' KV
    assert big.scenario.engine.kv_blocks > 2 * small.scenario.engine.kv_blocks


# -- values the head uses on older flags ------------------------------------------------------

@pytest.mark.parametrize("scorer", ["precise-prefix-cache", "no-hit-lru", "active-requests",
                                    "running-requests", "load-aware", "vllm-dp"])
def test_a_head_scorer_converts_to_a_native_weighted_router(scorer):
    data = converted("--routing-policy", "weighted", "--routing-scorers",
                     f"{scorer}:2,queue-depth:1")
    assert data["policies"]["routing"]["params"]["scorers"] == {scorer: 2.0, "queue-depth": 1.0}
    assert data["compat"] == "none"


@pytest.mark.parametrize("policy", ["tier-shed", "gaie-legacy"])
def test_a_head_admission_policy_converts_natively(policy):
    data = converted("--admission-policy", policy)
    assert data["policies"]["admission"] == {"type": policy}
    assert data["compat"] == "none"


# -- errors name the flag ---------------------------------------------------------------------

@pytest.mark.parametrize(("flags", "flag"), [
    (["--preemption-policy", "lifo"], "--preemption-policy"),
    (["--timeout", "0"], "--timeout"),
    (["--cache-signal-delay", "-1"], "--cache-signal-delay"),
    (["--slo-ttft", "critical"], "--slo-ttft"),
    (["--slo-ttft", "critical=fast"], "--slo-ttft"),
    (["--slo-targets", "critical=soon"], "--slo-targets"),
    (["--slo-ttft", "critical=10ms", "--slo-targets", "critical=20000"], "--slo-targets"),
    (["--flow-control", "--saturation-detector", "psychic"], "--saturation-detector"),
    (["--detectors", "threshold"], "--detectors"),
    (["--detectors", "all"], "--detectors"),
    (["--detectors", "composite,psychic"], "--detectors"),
    (["--detectors", ", ,"], "--detectors"),
    (["--saturation-final-window", "30s"], "--saturation-final-window"),
    (["--detectors", "composite", "--saturation-final-window", "soon"],
     "--saturation-final-window"),
    (["--flow-control", "--dispatch-order", "lifo"], "--dispatch-order"),
    (["--flow-control", "--fairness-policy", "random"], "--fairness-policy"),
    (["--flow-control", "--usage-limit-threshold", "0"], "--usage-limit-threshold"),
    (["--flow-control", "--max-gateway-queue-depth", "-1"], "--max-gateway-queue-depth"),
    (["--flow-control", "--max-concurrency", "0"], "--max-concurrency"),
    (["--queue-depth-threshold", "nan"], "--queue-depth-threshold"),
    (["--latency-model", "trained-physics"], "--latency-model"),
    (["--max-num-seqs", "x"], "--max-num-seqs"),
    (["--lora-adapter-capacity", "0"], "--lora-adapter-capacity"),
    (["--lora-adapter-capacity", "2", "--lora-load-bandwidth-bytes-us", "0"],
     "--lora-load-bandwidth-bytes-us"),
    (["--lora-adapter-capacity", "2", "--lora-footprint-bytes-per-rank", "inf"],
     "--lora-footprint-bytes-per-rank"),
    (["--lora-adapter-capacity", "2", "--lora-load-base-latency-us", "-1"],
     "--lora-load-base-latency-us"),
    (["--lora-load-base-latency-us", "100"], "--lora-load-base-latency-us"),
    (["--routing-policy", "weighted", "--lora-scorer-weight", "-1"], "--lora-scorer-weight"),
    (["--routing-policy", "round-robin", "--lora-scorer-weight", "1"], "--lora-scorer-weight"),
    (["--routing-policy", "weighted", "--routing-scorers", "lora-affinity:1",
      "--lora-scorer-weight", "1"], "--lora-scorer-weight"),
])
def test_a_bad_head_flag_value_is_an_error_naming_it(flags, flag):
    with pytest.raises(ScenarioError) as err:
        blis_command([*RUN, *flags])
    assert err.value.path == flag


def test_the_converted_scenario_says_which_head_features_made_it_native():
    command = [*RUN, "--flow-control", "--routing-policy", "weighted", "--routing-scorers",
               "precise-prefix-cache:1"]
    text = to_yaml(blis_command(command))  # as `convert blis-command` writes it
    assert "--flow-control, scorer precise-prefix-cache" in text
    assert "compat: none" in text
    assert "compat: blis reproduces" not in text


def test_a_scenario_with_kv_tiers_and_head_features_names_both():
    command = [*RUN, "--kv-cpu-blocks", "100", "--preemption-policy", "priority"]
    text = to_yaml(blis_command(command))
    assert "tiered KV cache" in text
    assert "--preemption-policy priority" in text


def test_a_command_without_head_features_keeps_compat_mode():
    command = [*RUN, "--max-num-seqs", "64", "--slo-ttft", "critical=100ms",
               "--preemption-policy", "fcfs", "--cache-signal-delay", "0"]
    data = blis_command(command)
    assert data["compat"] == "blis"
    assert "compat: blis reproduces" in to_yaml(data)


def test_the_lora_affinity_scorer_converts_to_a_native_weighted_router():
    data = converted("--routing-policy", "weighted", "--routing-scorers",
                     "lora-affinity:1,queue-depth:1")
    assert data["policies"]["routing"]["params"]["scorers"] == {"lora-affinity": 1.0,
                                                                "queue-depth": 1.0}
    assert data["compat"] == "none"


def test_a_converted_lora_command_runs_with_adapter_slots():
    """Issue 35 item 8 for item 1: the head's LoRA flags give the instances adapter slots (the
    adapters come from the workload: none here, so the section counts none)."""
    data = converted("--lora-adapter-capacity", "4", "--routing-policy", "weighted",
                     "--lora-scorer-weight", "1")
    result = blis_simpy.run(Scenario.from_dict(data))
    assert result.summary["completed_requests"] == 20
    assert result.summary["adapters"]["requests"] == 0


def test_a_converted_flow_control_command_runs_and_queues_at_the_gateway():
    data = converted("--flow-control", "--saturation-detector", "concurrency",
                     "--max-concurrency", "1", "--rate", "200")
    result = blis_simpy.run(Scenario.from_dict(data))
    df = result.requests
    assert ((df.routed_s - df.admitted_s) > 0).any()
    assert result.summary["completed_requests"] == 20


def test_cli_refuses_a_head_flag_naming_it_and_exits_2():
    result = CliRunner().invoke(app, ["convert", "blis-command", "--", *RUN,
                                      "--lora-config", "lora.yaml"])
    assert result.exit_code == 2
    assert "--lora-config" in result.output
    assert "LoRA" in result.output and "Traceback" not in result.output


def test_cli_converts_a_head_command_to_a_native_scenario():
    result = CliRunner().invoke(app, ["convert", "blis-command", "--", *RUN, "--flow-control",
                                      "--queue-shedding"])
    assert result.exit_code == 0, result.output
    data = yaml.safe_load(result.output)
    assert data["compat"] == "none"
    assert data["cluster"]["flow_control"]["on_full"] == "shed-lowest"
    assert "It uses --flow-control, which this project models natively" in result.output
