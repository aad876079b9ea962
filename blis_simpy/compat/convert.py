"""Turn a reference BLIS `run` command line into an equivalent compat-mode scenario.

The reference is configured by ~30 cobra/pflag flags whose defaults and interactions
(catalog lookup, roofline switch, validation) are described in engine.md §7. Converting them
once, up front, into an explicit scenario means the simulator never needs to know about the
reference's command line: everything the reference resolves implicitly (coefficients, KV size,
preset lengths) is written out, so the scenario says exactly what ran.

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

from blis_simpy.config import catalog
from blis_simpy.config.catalog import DEFAULT_KV_BLOCKS
from blis_simpy.config.errors import ScenarioError
from blis_simpy.config.scenario import Scenario
from blis_simpy.engine.roofline import bundled_hardware_config, bundled_model_config

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
DEFAULTS_FILE = "defaults.yaml"
LOG_LEVELS = ("panic", "fatal", "error", "warn", "warning", "info", "debug", "trace")
PRESET_KEYS = ("prefix_tokens", "prompt_tokens", "prompt_tokens_stdev", "prompt_tokens_min",
               "prompt_tokens_max", "output_tokens", "output_tokens_stdev", "output_tokens_min",
               "output_tokens_max")
# Policies the reference knows; only its defaults have a blis-simpy equivalent so far.
POLICY_NAMES = {
    "priority-policy": ("constant", "slo-based", "inverted-slo"),
    "scheduler": ("fcfs", "priority-fcfs", "sjf", "reverse-priority"),
}
# Flags of the reference's `run` that exist but are outside engine.md §7 (cluster.md scope).
LATER_FLAGS = frozenset({
    "num-instances", "admission-policy", "admission-latency", "routing-latency",
    "token-bucket-capacity", "token-bucket-refill-rate", "routing-policy", "routing-scorers",
    "policy-config", "fitness-weights", "trace-level", "counterfactual-k", "summarize-trace",
    "workload-spec", "kv-cpu-blocks", "kv-offload-threshold", "kv-transfer-bandwidth",
    "kv-transfer-base-latency",
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


@dataclass(frozen=True, slots=True)
class Kind:
    """How a flag's text becomes a value, and how to say what was expected."""
    parse: Callable[[str], Any]
    expected: str


INT = Kind(go_int, "an integer")
FLOAT = Kind(go_float, "a number")
FLOATS = Kind(go_floats, "comma-separated numbers, e.g. 1,2,3")
STR = Kind(str, "a string")


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
    "priority-policy": Flag(STR, "constant", None),
    "scheduler": Flag(STR, "fcfs", None),
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


def parse_args(argv: list[str], cwd: Path) -> Args:
    """pflag's syntax: `--flag value`, `--flag=value`, one or two dashes, `--` ends flags.

    Float64Slice flags append on repetition (the first use replaces the default); other
    flags keep the last value, as pflag does."""
    values = {name: (list(f.default) if isinstance(f.default, list) else f.default)
              for name, f in FLAGS.items()}
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
        if not eq:
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
            f"--{name}", "is a reference flag outside the single-instance engine; cluster, "
            "tiered-KV, trace and workload-spec flags are converted once the cluster layer "
            "exists", FLAG_LIST,
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
    """Flags with no effect on the numbers: validate what the reference validates."""
    if args["log"].lower() not in LOG_LEVELS:
        raise ScenarioError("--log", f"invalid log level {args['log']!r}", ", ".join(LOG_LEVELS))
    for name, names in POLICY_NAMES.items():
        if args[name] != names[0]:
            raise ScenarioError(
                f"--{name}", f"{args[name]!r}: only the default {names[0]!r} is converted; "
                "other policies are converted once the cluster policy layer exists",
                names[0],
            )


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
    workload = workload_section(args)
    data: dict[str, Any] = {
        "version": 1,
        "model": model_section(args, latency),
        "seed": args["seed"],
        "compat": "blis",
    }
    if args["horizon"] <= 0:
        raise ScenarioError("--horizon", f"must be > 0 µs, got {args['horizon']}")
    if args["horizon"] != INT64_MAX:
        data["horizon_s"] = args["horizon"] / 1e6
    data["latency"] = latency.section
    data["engine"] = engine_section(args, latency)
    data["workload"] = workload
    validate(data, preset=args["workload"] not in ("distribution", "traces"))
    return data


def validate(data: dict[str, Any], preset: bool) -> None:
    """Load the result with the schema, reporting failures by the flag that set the value."""
    try:
        Scenario.from_dict(data)
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
    return header + yaml.safe_dump(data, sort_keys=False)
