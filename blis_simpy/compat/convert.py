"""Turn a reference BLIS `run` command line into an equivalent compat-mode scenario.

The reference is configured by ~45 cobra/pflag flags whose defaults and interactions
(catalog lookup, roofline switch, validation) are described in engine.md §7, plus cluster and
policy flags and a PolicyBundle YAML (`--policy-config`, cluster.md §1-§3). Converting them
once, up front, into an explicit scenario means the simulator never needs to know about the
reference's command line: everything the reference resolves implicitly (coefficients, KV size,
preset lengths, policy precedence, default scorers) is written out, so the scenario says
exactly what ran.

This module builds the scenario's sections from parsed flags (`blis_simpy.compat.flags`); the
`policies:` section comes from `blis_simpy.compat.policy_config`, and --workload-spec from
`blis_simpy.compat.workload_spec`.

    >>> data = blis_command(["run", "--model", "meta-llama/llama-3.1-8b-instruct"])
    >>> data["latency"]["type"], data["engine"]["kv_blocks"]
    ('blackbox', 132139)
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blis_simpy.compat.flags import DEFAULTS_FILE, INT64_MAX, KEY_TO_FLAG, Args, parse_args
from blis_simpy.compat.head import (
    HEAD_NOTE,
    apply_head_flags,
    head_features,
    parallel_latency,
    uses_parallelism,
)
from blis_simpy.compat.policy_config import build_policies, command_policies
from blis_simpy.compat.workload_spec import workload_spec
from blis_simpy.config.catalog import (
    Catalog,
    bundled,
    bundled_hardware_config,
    bundled_model_config,
)
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.yamlio import dump_yaml
from blis_simpy.workload.imported import Converted

LOG_LEVELS = ("panic", "fatal", "error", "warn", "warning", "info", "debug", "trace")
PRESET_KEYS = ("prefix_tokens", "prompt_tokens", "prompt_tokens_stdev", "prompt_tokens_min",
               "prompt_tokens_max", "output_tokens", "output_tokens_stdev", "output_tokens_min",
               "output_tokens_max")
TRACE_LEVELS = ("none", "decisions")


# ---------------------------------------------------------------- coefficient catalog

def load_catalog(args: Args) -> Catalog:
    """The bundled catalog unless --defaults-filepath names another file.

    Called only where the reference reads the file, so a bad path with explicit
    coefficients is not an error there either."""
    if args["defaults-filepath"] == DEFAULTS_FILE:
        return bundled()
    return Catalog.from_file(args.path("defaults-filepath"), "--defaults-filepath")


def entry_flags(cat: Catalog, model: str) -> str:
    """The catalog's entries for `model` as the flags that would select them."""
    return "; ".join(sorted(f"--hardware {gpu} --tp {tp} --vllm-version {version}"
                            for gpu, tp, version in cat.combinations(model)))


# ---------------------------------------------------------------- sections

def all_zero(values: Sequence[float]) -> bool:
    return all(v == 0 for v in values)


@dataclass(slots=True)
class Latency:
    """Resolved step-time model plus the model identity it was resolved for."""
    section: dict[str, Any]
    gpu: str
    tp: int
    vllm_version: str
    kv_blocks: int | None  # from the catalog, when it supplied the coefficients


def resolve_latency(args: Args) -> Latency:
    """engine.md §7 "Coefficient resolution", with Q13 and the catalog miss made errors."""
    alpha, beta = args["alpha-coeffs"], args["beta-coeffs"]
    gpu, tp, version = args["hardware"], args["tp"], args["vllm-version"]
    if uses_parallelism(args):
        defaults = load_catalog(args).model_defaults(args["model"])
        return Latency(parallel_latency(args), gpu or str(defaults.get("GPU") or ""),
                       tp or int(defaults.get("tensor_parallelism") or 0),
                       version or str(defaults.get("vllm_version") or ""), None)
    if "latency-model" in args.given:
        return head_latency(args)
    if not (all_zero(alpha) and all_zero(beta)):
        return Latency(blackbox(alpha, beta), gpu, tp, version, None)
    if args["model-config-folder"] or args["hardware-config"]:
        return Latency(explicit_roofline(args), gpu, tp, version, None)
    return catalog_latency(args)


