"""Turn a reference BLIS `run` command line into an equivalent compat-mode scenario.

The reference is configured by ~45 cobra/pflag flags whose defaults and interactions
(catalog lookup, roofline switch, validation) are described in engine.md §7, plus cluster and
policy flags and a PolicyBundle YAML (`--policy-config`, cluster.md §1-§3). Converting them
once, up front, into an explicit scenario means the simulator never needs to know about the
reference's command line: everything the reference resolves implicitly (coefficients, KV size,
preset lengths, policy precedence, default scorers) is written out, so the scenario says
exactly what ran.

    >>> data = blis_command(["run", "--model", "meta-llama/llama-3.1-8b-instruct"])
    >>> data["latency"]["type"], data["engine"]["kv_blocks"]
    ('blackbox', 132139)
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from blis_simpy.compat.workload_spec import workload_spec
from blis_simpy.config import catalog
from blis_simpy.config.catalog import (
    DEFAULT_KV_BLOCKS,
    bundled_hardware_config,
    bundled_model_config,
)
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.schema import join
from blis_simpy.workload.imported import Converted

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
DEFAULTS_FILE = "defaults.yaml"
LOG_LEVELS = ("panic", "fatal", "error", "warn", "warning", "info", "debug", "trace")
PRESET_KEYS = ("prefix_tokens", "prompt_tokens", "prompt_tokens_stdev", "prompt_tokens_min",
               "prompt_tokens_max", "output_tokens", "output_tokens_stdev", "output_tokens_min",
               "output_tokens_max")
# The reference's policy names per axis (cluster.md §3.5), sorted as its messages list them;
# "" is also accepted and means the flag default.
POLICY_NAMES = {
    "admission": ("always-admit", "reject-all", "token-bucket"),
    "routing": ("always-busiest", "least-loaded", "prefix-affinity", "round-robin", "weighted"),
    "priority": ("constant", "inverted-slo", "slo-based"),
    "scheduler": ("fcfs", "priority-fcfs", "reverse-priority", "sjf"),
}
SCORER_NAMES = ("kv-utilization", "load-balance", "prefix-affinity", "queue-depth")
# What a weighted router uses when neither --routing-scorers nor the bundle names scorers.
DEFAULT_SCORERS = {"prefix-affinity": 3.0, "queue-depth": 2.0, "kv-utilization": 2.0}
TRACE_LEVELS = ("none", "decisions")
# Flags of the reference's `run` that exist but are not converted.
LATER_FLAGS = frozenset({
    "fitness-weights", "kv-cpu-blocks", "kv-offload-threshold",
    "kv-transfer-bandwidth", "kv-transfer-base-latency",
})


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
    "trace-level": Flag(STR, "none", "cluster.record_decisions"),
    "counterfactual-k": Flag(INT, 0, "cluster.top_k"),
    "summarize-trace": Flag(BOOL, False, None),
}
KEY_TO_FLAG = {f.key: f"--{name}" for name, f in FLAGS.items() if f.key}
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
        name, eq, raw = token.lstrip("-").partition("=")
        flag = lookup_flag(name)
        if not eq and flag.kind is BOOL:
            raw = "true"
        elif not eq:
            if i >= len(argv) or looks_like_flag(argv[i]):
                raise ScenarioError(f"--{name}", "needs a value", flag.kind.expected)
            raw = argv[i]
            i += 1
        value = parse_value(name, flag, raw)
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
    if name in LATER_FLAGS:
        raise ScenarioError(
            f"--{name}", "is a reference flag that is not converted (the tiered KV cache, "
            "and --fitness-weights have no conversion yet)", FLAG_LIST,
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


# ---------------------------------------------------------------- coefficient catalog

@dataclass(frozen=True, slots=True)
class Catalog:
    """A defaults.yaml (bundled or --defaults-filepath) with the reference's lookup rules."""
    data: Mapping[str, Any]
    source: str

    def model_defaults(self, model: str) -> Mapping[str, Any]:
        return (self.data.get("defaults") or {}).get(model.lower()) or {}

    def workload(self, name: str) -> Mapping[str, Any] | None:
        return (self.data.get("workloads") or {}).get(name)

    def workload_names(self) -> list[str]:
        return list(self.data.get("workloads") or {})

    def find(self, model: str, gpu: str, tp: int, version: str) -> Mapping[str, Any] | None:
        """The first entry with equal (id, tp, GPU, vLLM version), as the reference picks it."""
        for row in self.data.get("models") or []:
            if (row.get("id"), row.get("tensor_parallelism"), row.get("GPU"),
                    row.get("vllm_version")) == (model.lower(), tp, gpu, version):
                return row
        return None

    def available(self, model: str) -> str:
        rows = [r for r in self.data.get("models") or [] if r.get("id") == model.lower()]
        return "; ".join(sorted(f"--hardware {r.get('GPU')} --tp {r.get('tensor_parallelism')} "
                                f"--vllm-version {r.get('vllm_version')}" for r in rows))


