"""The reference's `blis run` command line as values: its flag table and pflag's syntax.

The reference reads ~45 cobra/pflag flags (engine.md §7, cluster.md §1-§3). This module knows
only what each flag is called, what kind of value it takes, its default and where its value
lands in a scenario; it parses numbers by Go's rules (strconv), so a command line the reference
accepts is accepted here and one it rejects is rejected, naming the flag. What the values mean
is decided in `blis_simpy.compat.convert` and `blis_simpy.compat.policy_config`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blis_simpy.config.catalog import DEFAULT_KV_BLOCKS
from blis_simpy.core.errors import ScenarioError

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
DEFAULTS_FILE = "defaults.yaml"
# Flags of the reference's `run` that exist but are not converted.
LATER_FLAGS = frozenset({"fitness-weights"})
# The later reference's autoscaler (cluster.md §8.1) is switched on by this flag but sized by
# the node pools of its YAML config; a flag alone has no replica bounds to convert.
AUTOSCALER_ADVICE = (
    "is the later reference's autoscaler, which takes its replica bounds from the node_pools "
    "of its YAML config, so it is not converted: write a `deployment` section (replicas "
    "min/max per config, autoscaler.interval_s = the interval in seconds, policy kv-demand "
    "for the reference's supply/demand analyzer)")
AUTOSCALER_FLAGS = frozenset({"model-autoscaler-interval-us"})


# ---------------------------------------------------------------- value parsing (Go rules)

def go_int(text: str) -> int:
    """strconv.ParseInt(text, 0, 64), which pflag uses for every integer flag.

    Base 0 means 0x/0o/0b prefixes and a bare leading 0 (octal) are honoured."""
    sign, body = (text[0], text[1:]) if text[:1] in ("+", "-") else ("", text)
    if text != text.strip() or not body or body[0] == "_":
        raise ValueError(text)
    if len(body) > 1 and body[0] == "0" and body[1] not in "xXoObB":
        body = "0o" + body[1:]
    value = int(sign + body, 0)
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{text} is out of the int64 range")
    return value


def go_float(text: str) -> float:
    """strconv.ParseFloat(text, 64): no spaces or underscores; overflow is an error, not inf."""
    body = text.lstrip("+-")
    if text != text.strip() or "_" in text or not body:
        raise ValueError(text)
    if body[:2].lower() == "0x":
        if "p" not in body.lower():
            raise ValueError(text)
        return float.fromhex(text)
    value = float(text)
    if math.isinf(value) and not body.lower().startswith("inf"):
        raise ValueError(f"{text} is out of the float64 range")
    return value


def go_floats(text: str) -> list[float]:
    """pflag's Float64Slice: comma-separated, each item parsed by ParseFloat."""
    return [go_float(item) for item in text.split(",")]


def go_bool(text: str) -> bool:
    """strconv.ParseBool, which pflag uses for `--flag=value` on a bool flag."""
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise ValueError(text)


@dataclass(frozen=True, slots=True)
class Kind:
    """How a flag's text becomes a value, and how to say what was expected."""
    parse: Callable[[str], Any]
    expected: str


INT = Kind(go_int, "an integer")
FLOAT = Kind(go_float, "a number")
FLOATS = Kind(go_floats, "comma-separated numbers, e.g. 1,2,3")
STR = Kind(str, "a string")
BOOL = Kind(go_bool, "true or false (a bare --flag means true)")


@dataclass(frozen=True, slots=True)
class Flag:
    """One flag: how its text is parsed, its default, and the scenario key it sets."""
    kind: Kind
    default: Any
    key: str | None  # where the value lands in the scenario; None: it only steers conversion