def head_latency(args: Args) -> Latency:
    """--latency-model (the reference head's): roofline from the bundled configs (GPU and TP
    from the flags, else the catalog's defaults, as the head reads defaults.yaml). The head's
    trained-physics model is its own fit, not reproduced."""
    name = args["latency-model"]
    if name != "roofline":
        raise ScenarioError("--latency-model", f"{name!r}: the reference head's "
                            "trained-physics coefficients are its own fit, not reproduced; "
                            "leave the flag out (the catalog's coefficients), or use roofline, "
                            "or native latency.type physical", "roofline")
    if args["model-config-folder"] or args["hardware-config"]:
        return Latency(explicit_roofline(args), args["hardware"], args["tp"],
                       args["vllm-version"], None)
    defaults = load_catalog(args).model_defaults(args["model"])
    tp = args["tp"] or int(defaults.get("tensor_parallelism") or 0)
    gpu = args["hardware"] or str(defaults.get("GPU") or "")
    version = args["vllm-version"] or str(defaults.get("vllm_version") or "")
    return Latency(bundled_roofline(args["model"], gpu, tp, version, load_catalog(args)),
                   gpu, tp, version, None)


def blackbox(alpha: Sequence[float], beta: Sequence[float], origin: str = ""
             ) -> dict[str, Any]:
    """Explicit coefficients; the reference reads only the first three of each."""
    for name, values in (("alpha-coeffs", alpha), ("beta-coeffs", beta)):
        if len(values) < 3:
            raise ScenarioError(f"--{name}", f"needs at least 3 values, got {len(values)}"
                                f"{origin}", f"{name[0]}0,{name[0]}1,{name[0]}2")
    return {"type": "blackbox", "alpha": [float(v) for v in alpha[:3]],
            "beta": [float(v) for v in beta[:3]]}


def explicit_roofline(args: Args) -> dict[str, Any]:
    """Roofline from --model-config-folder/--hardware-config, which need --hardware and --tp.

    The reference silently runs 0-µs steps when --hardware or --tp is missing (Q13); that
    is never what was meant, so it is an error here."""
    for name in ("model-config-folder", "hardware-config"):
        if not args[name]:
            raise ScenarioError(f"--{name}", "is required for the roofline model (all "
                                "coefficients are 0 and the other roofline path is given)")
    for name, ok in (("hardware", bool(args["hardware"])), ("tp", args["tp"] > 0)):
        if not ok:
            raise ScenarioError(
                f"--{name}", "is required with --model-config-folder and --hardware-config; "
                "without it the reference neither fails nor uses roofline but runs 0-µs steps "
                "(quirk Q13), which blis-simpy does not reproduce",
            )
    folder, hardware = args.path("model-config-folder"), args.path("hardware-config")
    if not (folder / "config.json").is_file():
        raise ScenarioError("--model-config-folder", f"{folder} has no config.json")
    if not hardware.is_file():
        raise ScenarioError("--hardware-config", f"{hardware} is not a file")
    return {"type": "roofline", "model_config": str(folder), "hardware_config": str(hardware)}


def catalog_latency(args: Args) -> Latency:
    """All coefficients 0 and no roofline paths: look the model up in the catalog."""
    cat = load_catalog(args)
    model = args["model"]
    defaults = cat.model_defaults(model)
    tp = args["tp"] or int(defaults.get("tensor_parallelism") or 0)
    gpu = args["hardware"] or str(defaults.get("GPU") or "")
    version = args["vllm-version"] or str(defaults.get("vllm_version") or "")
    entry = cat.find(model, gpu, tp, version)
    if entry is not None and not (all_zero(entry.alpha) and all_zero(entry.beta)):
        section = blackbox(entry.alpha, entry.beta, f" in the catalog entry of {cat.source}")
        return Latency(section, gpu, tp, version, entry.kv_blocks)
    return Latency(bundled_roofline(model, gpu, tp, version, cat), gpu, tp, version, None)