def load_catalog(args: Args) -> Catalog:
    """The bundled catalog unless --defaults-filepath names another file.

    Called only where the reference reads the file, so a bad path with explicit
    coefficients is not an error there either."""
    if args["defaults-filepath"] == DEFAULTS_FILE:
        return Catalog(catalog.catalog(), "the bundled defaults.yaml")
    path = args.path("defaults-filepath")
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ScenarioError("--defaults-filepath", f"cannot read {path}: "
                            f"{exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ScenarioError("--defaults-filepath", f"{path} is not valid YAML: {exc}") from None
    if not isinstance(data, Mapping):
        raise ScenarioError("--defaults-filepath", f"{path} is not a mapping with defaults, "
                            "workloads and models sections")
    return Catalog(data, str(path))


# ---------------------------------------------------------------- sections

def all_zero(values: list[float]) -> bool:
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
    if not (all_zero(alpha) and all_zero(beta)):
        return Latency(blackbox(alpha, beta), gpu, tp, version, None)
    if args["model-config-folder"] or args["hardware-config"]:
        return Latency(explicit_roofline(args), gpu, tp, version, None)
    return catalog_latency(args)


def blackbox(alpha: list[float], beta: list[float], origin: str = "") -> dict[str, Any]:
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
    row = cat.find(model, gpu, tp, version)
    alpha = [float(v) for v in (row or {}).get("alpha_coeffs") or []]
    beta = [float(v) for v in (row or {}).get("beta_coeffs") or []]
    if row is not None and not (all_zero(alpha) and all_zero(beta)):
        section = blackbox(alpha, beta, f" in the catalog entry of {cat.source}")
        return Latency(section, gpu, tp, version, int(row.get("total_kv_blocks") or 0))
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
                            f"no roofline fallback: {exc}", cat.available(model) or hint) from None
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
        preset = cat.workload(name)
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
    return {"type": "trace", "path": str(path)}


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


# ---------------------------------------------------------------- cluster and policies

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
        section["record_decisions"] = True
    if args["counterfactual-k"] > 0:
        section["top_k"] = args["counterfactual-k"]
    return section


def parse_scorers(text: str, where: str = "--routing-scorers") -> dict[str, float]:
    """`name:weight,...` as the reference's ParseScorerConfigs reads it: items and their
    halves trimmed; malformed item, unknown name, repeated name or a weight that is not a
    finite number > 0 is an error. Order is kept (it is the order scores are summed in)."""
    scorers: dict[str, float] = {}
    for item in text.split(","):
        name, colon, raw = item.strip().partition(":")
        if not colon:
            raise ScenarioError(where, f"invalid scorer config {item.strip()!r}",
                                "name:weight, e.g. prefix-affinity:3,queue-depth:2")
        name = name.strip()
        if name not in SCORER_NAMES:
            raise ScenarioError(where, f"unknown scorer {name!r}", ", ".join(SCORER_NAMES))
        if name in scorers:
            raise ScenarioError(where, f"duplicate scorer {name!r}; each scorer may appear "
                                "at most once")
        try:
            weight = go_float(raw.strip())
        except ValueError:
            raise ScenarioError(where, f"invalid weight for scorer {name!r}: {raw.strip()!r}",
                                "a finite number > 0") from None
        if not (math.isfinite(weight) and weight > 0):
            raise ScenarioError(where, f"scorer {name!r} weight must be a finite positive "
                                f"number, got {weight}")
        scorers[name] = weight
    return scorers