# engine.md §7, in the reference's order. `key` also maps schema errors back to flags.
FLAGS: dict[str, Flag] = {
    "model": Flag(STR, "", "model.name"),
    "seed": Flag(INT, 42, "seed"),
    "horizon": Flag(INT, INT64_MAX, "horizon_s"),
    "log": Flag(STR, "warn", None),
    "workload": Flag(STR, "distribution", "workload.type"),
    "workload-traces-filepath": Flag(STR, "", "workload.path"),
    "workload-spec": Flag(STR, "", None),
    "rate": Flag(FLOAT, 1.0, "workload.rate_per_s"),
    "num-requests": Flag(INT, 100, "workload.num_requests"),
    "prefix-tokens": Flag(INT, 0, "workload.prefix_tokens"),
    "prompt-tokens": Flag(INT, 512, "workload.prompt.mean"),
    "prompt-tokens-stdev": Flag(INT, 256, "workload.prompt.stdev"),
    "prompt-tokens-min": Flag(INT, 2, "workload.prompt.min"),
    "prompt-tokens-max": Flag(INT, 7000, "workload.prompt.max"),
    "output-tokens": Flag(INT, 512, "workload.output.mean"),
    "output-tokens-stdev": Flag(INT, 256, "workload.output.stdev"),
    "output-tokens-min": Flag(INT, 2, "workload.output.min"),
    "output-tokens-max": Flag(INT, 7000, "workload.output.max"),
    "total-kv-blocks": Flag(INT, DEFAULT_KV_BLOCKS, "engine.kv_blocks"),
    "block-size-in-tokens": Flag(INT, 16, "engine.block_size"),
    "max-num-running-reqs": Flag(INT, 256, "engine.max_running_requests"),
    "max-num-scheduled-tokens": Flag(INT, 2048, "engine.max_scheduled_tokens"),
    "long-prefill-token-threshold": Flag(INT, 0, "engine.long_prefill_threshold"),
    "max-model-len": Flag(INT, 2048, "engine.max_model_len"),
    "alpha-coeffs": Flag(FLOATS, [0.0, 0.0, 0.0], "latency.alpha"),
    "beta-coeffs": Flag(FLOATS, [0.0, 0.0, 0.0], "latency.beta"),
    "hardware": Flag(STR, "", "model.gpu"),
    "tp": Flag(INT, 0, "model.tp"),
    "vllm-version": Flag(STR, "", "model.vllm_version"),
    "model-config-folder": Flag(STR, "", "latency.model_config"),
    "hardware-config": Flag(STR, "", "latency.hardware_config"),
    "defaults-filepath": Flag(STR, DEFAULTS_FILE, None),
    "results-path": Flag(STR, "", None),
    "num-instances": Flag(INT, 1, "cluster.instances"),
    "admission-policy": Flag(STR, "always-admit", "policies.admission"),
    "admission-latency": Flag(INT, 0, "cluster.admission_latency_us"),
    "routing-latency": Flag(INT, 0, "cluster.routing_latency_us"),
    "token-bucket-capacity": Flag(FLOAT, 10_000.0, "policies.admission.params.capacity"),
    "token-bucket-refill-rate": Flag(FLOAT, 1_000.0, "policies.admission.params.refill_per_s"),
    "routing-policy": Flag(STR, "round-robin", "policies.routing"),
    "routing-scorers": Flag(STR, "", "policies.routing.params.scorers"),
    "priority-policy": Flag(STR, "constant", "policies.priority"),
    "scheduler": Flag(STR, "fcfs", "policies.scheduler"),
    "policy-config": Flag(STR, "", None),
    "snapshot-refresh-interval": Flag(INT, 0, "cluster.observability"),
    "trace-level": Flag(STR, "none", "cluster.trace_level"),
    "counterfactual-k": Flag(INT, 0, "cluster.top_k"),
    "summarize-trace": Flag(BOOL, False, None),
    # The tiered KV cache (cluster.md §7): converted to native tiers (convert.kv_tiers_section).
    "kv-cpu-blocks": Flag(INT, 0, "engine.kv_tiers.cpu_blocks"),
    "kv-offload-threshold": Flag(FLOAT, 0.9, "engine.kv_tiers.threshold"),
    "kv-transfer-bandwidth": Flag(FLOAT, 100.0, "engine.kv_tiers.cpu_link.blocks_per_s"),
    "kv-transfer-base-latency": Flag(INT, 0, "engine.kv_tiers.cpu_link.base_latency_us"),
    # The reference head's newer flags (compat/head.py converts them to native features).
    "preemption-policy": Flag(STR, "fcfs", "policies.scheduler.params.preemption"),
    "cache-signal-delay": Flag(INT, 50_000, "cluster.observability.cached_blocks"),
    "latency-model": Flag(STR, "trained-physics", "latency.type"),
    "timeout": Flag(INT, 300, "workload.timeout_s"),
    "slo-ttft": Flag(STR, "", "evaluation.slo_targets"),
    "slo-itl": Flag(STR, "", None),
    "slo-e2e": Flag(STR, "", None),
    "lazy-generation": Flag(BOOL, False, None),  # how the head generates requests: no effect
    "metrics-path": Flag(STR, "", None),  # where the head writes its metrics: no effect
    "flow-control": Flag(BOOL, False, "cluster.flow_control"),
    "saturation-detector": Flag(STR, "never", "cluster.flow_control.saturation"),
    "queue-depth-threshold": Flag(FLOAT, 5.0, "cluster.flow_control.saturation.queue_depth"),
    "kv-cache-util-threshold": Flag(FLOAT, 0.8,
                                    "cluster.flow_control.saturation.kv_utilization"),
    "max-concurrency": Flag(INT, 100, "cluster.flow_control.saturation.max_in_flight"),
    "dispatch-order": Flag(STR, "fifo", "cluster.flow_control.dispatch_order"),
    "slo-targets": Flag(STR, "", None),
    "max-gateway-queue-depth": Flag(INT, 0, "cluster.flow_control.max_queue_depth"),
    "per-band-capacity": Flag(INT, 0, "cluster.flow_control.band_capacity"),
    "usage-limit-threshold": Flag(FLOAT, 1.0, "cluster.flow_control.usage_limit"),
    "fairness-policy": Flag(STR, "global-strict", "cluster.flow_control.fairness"),
    "request-ttl": Flag(INT, 0, "cluster.flow_control.queue_ttl_s"),
    "queue-shedding": Flag(BOOL, False, "cluster.flow_control.on_full"),
    "dispatch-tick-interval": Flag(INT, 1000, "cluster.flow_control.dispatch_tick_s"),
    "detectors": Flag(STR, "", None),  # blis-simpy's detector always runs (compat/head.py)
    "saturation-final-window": Flag(STR, "", "evaluation.saturation.window_s"),
    # LoRA adapters (compat/head.py: lora); defaults are the head's defaults.yaml
    "lora-adapter-capacity": Flag(INT, 0, "engine.lora.slots"),
    "lora-load-base-latency-us": Flag(FLOAT, 1500.0, "engine.lora.load_ms"),
    "lora-load-bandwidth-bytes-us": Flag(FLOAT, 2.0e6, None),
    "lora-footprint-bytes-per-rank": Flag(FLOAT, 2.0e6, "engine.lora.load_ms_per_rank"),
    "lora-scorer-weight": Flag(FLOAT, 0.0, None),
    # vLLM's speculative decoding config (compat/head.py: speculative), which no reference has
    "speculative-config": Flag(STR, "", "engine.speculative"),
    # Data and expert parallelism of a MoE model (compat/head.py: parallelism)
    "dp": Flag(INT, 1, "model.dp"),
    "enable-expert-parallel": Flag(BOOL, False, "model.expert_parallel"),
    "moe-comm-backend": Flag(STR, "", "model.moe_comm"),
}
# The head's new names of older flags.
ALIASES = {"max-num-seqs": "max-num-running-reqs",
           "max-num-batched-tokens": "max-num-scheduled-tokens"}