def bundled_roofline(model: str, gpu: str, tp: int, version: str, cat: Catalog
                     ) -> dict[str, Any]:
    """The catalog has no coefficients: the reference stops; blis-simpy falls back to
    roofline with its bundled configs when it has them, so the command still means something."""
    what = (f"{model!r} (--hardware {gpu or 'unset'}, --tp {tp or 'unset'}, "
            f"--vllm-version {version or 'unset'})")
    hint = ("give --alpha-coeffs and --beta-coeffs, or --model-config-folder, "
            "--hardware-config, --hardware and --tp")
    try:
        bundled_model_config(model)
    except ValueError as exc:
        raise ScenarioError("--model", f"no coefficients for {what} in {cat.source}, and "
                            f"no roofline fallback: {exc}",
                            entry_flags(cat, model) or hint) from None
    if not gpu or tp <= 0:
        missing = "--hardware" if not gpu else "--tp"
        raise ScenarioError(missing, f"no coefficients for {what} in {cat.source}; the "
                            "roofline fallback needs --hardware and --tp", hint)
    known = sorted(bundled_hardware_config())
    if gpu not in known:
        raise ScenarioError("--hardware", f"no coefficients for {what} in {cat.source}, and the "
                            f"bundled hardware config has no {gpu!r}", ", ".join(known))
    return {"type": "roofline"}


def model_section(args: Args, latency: Latency) -> dict[str, Any]:
    """Only what is known: unset values stay out so resolve() can fill them."""
    section: dict[str, Any] = {"name": args["model"]}
    if latency.gpu:
        section["gpu"] = latency.gpu
    if latency.tp:
        section["tp"] = latency.tp
    if latency.vllm_version:
        section["vllm_version"] = latency.vllm_version
    return section


def engine_section(args: Args, latency: Latency) -> dict[str, Any]:
    """--total-kv-blocks wins only when given explicitly, as the reference checks Changed()."""
    kv_blocks = args["total-kv-blocks"]
    if "total-kv-blocks" not in args.given and latency.kv_blocks is not None:
        kv_blocks = latency.kv_blocks
    if kv_blocks <= 0:
        raise ScenarioError("--total-kv-blocks", f"must be > 0, got {kv_blocks}")
    if args["block-size-in-tokens"] <= 0:
        raise ScenarioError("--block-size-in-tokens",
                            f"must be > 0, got {args['block-size-in-tokens']}")
    section = {
        "max_running_requests": args["max-num-running-reqs"],
        "max_scheduled_tokens": args["max-num-scheduled-tokens"],
        "long_prefill_threshold": args["long-prefill-token-threshold"],
        "kv_blocks": kv_blocks,
        "block_size": args["block-size-in-tokens"],
    }
    if "max-model-len" in args.given:  # the reference ignores it; blis-simpy enforces it
        section["max_model_len"] = args["max-model-len"]
    return section


TIERS_NOTE = """\
# The reference's tiered KV cache (--kv-cpu-blocks > 0) became native KV tiers, so this
# scenario runs in native mode (compat: none) and its numbers differ from the reference's:
#  - offload: the reference (b88fdf6b) offloads every cached free block once GPU use passes
#    --kv-offload-threshold and wipes it from the GPU; native `threshold` copies a block only
#    as the GPU evicts it, and keeps nothing twice. Without --kv-offload-threshold the later
#    reference's vLLM-v1 mirror design is used (offload: mirror), which ignores it;
#  - reload: the reference reloads untargeted blocks only when an allocation fails, may
#    overwrite its own reloads and keys the CPU tier by GPU block id; native reload is of one
#    request's prefix, at admission, by content hash; a CPU hit counts once in the hit rate;
#  - transfer time: the reference adds base + ceil(block_size / bandwidth) µs per block; the
#    link here takes base once per transfer plus 1e6 / blocks_per_s µs per block (blocks_per_s
#    = 1e6 / ceil(block_size / --kv-transfer-bandwidth)), transfers on it queued.
"""