# flag -> its key in the PolicyBundle YAML; the axes in the order the reference checks them.
BUNDLE_KEYS = {
    "admission-policy": "admission.policy",
    "token-bucket-capacity": "admission.token_bucket_capacity",
    "token-bucket-refill-rate": "admission.token_bucket_refill_rate",
    "routing-policy": "routing.policy",
    "priority-policy": "priority.policy",
    "scheduler": "scheduler",
}
AXIS_FLAGS = {"admission": "admission-policy", "routing": "routing-policy",
              "priority": "priority-policy", "scheduler": "scheduler"}


@dataclass(slots=True)
class Bundle:
    """A validated PolicyBundle: the keys it sets (unset keys are absent) and its scorers."""
    label: str  # how messages name the file
    values: dict[str, Any]
    scorers: dict[str, float]

    def where(self, key: str) -> str:
        return f"{self.label}: {key}"


def setting(args: Args, bundle: Bundle | None, flag: str) -> tuple[Any, str]:
    """A policy value and where it came from: an explicitly given flag beats the bundle,
    which beats the flag's default (the reference's Changed() precedence)."""
    if flag not in args.given and bundle is not None:
        value = bundle.values.get(BUNDLE_KEYS[flag])
        if value is not None and value != "":
            return value, bundle.where(BUNDLE_KEYS[flag])
    return args[flag], f"--{flag}"


def policies_section(args: Args, bundle: Bundle | None) -> dict[str, Any]:
    """The four policies after precedence, with the reference's checks in its order."""
    chosen = {axis: setting(args, bundle, flag) for axis, flag in AXIS_FLAGS.items()}
    bucket: dict[str, Any] = {}
    if chosen["admission"][0] == "token-bucket":
        for flag, param in (("token-bucket-capacity", "capacity"),
                            ("token-bucket-refill-rate", "refill_per_s")):
            value, where = setting(args, bundle, flag)
            if not (math.isfinite(value) and value > 0):
                raise ScenarioError(where, f"must be a finite value > 0 for token-bucket "
                                    f"admission, got {value}")
            bucket[param] = float(value)
        bucket["cost"] = "tokens"  # the reference charges a request its input tokens
    for axis, (name, where) in chosen.items():
        if name != "" and name not in POLICY_NAMES[axis]:
            what = "scheduler" if axis == "scheduler" else f"{axis} policy"
            raise ScenarioError(where, f"unknown {what} {name!r}", ", ".join(POLICY_NAMES[axis]))
    section: dict[str, Any] = {}
    for axis in ("admission", "priority", "routing", "scheduler"):  # schema order
        name = chosen[axis][0] or FLAGS[AXIS_FLAGS[axis]].default
        section[axis] = {"type": name}
    if bucket:
        section["admission"]["params"] = bucket
    if section["routing"]["type"] == "weighted":
        if args["routing-scorers"] != "":
            scorers = parse_scorers(args["routing-scorers"])
        elif bundle is not None and bundle.scorers:
            scorers = dict(bundle.scorers)
        else:
            scorers = dict(DEFAULT_SCORERS)
        section["routing"]["params"] = {"scorers": scorers}
    # Otherwise the reference ignores --routing-scorers (with a warning) without parsing it.
    return section


# ---------------------------------------------------------------- PolicyBundle YAML

YAML_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
YAML_SPECIAL = {**{t: math.inf for t in (".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF")},
                **{t: -math.inf for t in ("-.inf", "-.Inf", "-.INF")},
                **{t: math.nan for t in (".nan", ".NaN", ".NAN")}}
YAML_NULLS = ("", "~", "null", "Null", "NULL")
SECTION_KEYS = {
    "": ("admission", "routing", "priority", "scheduler"),
    "admission": ("policy", "token_bucket_capacity", "token_bucket_refill_rate"),
    "routing": ("policy", "scorers"),
    "priority": ("policy",),
    "scorer": ("name", "weight"),
}


def node_kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    return f"{node.value!r}"


def line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