PD_ADVICE = ("is the reference head's P/D disaggregation flag; write a deployment config with "
             "architecture disaggregated_pd instead (its prefill and decode pools, decider and "
             "link: docs/guides/pd.md)")
DETECTOR_ADVICE = ("tunes or writes out the reference head's own post-hoc detectors; blis-simpy's "
                   "saturation detector runs on every run (its levels: summary.json "
                   "saturation.level and .windows, `overload` rows in anomalies.csv) and has one "
                   "setting, evaluation.saturation.window_s (--saturation-final-window): leave "
                   "this flag out")
# The head's flags that are not converted, and why.
REFUSED = {
    **{name: PD_ADVICE for name in (
        "prefill-instances", "decode-instances", "prefill-decode-instances", "pd-decider",
        "pd-transfer-bandwidth", "pd-transfer-base-latency", "pd-transfer-contention",
        "pd-prefix-threshold", "prefill-routing-scorers", "decode-routing-scorers",
        "prefill-tp", "decode-tp", "prefill-hardware", "decode-hardware",
        "prefill-latency-model", "decode-latency-model", "prefill-max-model-len",
        "decode-max-model-len")},
    "encode-instances": "is the reference head's multimodal encode pool, which is not "
                        "modelled (requests carry no images)",
    "encode-decider": "is the reference head's multimodal encode pool, which is not modelled "
                      "(requests carry no images)",
    "kv-offload-config": "is the reference head's multi-tier offload file, which is not "
                         "converted: write engine.kv_tiers (docs/guides/kv-tiers.md)",
    "in-flight-eviction": "evicts running sheddable requests for queued ones (the head's own "
                          "extra, not llm-d's), which is not modelled "
                          "(docs/guides/flow-control.md)",
    "gpu-memory-utilization": "sets the share of GPU memory vLLM claims; blis-simpy sizes KV "
                              "from memory with vLLM's default 0.9: give --total-kv-blocks "
                              "for another size",
    "concurrency": "runs closed-loop users; write a tenants workload with closed_loop: "
                   "{users, think_time_s} instead (docs/guides/workloads.md)",
    "think-time-ms": "belongs to closed-loop users (--concurrency); write a tenants workload "
                     "with closed_loop: {users, think_time_s} instead (docs/guides/workloads.md)",
    "trace-output": "exports the generated workload; use `blis-simpy workload sample` "
                    "(docs/traces.md)",
    "lora-config": "is the reference head's LoRA registry file (adapter ids and ranks, step "
                   "overhead tiers), which is not converted: write engine.lora (slots, load "
                   "time) and each tenant's adapters (count, zipf, rank) instead "
                   "(docs/guides/lora.md), or the --lora-* flags",
    **{name: DETECTOR_ADVICE for name in ("saturation-config", "saturation-report")},
}
KEY_TO_FLAG = {f.key: f"--{name}" for name, f in FLAGS.items() if f.key}
KEY_TO_FLAG["cluster.flow_control.saturation.type"] = "--saturation-detector"
FLAG_LIST = ", ".join(f"--{name}" for name in FLAGS)