def kv_tiers_section(args: Args) -> dict[str, Any] | None:
    """--kv-cpu-blocks and the transfer flags as native tiers; None without a CPU tier (the
    other tier flags then do nothing, as in the reference)."""
    cpu = args["kv-cpu-blocks"]
    threshold, bandwidth = args["kv-offload-threshold"], args["kv-transfer-bandwidth"]
    base = args["kv-transfer-base-latency"]
    if cpu < 0:
        raise ScenarioError("--kv-cpu-blocks", f"must be >= 0, got {cpu}")
    if not 0 <= threshold <= 1:
        raise ScenarioError("--kv-offload-threshold", f"must be in [0, 1], got {threshold}")
    if not (math.isfinite(bandwidth) and bandwidth > 0):
        raise ScenarioError("--kv-transfer-bandwidth", f"must be a finite value > 0, got "
                            f"{bandwidth}")
    if base < 0:
        raise ScenarioError("--kv-transfer-base-latency", f"must be >= 0, got {base}")
    if cpu == 0:
        return None
    us_per_block = math.ceil(args["block-size-in-tokens"] / bandwidth)
    section: dict[str, Any] = {"cpu_blocks": cpu, "offload": "mirror"}
    if "kv-offload-threshold" in args.given:
        section.update(offload="threshold", threshold=threshold)
    section["cpu_link"] = {"blocks_per_s": 1e6 / us_per_block, "base_latency_us": base}
    return section


def workload_section(args: Args) -> dict[str, Any]:
    name = args["workload"]
    if name == "traces":
        return trace_workload(args)
    check_rate(args["rate"])
    if name == "distribution":
        lengths = {key: args[key.replace("_", "-")] for key in PRESET_KEYS}
        check_lengths(lengths)
    else:
        cat = load_catalog(args)
        preset = cat.workload_preset(name)
        if preset is None:
            valid = ", ".join(["distribution", "traces", *cat.workload_names()])
            raise ScenarioError("--workload", f"unknown workload {name!r}", valid)
        lengths = {key: preset.get(key) or 0 for key in PRESET_KEYS}
    return {
        "type": "distribution",
        "num_requests": args["num-requests"],
        "rate_per_s": args["rate"],
        "arrival": "constant",
        "prefix_tokens": lengths["prefix_tokens"],
        "prompt": length_section(lengths, "prompt"),
        "output": length_section(lengths, "output"),
    }


def spec_workload(args: Args) -> Converted | None:
    """--workload-spec: the spec's clients become a tenants workload. As in the reference, the
    spec wins over --workload, and --num-requests, --horizon and --seed override the spec's
    values only when given explicitly."""
    if not args["workload-spec"]:
        return None
    return workload_spec(
        args.path("workload-spec"), "--workload-spec",
        num_requests=args["num-requests"] if "num-requests" in args.given else None,
        horizon_us=args["horizon"] if "horizon" in args.given else None,
    )


def trace_workload(args: Args) -> dict[str, Any]:
    if not args["workload-traces-filepath"]:
        raise ScenarioError("--workload-traces-filepath",
                            "is required when using --workload traces")
    path = args.path("workload-traces-filepath")
    if not path.is_file():
        raise ScenarioError("--workload-traces-filepath", f"{path} is not a file")
    # The reference reads its trace CSV by column position, whatever the header says.
    return {"type": "trace", "path": str(path), "format": "blis"}


def check_rate(rate: float) -> None:
    if not (math.isfinite(rate) and rate > 0):
        raise ScenarioError("--rate", f"must be a finite value > 0, got {rate}")


def check_lengths(lengths: Mapping[str, int]) -> None:
    """The reference's check: the mean *and the stdev* must lie in [min, max] (Q12)."""
    for part in ("prompt", "output"):
        low, high = lengths[f"{part}_tokens_min"], lengths[f"{part}_tokens_max"]
        for key in (f"{part}_tokens", f"{part}_tokens_stdev"):
            if not low <= lengths[key] <= high:
                flag = "--" + key.replace("_", "-")
                raise ScenarioError(
                    flag, f"{lengths[key]} is outside [--{part}-tokens-min, "
                    f"--{part}-tokens-max]; the reference requires the mean and the stdev "
                    "to lie in that range", f"{low}..{high}",
                )