class BundleReader:
    """Go yaml.v3 decoding into the reference's PolicyBundle struct, strictly (KnownFields):
    unknown or repeated keys and values of the wrong type are errors; null means unset."""

    def __init__(self, label: str) -> None:
        self.label = label

    def error(self, key: str, problem: str, valid: str | None = None) -> ScenarioError:
        return ScenarioError(f"{self.label}: {key}" if key else self.label, problem, valid)

    @staticmethod
    def is_null(node: yaml.Node | None) -> bool:
        return node is None or (isinstance(node, yaml.ScalarNode) and (
            node.tag == "tag:yaml.org,2002:null" or (node.style is None
                                                     and node.value in YAML_NULLS)))

    def mapping(self, node: yaml.Node | None, key: str, fields: tuple[str, ...]
                ) -> dict[str, yaml.Node]:
        if self.is_null(node):
            return {}
        if not isinstance(node, yaml.MappingNode):
            raise self.error(key, f"expected a mapping, got {node_kind(node)}",
                             ", ".join(fields))
        out: dict[str, yaml.Node] = {}
        for key_node, value in node.value:
            name = str(key_node.value)
            path = join(key, name)
            if name in out:
                raise self.error(path, f"key {name!r} is repeated (line {line(key_node)})")
            if name not in fields:
                raise self.error(path, f"unknown key (line {line(key_node)})",
                                 ", ".join(fields))
            out[name] = value
        return out

    def text(self, node: yaml.Node | None, key: str) -> str:
        if self.is_null(node):
            return ""
        if not isinstance(node, yaml.ScalarNode):
            raise self.error(key, f"expected a name, got {node_kind(node)}")
        return str(node.value)

    def number(self, node: yaml.Node | None, key: str) -> float | None:
        """A YAML 1.2 int or float (as yaml.v3 resolves plain scalars); quoted is a string."""
        if self.is_null(node):
            return None
        if isinstance(node, yaml.ScalarNode) and node.style is None:
            text = node.value
            try:
                return float(go_int(text))
            except ValueError:
                pass
            if YAML_FLOAT.fullmatch(text):
                return float(text)
            if text in YAML_SPECIAL:
                return YAML_SPECIAL[text]
        raise self.error(key, f"expected a number, got {node_kind(node)}")

    def read(self, root: yaml.Node) -> Bundle:
        top = self.mapping(root, "", SECTION_KEYS[""])
        admission = self.mapping(top.get("admission"), "admission", SECTION_KEYS["admission"])
        routing = self.mapping(top.get("routing"), "routing", SECTION_KEYS["routing"])
        priority = self.mapping(top.get("priority"), "priority", SECTION_KEYS["priority"])
        values = {
            "admission.policy": self.text(admission.get("policy"), "admission.policy"),
            "admission.token_bucket_capacity": self.number(
                admission.get("token_bucket_capacity"), "admission.token_bucket_capacity"),
            "admission.token_bucket_refill_rate": self.number(
                admission.get("token_bucket_refill_rate"),
                "admission.token_bucket_refill_rate"),
            "routing.policy": self.text(routing.get("policy"), "routing.policy"),
            "priority.policy": self.text(priority.get("policy"), "priority.policy"),
            "scheduler": self.text(top.get("scheduler"), "scheduler"),
        }
        scorers = self.scorer_list(routing.get("scorers"))
        self.validate(values, scorers)
        return Bundle(self.label, values, dict(scorers))

    def scorer_list(self, node: yaml.Node | None) -> list[tuple[str, float]]:
        if self.is_null(node):
            return []
        if not isinstance(node, yaml.SequenceNode):
            raise self.error("routing.scorers", f"expected a list, got {node_kind(node)}",
                             "a list of {name, weight}")
        out = []
        for i, item in enumerate(node.value):
            key = f"routing.scorers[{i}]"
            fields = self.mapping(item, key, SECTION_KEYS["scorer"])
            weight = self.number(fields.get("weight"), f"{key}.weight")
            out.append((self.text(fields.get("name"), f"{key}.name"),
                        0.0 if weight is None else weight))  # Go's zero value
        return out

    def validate(self, values: dict[str, Any], scorers: list[tuple[str, float]]) -> None:
        """PolicyBundle.Validate: names, then bucket parameters, then scorers."""
        for axis, flag in AXIS_FLAGS.items():
            key = BUNDLE_KEYS[flag]
            if values[key] != "" and values[key] not in POLICY_NAMES[axis]:
                what = "scheduler" if axis == "scheduler" else f"{axis} policy"
                raise self.error(key, f"unknown {what} {values[key]!r}",
                                 ", ".join(POLICY_NAMES[axis]))
        for key in ("admission.token_bucket_capacity", "admission.token_bucket_refill_rate"):
            value = values[key]
            if value is not None and not math.isfinite(value):
                raise self.error(key, f"must be a finite number, got {value}")
            if value is not None and value < 0:
                raise self.error(key, f"must be non-negative, got {value}")
        seen: set[str] = set()
        for i, (name, weight) in enumerate(scorers):
            if name not in SCORER_NAMES:
                raise self.error(f"routing.scorers[{i}].name", f"unknown scorer {name!r}",
                                 ", ".join(SCORER_NAMES))
            if name in seen:
                raise self.error(f"routing.scorers[{i}].name", f"duplicate scorer {name!r}; "
                                 "each scorer may appear at most once")
            seen.add(name)
            if not (math.isfinite(weight) and weight > 0):
                raise self.error(f"routing.scorers[{i}].weight", f"scorer {name!r}: weight "
                                 f"must be a finite positive number, got {weight}")


