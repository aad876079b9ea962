"""The flags the reference's current head added to `blis run` since the version compat mode
reproduces (b88fdf6b), converted to the native features that model the same things, or refused
with the reason and what to write instead.

A command line using one of the head's features converts to a native scenario (compat: none):
the head's numbers are not the ones compat mode reproduces, and the features are this
project's own (docs/reference/compat.md, "The reference's newer flags"). Flags that only
rename older ones (`--max-num-seqs`) or set reporting targets (`--slo-ttft`) keep compat mode.

Each flag is in exactly one table: `FLAGS` (parsed, then mapped here) or `REFUSED` (a reason,
raised when the flag is read). `tests/compat/test_head_flags.py` has a case for every one.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from blis_simpy.compat.flags import Args
from blis_simpy.config.catalog import bundled_model_config, read_json
from blis_simpy.config.moe import MOE_COMM, MoeLayout, moe_layout
from blis_simpy.config.speculation import SpeculativeConfig, draft_model_config
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.schema import load

SATURATION = ("never", "utilization", "concurrency")
DISPATCH = ("fifo", "priority", "slo-deadline")
FAIRNESS = ("global-strict", "round-robin")
PREEMPTION = {"fcfs": "lifo", "priority": "lowest-priority"}
HEAD_SCORERS = ("active-requests", "load-aware", "lora-affinity", "no-hit-lru",
                "precise-prefix-cache", "running-requests", "vllm-dp")
HEAD_ADMISSION = ("gaie-legacy", "tier-shed")
DETECTORS = ("composite", "backlog-drift", "threshold")
PARALLEL_KEYS = {"dp": "dp", "expert_parallel": "enable-expert-parallel",
                 "moe_comm": "moe-comm-backend"}


def apply_head_flags(args: Args, data: dict[str, Any]) -> None:
    """Write every head flag given into the scenario `data` (checked as the head checks them)."""
    preemption(args, data)
    timeout(args, data)
    cache_signal(args, data)
    slo_targets(args, data)
    flow_control(args, data)
    detectors(args, data)
    lora(args, data)
    speculative(args, data)
    parallelism(args, data)


def head_features(data: dict[str, Any]) -> list[str]:
    """The reference head's features a converted scenario uses; any makes it native (the
    older reference compat mode reproduces has none of them)."""
    used = []
    if "flow_control" in data["cluster"]:
        used.append("--flow-control")
    if "lora" in data["engine"]:
        used.append("--lora-adapter-capacity")
    if "speculative" in data["engine"]:
        used.append("--speculative-config")
    used += [f"--{flag}" for key, flag in PARALLEL_KEYS.items() if key in data["model"]]
    scheduler = data["policies"]["scheduler"]
    if scheduler.get("params", {}).get("preemption") == "lowest-priority":
        used.append("--preemption-policy priority")
    if "timeout_s" in data["workload"]:
        used.append("--timeout")
    admission = data["policies"]["admission"]["type"]
    if admission in HEAD_ADMISSION:
        used.append(f"admission policy {admission}")
    scorers = data["policies"]["routing"].get("params", {}).get("scorers", {})
    used += [f"scorer {name}" for name in scorers if name in HEAD_SCORERS]
    return used


def preemption(args: Args, data: dict[str, Any]) -> None:
    """--preemption-policy: fcfs (the tail of the batch: vLLM's and the older reference's
    rule) or priority (the least urgent first, by the priority policy's score)."""
    value = args["preemption-policy"]
    if value not in PREEMPTION:
        raise ScenarioError("--preemption-policy", f"unknown preemption policy {value!r}",
                            ", ".join(PREEMPTION))
    if value != "fcfs":
        scheduler = data["policies"]["scheduler"]
        scheduler["params"] = {**scheduler.get("params", {}), "preemption": PREEMPTION[value]}


def timeout(args: Args, data: dict[str, Any]) -> None:
    """--timeout (s): each request's client deadline; negative disables it, 0 is refused.
    Converted only when given (the head's 300 s default then applies to its run alone)."""
    if "timeout" not in args.given:
        return
    seconds = args["timeout"]
    if seconds == 0:
        raise ScenarioError("--timeout", "0 is refused (as by the reference)",
                            "seconds > 0, or negative to disable")
    if seconds > 0:
        data["workload"]["timeout_s"] = float(seconds)


def cache_signal(args: Args, data: dict[str, Any]) -> None:
    """--cache-signal-delay (µs): how late precise-prefix-cache and no-hit-lru hear of the
    instances' caches; 0 is the live cache."""
    if "cache-signal-delay" not in args.given:
        return
    delay = args["cache-signal-delay"]
    if delay < 0:
        raise ScenarioError("--cache-signal-delay", f"must be >= 0, got {delay}")
    rule = {"mode": "periodic", "interval_s": delay / 1e6} if delay else {"mode": "immediate"}
    data["cluster"]["observability"]["cached_blocks"] = rule


DURATION = re.compile(r"([0-9]*\.?[0-9]+)(ns|us|µs|ms|s|m|h)")
UNIT_MS = {"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4, "h": 3.6e6}


def go_duration_ms(text: str, flag: str) -> float:
    """Go's time.ParseDuration, in ms: one or more number+unit pairs (`1m30s`, `150ms`)."""
    pos, total = 0, 0.0
    body = text.strip()
    while pos < len(body):
        match = DURATION.match(body, pos)
        if match is None:
            raise ScenarioError(flag, f"invalid duration {text!r}", "e.g. 100ms, 1.5s, 2m")
        total += float(match.group(1)) * UNIT_MS[match.group(2)]
        pos = match.end()
    if not body or not total > 0:
        raise ScenarioError(flag, f"invalid duration {text!r}", "a duration > 0, e.g. 100ms")
    return total


def class_values(text: str, flag: str) -> dict[str, str]:
    """`class=value,class=value` as the reference's per-class flags read it."""
    out: dict[str, str] = {}
    for item in text.split(","):
        cls, eq, value = item.strip().partition("=")
        if not eq or not cls.strip() or not value.strip():
            raise ScenarioError(flag, f"invalid entry {item.strip()!r}", "class=value, ...")
        out[cls.strip()] = value.strip()
    return out


def slo_targets(args: Args, data: dict[str, Any]) -> None:
    """--slo-ttft/--slo-itl/--slo-e2e (goodput thresholds per SLO class, as durations) and
    --slo-targets (flow control's TTFT deadlines, µs): evaluation.slo_targets."""
    targets: dict[str, dict[str, float]] = {}
    for flag, field in (("slo-ttft", "ttft_ms"), ("slo-itl", "tpot_ms"), ("slo-e2e", "e2e_ms")):
        if args[flag]:
            for cls, value in class_values(args[flag], f"--{flag}").items():
                targets.setdefault(cls, {})[field] = go_duration_ms(value, f"--{flag}")
    if args["slo-targets"]:
        for cls, value in class_values(args["slo-targets"], "--slo-targets").items():
            try:
                us = int(value)
            except ValueError:
                raise ScenarioError("--slo-targets", f"invalid target {value!r} for {cls!r}",
                                    "µs as a whole number > 0") from None
            if us <= 0:
                raise ScenarioError("--slo-targets", f"target for {cls!r} must be > 0")
            ms = us / 1000
            if targets.get(cls, {}).get("ttft_ms", ms) != ms:
                raise ScenarioError("--slo-targets", f"{cls!r}: {ms} ms differs from "
                                    f"--slo-ttft's {targets[cls]['ttft_ms']} ms")
            targets.setdefault(cls, {})["ttft_ms"] = ms
    if targets:
        data["evaluation"] = {"slo_targets": targets}


def flow_control(args: Args, data: dict[str, Any]) -> None:
    """--flow-control and its settings: cluster.flow_control. The head replaces admission with
    the queue; here admission still runs first, and the head's default (always-admit) makes
    that the same. Its settings are checked even without --flow-control (the head checks most
    only with it, and warns that they have no effect): a bad value is a mistake either way."""
    detector = args["saturation-detector"]
    for flag, value, valid in (("saturation-detector", detector, SATURATION),
                               ("dispatch-order", args["dispatch-order"], DISPATCH),
                               ("fairness-policy", args["fairness-policy"], FAIRNESS)):
        if value not in valid:
            raise ScenarioError(f"--{flag}", f"unknown value {value!r}", ", ".join(valid))
    for flag, low in (("max-gateway-queue-depth", 0), ("per-band-capacity", 0),
                      ("request-ttl", 0), ("dispatch-tick-interval", 0),
                      ("max-concurrency", 1)):
        if args[flag] < low:
            raise ScenarioError(f"--{flag}", f"must be >= {low}, got {args[flag]}")
    for flag in ("queue-depth-threshold", "kv-cache-util-threshold"):
        if not (math.isfinite(args[flag]) and args[flag] > 0):
            raise ScenarioError(f"--{flag}", f"must be a finite value > 0, got {args[flag]}")
    limit = args["usage-limit-threshold"]
    if not 0 < limit <= 1:
        raise ScenarioError("--usage-limit-threshold", f"must be in (0, 1], got {limit}")
    if not args["flow-control"]:
        return
    saturation: dict[str, Any] = {"type": detector}
    if detector == "utilization":
        saturation.update(queue_depth=args["queue-depth-threshold"],
                          kv_utilization=args["kv-cache-util-threshold"])
    elif detector == "concurrency":
        saturation["max_in_flight"] = args["max-concurrency"]
    section: dict[str, Any] = {
        "saturation": saturation,
        "max_queue_depth": args["max-gateway-queue-depth"],
        "band_capacity": args["per-band-capacity"],
        "on_full": "shed-lowest" if args["queue-shedding"] else "reject",
        "dispatch_order": args["dispatch-order"],
        "fairness": args["fairness-policy"],
        "usage_limit": limit,
        "dispatch_tick_s": (args["dispatch-tick-interval"] or 1000) / 1e6,
    }
    if args["request-ttl"]:
        section["queue_ttl_s"] = args["request-ttl"] / 1e6
    data["cluster"]["flow_control"] = section


def detectors(args: Args, data: dict[str, Any]) -> None:
    """--detectors (one of the head's post-hoc detectors, a comma-list or `all`) and
    --saturation-final-window. blis-simpy's saturation detector labels every run and its
    windows STABLE / BACKLOGGED / OVERLOADED from queue growth and throughput (as composite
    and backlog-drift do, from arrivals and completions), so the selection converts to no
    setting; `threshold` (mean E2E latency over a fixed bound) is an SLO target instead, and
    is refused. The final window (the head's trailing window for the run's last label)
    becomes the detector's window length: its last window labels that stretch."""
    selection, final = args["detectors"], args["saturation-final-window"]
    if not selection:
        if final:
            raise ScenarioError("--saturation-final-window", "requires --detectors")
        return
    names = [n.strip() for n in selection.split(",") if n.strip()]
    if selection == "all" or "threshold" in names:
        raise ScenarioError("--detectors", f"{selection!r} includes threshold, which labels "
                            "a run by its mean E2E latency against a bound: that is an SLO "
                            "target here (--slo-e2e; attainment and slo_violation anomalies)",
                            "composite or backlog-drift (blis-simpy's detector serves both)")
    for name in names:
        if name not in DETECTORS or name == "all":
            raise ScenarioError("--detectors", f"unknown detector {name!r}",
                                ", ".join(DETECTORS) + ", a comma-list of those, or all")
    if not names:
        raise ScenarioError("--detectors", f"{selection!r} selects no detector",
                            ", ".join(DETECTORS))
    if final:
        window_s = go_duration_ms(final, "--saturation-final-window") / 1000
        data.setdefault("evaluation", {})["saturation"] = {"window_s": window_s}


LORA_COST_FLAGS = ("lora-load-base-latency-us", "lora-load-bandwidth-bytes-us",
                   "lora-footprint-bytes-per-rank")


def lora(args: Args, data: dict[str, Any]) -> None:
    """--lora-adapter-capacity and the load cost: engine.lora (a load of rank r takes base +
    footprint x r / bandwidth µs, the head's formula less its rounding up to a whole µs);
    --lora-scorer-weight: the lora-affinity scorer in the weighted router's profile. The
    adapters themselves come from the workload (each tenant's `adapters`)."""
    base = args["lora-load-base-latency-us"]
    bandwidth = args["lora-load-bandwidth-bytes-us"]
    footprint = args["lora-footprint-bytes-per-rank"]
    for flag, value, low in (("lora-load-base-latency-us", base, 0.0),
                             ("lora-load-bandwidth-bytes-us", bandwidth, None),
                             ("lora-footprint-bytes-per-rank", footprint, None)):
        if not math.isfinite(value) or (value < low if low is not None else value <= 0):
            raise ScenarioError(f"--{flag}", f"must be a finite value "
                                f"{'>= 0' if low is not None else '> 0'}, got {value}")
    capacity = args["lora-adapter-capacity"]
    if "lora-adapter-capacity" in args.given:
        if capacity <= 0:
            raise ScenarioError("--lora-adapter-capacity", f"must be >= 1, got {capacity}",
                                "adapter slots per instance; leave it out for no adapters")
        data["engine"]["lora"] = {"slots": capacity, "load_ms": base / 1000,
                                  "load_ms_per_rank": footprint / bandwidth / 1000}
    elif any(flag in args.given for flag in LORA_COST_FLAGS):
        raise ScenarioError(f"--{next(f for f in LORA_COST_FLAGS if f in args.given)}",
                            "sets an adapter load cost, but no instance has adapter slots",
                            "--lora-adapter-capacity N as well")
    if "lora-scorer-weight" in args.given:
        weight = args["lora-scorer-weight"]
        if not (math.isfinite(weight) and weight > 0):
            raise ScenarioError("--lora-scorer-weight", f"must be a finite value > 0, got "
                                f"{weight}")
        routing = data["policies"]["routing"]
        if routing["type"] != "weighted":
            raise ScenarioError("--lora-scorer-weight", f"has no effect with routing policy "
                                f"{routing['type']!r} (the head ignores it with a warning)",
                                "--routing-policy weighted, or leave it out")
        scorers = routing["params"]["scorers"]
        if "lora-affinity" in scorers:
            raise ScenarioError("--lora-scorer-weight", "lora-affinity is already in the "
                                "scorer profile", "its weight in --routing-scorers, or this "
                                "flag, not both")
        scorers["lora-affinity"] = weight


HEAD_NOTE = """\
# It uses {features}, which this project models natively and the older reference that
# compat mode reproduces (b88fdf6b) does not have, so it runs in native mode (compat: none);
# where the reference head has them, its numbers are its own (docs/reference/compat.md).
"""


# vLLM's --speculative-config keys converted, and the scenario key each sets.
SPECULATIVE_KEYS = {"method": "method", "model": "model", "num_speculative_tokens": "draft_tokens",
                    "acceptance_rate": "acceptance_rate"}
SPECULATIVE_METHODS = ("ngram", "draft_model")


def speculative(args: Args, data: dict[str, Any]) -> None:
    """--speculative-config (vLLM's serve flag, a JSON object; neither reference simulator
    has speculation): engine.speculative. `method` ngram or draft_model (vLLM's default when
    a `model` is named), `model` the draft, `num_speculative_tokens` k; vLLM measures how
    often drafts are accepted, a simulation needs it given: `acceptance_rate`. vLLM's n-gram
    window (`prompt_lookup_min`, `prompt_lookup_max`) shapes the acceptance rate only, and is
    read as given by it."""
    if "speculative-config" not in args.given:
        return
    flag = "--speculative-config"
    try:
        config = json.loads(args["speculative-config"])
    except ValueError as exc:
        raise ScenarioError(flag, f"is not JSON: {exc}", "a JSON object, e.g. "
                            '{"method": "ngram", "num_speculative_tokens": 4, '
                            '"acceptance_rate": 0.7}') from None
    if not isinstance(config, dict):
        raise ScenarioError(flag, "must be a JSON object", "{\"method\": ..., ...}")
    known = {*SPECULATIVE_KEYS, "prompt_lookup_min", "prompt_lookup_max"}
    unknown = sorted(set(config) - known)
    if unknown:
        raise ScenarioError(flag, f"key {unknown[0]!r} is not modelled", ", ".join(sorted(known)))
    method = config.get("method", "draft_model" if "model" in config else None)
    if method not in SPECULATIVE_METHODS:
        raise ScenarioError(flag, f"method {method!r} is not modelled (EAGLE, Medusa and MTP "
                            "heads are not)", ", ".join(SPECULATIVE_METHODS))
    for key in ("num_speculative_tokens", "acceptance_rate"):
        if key not in config:
            raise ScenarioError(flag, f"needs {key!r}" + (
                " (vLLM measures it; a simulation is given it)" if key == "acceptance_rate"
                else ""), f'"{key}": a number')
    section = {SPECULATIVE_KEYS[key]: value for key, value in {**config, "method": method}.items()
               if key in SPECULATIVE_KEYS}
    try:
        loaded = load(SpeculativeConfig, section, "")
        if method == "draft_model":
            draft_model_config(loaded)  # a draft model it knows, before the scenario is written
    except ScenarioError as exc:  # named by vLLM's key
        key = {ours: theirs for theirs, ours in SPECULATIVE_KEYS.items()}.get(
            exc.path.rpartition(".")[2], exc.path)
        raise ScenarioError(flag, f"{key}: {exc.problem}", exc.valid) from None
    data["engine"]["speculative"] = section
    if method == "draft_model" and data["latency"].get("type") == "blackbox":
        raise ScenarioError(flag, "a draft model is costed by a step model of its own "
                            "config.json, and this command runs the blackbox model",
                            "--latency-model roofline, or method ngram")
    if method == "draft_model" and "total-kv-blocks" not in args.given:
        del data["engine"]["kv_blocks"]  # sized from memory: the draft's weights and KV take some


def uses_parallelism(args: Args) -> bool:
    """--dp above 1 or --enable-expert-parallel: the MoE served over several GPUs' experts
    (the values checked as the head checks them: dp >= 1, a known backend, one that acts)."""
    dp, comm = args["dp"], args["moe-comm-backend"]
    if dp < 1:
        raise ScenarioError("--dp", f"must be >= 1, got {dp}", "data-parallel ranks, e.g. 2")
    if comm and comm not in MOE_COMM:
        raise ScenarioError("--moe-comm-backend", f"{comm!r} is not one of vLLM's MoE "
                            "all-to-all backends", ", ".join(MOE_COMM))
    if comm and dp == 1:
        raise ScenarioError("--moe-comm-backend", "has no effect at --dp 1 (the head warns and "
                            "ignores it): the MoE layers all-reduce over TP", "--dp N as well, "
                            "or leave it out")
    return dp != 1 or args["enable-expert-parallel"]


def parallel_latency(args: Args) -> dict[str, Any]:
    """The head costs DP/EP with its trained-physics model only (its own fit, refusing
    roofline); the native physical model costs them here (docs/guides/moe.md)."""
    name = args["latency-model"]
    if "latency-model" in args.given and name != "trained-physics":
        raise ScenarioError("--latency-model", f"{name!r} does not cost --dp or "
                            "--enable-expert-parallel (the head refuses it too); they are "
                            "costed by the native physical step model", "trained-physics, or "
                            "leave it out")
    for flag in ("alpha-coeffs", "beta-coeffs", "hardware-config"):
        if flag in args.given:
            raise ScenarioError(f"--{flag}", "is read by the reference's own step models; "
                                "--dp and --enable-expert-parallel run the native physical "
                                "model, with its bundled GPU figures", "leave it out")
    section: dict[str, Any] = {"type": "physical"}
    if args["model-config-folder"]:
        folder = args.path("model-config-folder")
        if not (folder / "config.json").is_file():
            raise ScenarioError("--model-config-folder", f"{folder} has no config.json")
        section["model_config"] = str(folder)
    return section


def parallelism(args: Args, data: dict[str, Any]) -> None:
    """--dp, --enable-expert-parallel, --moe-comm-backend: model.dp, model.expert_parallel,
    model.moe_comm, checked as the head checks them (dp >= 1, a MoE model, a known backend)."""
    if not uses_parallelism(args):
        return
    dp, ep, comm = args["dp"], args["enable-expert-parallel"], args["moe-comm-backend"]
    flag = "--dp" if dp != 1 else "--enable-expert-parallel"
    config = model_config(args, data["latency"].get("model_config"), flag)
    if layout(config).experts < 2:
        raise ScenarioError(flag, f"{args['model']} is dense: " + (
            "vLLM runs a dense model's data-parallel ranks as independent engines, which are "
            "instances here" if dp != 1 else "vLLM refuses expert parallelism for it"),
            "--num-instances N (and the vllm-dp routing scorer) instead")
    model = data["model"]
    if dp > 1:
        model["dp"] = dp
    if ep:
        model["expert_parallel"] = True
    if comm:
        model["moe_comm"] = comm
    if "total-kv-blocks" not in args.given:
        del data["engine"]["kv_blocks"]  # sized from memory: each rank's own KV cache


def model_config(args: Args, folder: str | None, flag: str) -> dict[str, Any]:
    try:
        return read_json(folder, "config.json") if folder \
            else bundled_model_config(args["model"])
    except ValueError as exc:
        raise ScenarioError(flag, f"needs the model's config.json for the physical step "
                            f"model: {exc}", "--model-config-folder") from None


def layout(config: dict[str, Any]) -> MoeLayout:
    text = config.get("text_config")
    merged = {**config, **text} if isinstance(text, dict) else config
    try:
        return moe_layout(merged, 0, 0)
    except ValueError as exc:
        raise ScenarioError("--model-config-folder", str(exc)) from None