def length_section(lengths: Mapping[str, int], part: str) -> dict[str, Any]:
    prefix = f"{part}_tokens"
    return {"mean": float(lengths[prefix]), "stdev": float(lengths[f"{prefix}_stdev"]),
            "min": lengths[f"{prefix}_min"], "max": lengths[f"{prefix}_max"]}


def check_ignored(args: Args) -> None:
    """Flags with no effect on the numbers: validate what the reference validates.

    --summarize-trace only prints a summary of the decision trace: accepted and ignored."""
    if args["log"].lower() not in LOG_LEVELS:
        raise ScenarioError("--log", f"invalid log level {args['log']!r}", ", ".join(LOG_LEVELS))


# ---------------------------------------------------------------- cluster

def cluster_section(args: Args) -> dict[str, Any]:
    """Replicas, control-plane latencies, snapshot freshness and decision recording.

    The reference refreshes its snapshot fields in three groups; only the KV group
    (utilization, free blocks, cache hit rate) follows --snapshot-refresh-interval, and the
    other groups are always immediate, as blis-simpy's queue_depth and batch_size are by
    default. blis-simpy's cache_hit_rate defaults to periodic, so it is always written out."""
    for name, low in (("num-instances", 1), ("counterfactual-k", 0),
                      ("snapshot-refresh-interval", 0), ("admission-latency", 0),
                      ("routing-latency", 0)):
        if args[name] < low:
            raise ScenarioError(f"--{name}", f"must be >= {low}, got {args[name]}")
    if args["trace-level"] not in TRACE_LEVELS:
        raise ScenarioError("--trace-level", f"unknown trace level {args['trace-level']!r}",
                            ", ".join(TRACE_LEVELS))
    interval = args["snapshot-refresh-interval"]

    def kv_group() -> dict[str, Any]:  # a fresh dict each time: no YAML anchors
        if interval > 0:
            return {"mode": "periodic", "interval_s": interval / 1e6}
        return {"mode": "immediate"}

    section: dict[str, Any] = {
        "instances": args["num-instances"],
        "admission_latency_us": args["admission-latency"],
        "routing_latency_us": args["routing-latency"],
        "observability": {"kv_utilization": kv_group(), "cache_hit_rate": kv_group()},
    }
    if args["trace-level"] == "decisions":
        section["trace_level"] = "decisions"
    if args["counterfactual-k"] > 0:
        section["top_k"] = args["counterfactual-k"]
    return section


# ---------------------------------------------------------------- entry points

def blis_command(argv: list[str], cwd: Path | None = None) -> dict[str, Any]:
    """The compat scenario (plain dict, schema key order) equivalent to `blis <argv>`.

    `argv` starts with the subcommand `run`; relative paths resolve against `cwd` (default:
    the current directory). Raises ScenarioError naming the offending flag."""
    args = parse_args(list(argv), (cwd or Path.cwd()).resolve())
    check_ignored(args)
    if not args["model"]:
        raise ScenarioError("--model", "is required", "a model id, e.g. "
                            "meta-llama/llama-3.1-8b-instruct")
    latency = resolve_latency(args)
    spec = spec_workload(args)
    workload = spec.workload if spec is not None else workload_section(args)
    cluster = cluster_section(args)
    policies = command_policies(args)
    data: dict[str, Any] = {
        "version": 1,
        "model": model_section(args, latency),
        "seed": args["seed"] if spec is None or "seed" in args.given else spec.seed,
        "compat": "blis",
    }
    if args["horizon"] <= 0:
        raise ScenarioError("--horizon", f"must be > 0 µs, got {args['horizon']}")
    if args["horizon"] != INT64_MAX:
        data["horizon_s"] = args["horizon"] / 1e6
    elif spec is not None and spec.horizon_s is not None:
        data["horizon_s"] = spec.horizon_s
    data["latency"] = latency.section
    data["engine"] = engine_section(args, latency)
    tiers = kv_tiers_section(args)
    if tiers is not None:
        data["engine"]["kv_tiers"] = tiers
        data["compat"] = "none"  # KV tiers are native only: see TIERS_NOTE
    data["cluster"] = cluster
    data["policies"] = policies
    data["workload"] = workload
    apply_head_flags(args, data)
    if head_features(data):
        data["compat"] = "none"  # the head's features are native: see HEAD_NOTE
    validate(data, preset=args["workload"] not in ("distribution", "traces"))
    return data