def load_bundle(path: Path, label: str | None = None) -> Bundle:
    """Read and validate a PolicyBundle YAML as the reference's LoadPolicyBundle + Validate:
    only the first YAML document is read, and a file without one is an error (EOF)."""
    label = label or str(path)
    try:
        text = path.read_text()
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise ScenarioError(label, f"cannot read {path}: {reason}") from None
    try:
        root = next(yaml.compose_all(text, Loader=yaml.SafeLoader), None)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ScenarioError(label, f"not valid YAML{where}: {problem}") from None
    if root is None:
        raise ScenarioError(label, "has no YAML document (the reference fails with EOF)",
                            "a mapping with admission, routing, priority and/or scheduler")
    return BundleReader(label).read(root)


def policy_config(path: Path) -> dict[str, Any]:
    """The blis-simpy `policies:` section equivalent to `--policy-config path` with no
    policy flags: what the file leaves unset takes the reference's flag defaults."""
    bundle = load_bundle(Path(path))
    section = policies_section(Args(default_values(), set(), Path.cwd()), bundle)
    build_policies(section, "")
    return section


def build_policies(policies: dict[str, Any], prefix: str) -> None:
    """Create each policy from its template, so bad parameters fail here, not at run time."""
    from blis_simpy.config.scenario import PolicyConfig
    from blis_simpy.policies.admission import ADMISSION
    from blis_simpy.policies.priority import PRIORITY
    from blis_simpy.policies.routing import ROUTING
    from blis_simpy.policies.scheduler import SCHEDULER

    for axis, registry in (("admission", ADMISSION), ("priority", PRIORITY),
                           ("routing", ROUTING), ("scheduler", SCHEDULER)):
        entry = policies[axis]
        config = PolicyConfig(entry["type"], dict(entry.get("params") or {}))
        registry.create(config, join(prefix, f"policies.{axis}"))


def policies_yaml(policies: dict[str, Any], source: str | Path | None = None) -> str:
    """A `policies:` section as YAML, headed by a comment naming the file it came from."""
    header = (f"# Converted from the reference BLIS policy config {source}\n" if source
              else "# Converted from a reference BLIS policy config.\n")
    return header + yaml.safe_dump({"policies": policies}, sort_keys=False)


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
    bundle = None
    if args["policy-config"]:
        bundle = load_bundle(args.path("policy-config"),
                             f"--policy-config {args['policy-config']}")
    policies = policies_section(args, bundle)
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
    data["cluster"] = cluster
    data["policies"] = policies
    data["workload"] = workload
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


def to_yaml(data: dict[str, Any], command: list[str] | None = None) -> str:
    """The scenario as YAML, headed by a comment naming the reference command it came from."""
    if command is not None:
        header = f"# Converted from the reference BLIS command:\n#   blis {shlex.join(command)}\n"
    else:
        header = "# Converted from a reference BLIS command line.\n"
    header += "# compat: blis reproduces the reference's reported numbers.\n"
    if data.get("workload", {}).get("type") == "tenants":
        header += ("# Except the workload: --workload-spec became a tenants workload drawn from\n"
                   "# blis-simpy's numpy streams; the reference's exact RNG stream is not\n"
                   "# reproduced, so requests and numbers differ from its run.\n")
    return header + yaml.safe_dump(data, sort_keys=False)