# ---------------------------------------------------------------- command line

@dataclass(slots=True)
class Args:
    """Parsed flag values (every flag present, defaults filled) and which were given."""
    values: dict[str, Any]
    given: set[str]
    cwd: Path

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def path(self, name: str) -> Path:
        """A path flag resolved against the command's working directory, as the reference's
        relative paths are."""
        return (self.cwd / self.values[name]).resolve()


def looks_like_flag(token: str) -> bool:
    """`-x`/`--x` with a letter after the dashes; `-1` and `-1,2` are values."""
    return bool(re.match(r"--?[A-Za-z]", token))


def default_values() -> dict[str, Any]:
    return {name: (list(f.default) if isinstance(f.default, list) else f.default)
            for name, f in FLAGS.items()}


def parse_args(argv: list[str], cwd: Path) -> Args:
    """pflag's syntax: `--flag value`, `--flag=value`, one or two dashes, `--` ends flags.

    Float64Slice flags append on repetition (the first use replaces the default); other
    flags keep the last value, as pflag does. A bool flag takes no separate value: `--flag`
    is true, `--flag=false` false."""
    values = default_values()
    given: set[str] = set()
    positionals: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if token == "--":
            positionals.extend(argv[i:])
            break
        if not looks_like_flag(token):
            positionals.append(token)
            continue
        typed, eq, raw = token.lstrip("-").partition("=")
        name = ALIASES.get(typed, typed)
        flag = lookup_flag(name)
        if not eq and flag.kind is BOOL:
            raw = "true"
        elif not eq:
            if i >= len(argv) or looks_like_flag(argv[i]):
                raise ScenarioError(f"--{typed}", "needs a value", flag.kind.expected)
            raw = argv[i]
            i += 1
        value = parse_value(typed, flag, raw)
        if flag.kind is FLOATS and name in given:
            value = values[name] + value
        values[name] = value
        given.add(name)
    check_positionals(positionals)
    return Args(values, given, cwd)


def lookup_flag(name: str) -> Flag:
    flag = FLAGS.get(name)
    if flag is not None:
        return flag
    if name in AUTOSCALER_FLAGS:
        raise ScenarioError(f"--{name}", AUTOSCALER_ADVICE, FLAG_LIST)
    if name in REFUSED:
        raise ScenarioError(f"--{name}", REFUSED[name], FLAG_LIST)
    if name in LATER_FLAGS:
        raise ScenarioError(
            f"--{name}", "is a reference flag that is not converted (--fitness-weights has no "
            "conversion yet)", FLAG_LIST,
        )
    raise ScenarioError(f"--{name}", "unknown flag for `blis run`", FLAG_LIST)


def parse_value(name: str, flag: Flag, raw: str) -> Any:
    try:
        return flag.kind.parse(raw)
    except ValueError:
        raise ScenarioError(f"--{name}", f"invalid value {raw!r}", flag.kind.expected) from None


def check_positionals(positionals: list[str]) -> None:
    if not positionals or positionals[0] != "run":
        got = repr(positionals[0]) if positionals else "nothing"
        raise ScenarioError(
            "subcommand", f"expected the subcommand `run` first, got {got}", "run"
        )
    if len(positionals) > 1:
        raise ScenarioError(positionals[1], "unexpected argument; `run` takes only flags")