def validate(data: dict[str, Any], preset: bool) -> None:
    """Load the result with the schema and build its policies, reporting failures by the
    flag that set the value."""
    try:
        Scenario.from_dict(data)
        build_policies(data["policies"], "")
    except ScenarioError as exc:
        raise ScenarioError(flag_for(exc.path, preset), exc.problem, exc.valid) from None


def flag_for(path: str, preset: bool) -> str:
    """The flag behind a scenario path: `engine.block_size` -> `--block-size-in-tokens`."""
    key = re.sub(r"\[\d+\]$", "", path)
    if preset and key.startswith(("workload.prompt", "workload.output", "workload.prefix")):
        return "--workload"  # preset lengths come from the catalog, not from flags
    while key:
        if key in KEY_TO_FLAG:
            return KEY_TO_FLAG[key]
        key = key.rpartition(".")[0]
    return path


def unreproduced(data: dict[str, Any]) -> list[str]:
    """The converted command's settings whose reference behaviour compat deliberately does
    not reproduce (docs/differences-from-blis.md), each with what differs."""
    engine, cluster = data["engine"], data["cluster"]
    routing = data["policies"]["routing"]
    notes = []
    if "max_model_len" in engine:
        notes.append("--max-model-len: a longer request is rejected here; the reference "
                     "ignores the limit (Q10)")
    if routing["type"] == "prefix-affinity":
        notes.append("--routing-policy prefix-affinity: routes by the longest routed prefix; "
                     "the reference matches only exact duplicate prompts")
    scorers = routing.get("params", {}).get("scorers", {})
    if "prefix-affinity" in scorers and engine["block_size"] != 16:
        notes.append("the prefix-affinity scorer indexes --block-size-in-tokens blocks; the "
                     "reference's always 16 tokens")
    periodic = cluster["observability"]["kv_utilization"]["mode"] == "periodic"
    if periodic and (cluster["admission_latency_us"] or cluster["routing_latency_us"]):
        notes.append("--snapshot-refresh-interval with an admission or routing latency: a "
                     "snapshot is refreshed only when a policy reads it; the reference's "
                     "admission calls advance its refresh times too")
    return notes


def compat_claim(data: dict[str, Any]) -> str:
    """The header's line on what compat reproduces, naming the flags it does not."""
    notes = unreproduced(data)
    if not notes:
        return "# compat: blis reproduces the reference's reported numbers.\n"
    return ("# compat: blis reproduces the reference's reported numbers except where these\n"
            "# flags behave differently on purpose (docs/differences-from-blis.md), so this\n"
            "# run's numbers can differ from the reference's:\n"
            + "".join(f"#  - {note}\n" for note in notes))


def to_yaml(data: dict[str, Any], command: list[str] | None = None) -> str:
    """The scenario as YAML, headed by a comment naming the reference command it came from."""
    if command is not None:
        header = f"# Converted from the reference BLIS command:\n#   blis {shlex.join(command)}\n"
    else:
        header = "# Converted from a reference BLIS command line.\n"
    features = head_features(data)
    if "kv_tiers" in data.get("engine", {}):
        header += TIERS_NOTE
    if features:
        header += HEAD_NOTE.format(features=", ".join(features))
    if data.get("compat") == "blis":
        header += compat_claim(data)
    if data.get("workload", {}).get("type") == "tenants":
        header += ("# Except the workload: --workload-spec became a tenants workload drawn from\n"
                   "# blis-simpy's numpy streams; the reference's exact RNG stream is not\n"
                   "# reproduced, so requests and numbers differ from its run.\n")
    return header + dump_yaml(data)
