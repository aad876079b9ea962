"""Workloads in and out of blis-simpy.

Out: `sample` runs a scenario and writes every request that arrived as a trace CSV in the
reference's format, so a workload whose timing depends on the system (chat sessions and
closed-loop users wait for their responses) can be frozen and replayed elsewhere, or by the
reference itself. The five reference columns come first, because the reference's reader (and
blis-simpy's `type: trace`) reads columns 0, 3 and 4 and ignores the rest; the tenant columns
follow for analysis.

In: two foreign workload descriptions become a blis-simpy `workload: {type: tenants}` section.
* The reference's `--workload-spec` YAML (cluster.md §6.1): clients become tenants.
* inference-perf's `load`/`data` config (github.com/kubernetes-sigs/inference-perf): its
  rate stages become a step load profile, its length distributions gaussians (or the
  uniform/fixed/lognormal shapes it names), its shared-prefix groups prefix groups.
Both are validated while converting, so an unsupported or malformed part fails with the
file's key path instead of producing a scenario that means something else. The converted
workload draws from blis-simpy's numpy streams: the request stream is statistically the
same, never draw-for-draw the same as the source tool's.
"""

from __future__ import annotations

import math
import os
import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from blis_simpy.config.errors import ScenarioError
from blis_simpy.config.resolve import resolve
from blis_simpy.config.scenario import Scenario, parse_yaml
from blis_simpy.config.schema import describe, join, load
from blis_simpy.engine.request import Request
from blis_simpy.engine.simulation import Simulation
from blis_simpy.workload.distributions import parse_distribution
from blis_simpy.workload.spec import TenantsWorkload

REFERENCE_COLUMNS = ("arrival_time", "request_id", "model", "prefill_tokens", "decode_tokens")
EXTRA_COLUMNS = ("tenant_id", "slo_class", "session_id", "turn", "request_type")
US_PER_S = 1_000_000


# ================================================================ trace export

Sampled = list[tuple[Request, np.ndarray]]


def sample_requests(scenario: Scenario) -> Sampled:
    """Run the scenario and return every request that arrived with its token ids (prompt,
    then output), in arrival order. A real run, because session turns and closed-loop users
    arrive only after earlier responses complete."""
    sim = Simulation(resolve(scenario), keep_tokens=True)
    sim.run()
    ordered = sorted(sim.requests, key=lambda r: r.arrival)  # stable: ties keep issue order
    return [(req, req.tokens) for req in ordered]


def seconds_text(micros: int) -> str:
    """µs as seconds with exactly 6 decimals, from the integer (no float rounding)."""
    return f"{micros // US_PER_S}.{micros % US_PER_S:06d}"


def csv_text(text: str) -> str:
    """A CSV field, quoted only when it must be (as Go's encoding/csv and Python's do)."""
    if any(c in text for c in ',"\r\n'):
        return '"' + text.replace('"', '""') + '"'
    return text


def token_column(ids: Any) -> str:
    """Token ids as a quoted JSON list without spaces, as the reference writes them."""
    return '"[' + ",".join(map(str, ids.tolist())) + ']"'


def trace_line(req: Request, tokens: np.ndarray, model: str) -> str:
    prompt, output = tokens[: req.input_len], tokens[req.input_len:]
    fields = [seconds_text(req.arrival), csv_text(req.name), csv_text(model),
              token_column(prompt), token_column(output), csv_text(req.tenant_id),
              csv_text(req.slo_class), csv_text(req.session_id), str(req.turn),
              csv_text(req.request_type)]
    return ",".join(fields) + "\n"


def check_target(path: Path) -> None:
    if path.is_dir():
        raise ScenarioError("--out", f"{path} is a folder", "a file path, e.g. trace.csv")
    if not path.parent.is_dir():
        raise ScenarioError("--out", f"folder {path.parent} does not exist")


def write_trace(requests: Iterable[tuple[Request, np.ndarray]], model: str, path: Path) -> int:
    """Write the trace atomically (a temporary file beside it, then a rename), so a failure
    never leaves a half-written file; returns the number of rows."""
    path = Path(path)
    check_target(path)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    count = 0
    try:
        with temp.open("x", newline="") as out:
            out.write(",".join(REFERENCE_COLUMNS + EXTRA_COLUMNS) + "\n")
            for req, tokens in requests:
                out.write(trace_line(req, tokens, model))
                count += 1
        os.replace(temp, path)
    except OSError as exc:
        temp.unlink(missing_ok=True)
        raise ScenarioError("--out", f"cannot write {path}: {exc.strerror or exc}") from None
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return count


def sample(scenario: Scenario, path: Path) -> int:
    """Run `scenario` and write its arrivals to `path` as a trace CSV; returns the row count.
    The target is checked before the run too, so a bad --out fails at once, not after it."""
    check_target(Path(path))
    return write_trace(sample_requests(scenario), scenario.model.name, Path(path))


# ================================================================ reading foreign YAML

@dataclass(frozen=True, slots=True)
class Reader:
    """Strict access to a foreign YAML file; every error names the file and the key."""

    label: str

    def error(self, key: str, problem: str, valid: str | None = None) -> ScenarioError:
        return ScenarioError(f"{self.label}: {key}" if key else self.label, problem, valid)

    def mapping(self, value: Any, key: str, fields: Iterable[str]) -> dict[str, Any]:
        """A mapping whose keys are all in `fields` (null reads as empty)."""
        fields = tuple(fields)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.error(key, f"expected a mapping, got {describe(value)}", ", ".join(fields))
        for name in value:
            if str(name) not in fields:
                raise self.error(join(key, str(name)), "unknown key", ", ".join(fields))
        return {str(k): v for k, v in value.items()}

    def items(self, value: Any, key: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.error(key, f"expected a list, got {describe(value)}")
        return value

    def number(self, value: Any, key: str, default: float | None = None) -> float:
        if value is None and default is not None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(key, f"expected a number, got {describe(value)}")
        if not math.isfinite(value):
            raise self.error(key, f"must be a finite number, got {value!r}")
        return float(value)

    def positive(self, value: Any, key: str, default: float | None = None) -> float:
        number = self.number(value, key, default)
        if number <= 0:
            raise self.error(key, f"must be > 0, got {value!r}")
        return number

    def whole(self, value: Any, key: str, default: int | None = None) -> int:
        number = self.number(value, key, None if default is None else float(default))
        if not number.is_integer():
            raise self.error(key, f"expected an integer, got {value!r}")
        return int(number)

    def text(self, value: Any, key: str) -> str:
        if value is None:
            return ""
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise self.error(key, f"expected a name, got {describe(value)}")
        return str(value)

    def flag(self, value: Any, key: str) -> bool:
        if value is None:
            return False
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {describe(value)}")
        return value

    def distribution(self, data: dict[str, Any], key: str) -> dict[str, Any]:
        """Check a converted distribution against blis-simpy's schema, under the source key."""
        try:
            parse_distribution(data, "")
        except ScenarioError as exc:
            raise self.error(join(key, exc.path) if exc.path else key, exc.problem,
                             exc.valid) from None
        return data


def read_yaml(path: Path, reader: Reader) -> Any:
    try:
        text = Path(path).read_text()
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise reader.error("", f"cannot read {path}: {reason}") from None
    return parse_yaml(text, reader.label)


@dataclass(slots=True)
class Converted:
    """A `workload:` section plus what the source said that belongs elsewhere."""

    workload: dict[str, Any]
    seed: int | None = None  # the source's seed, for the scenario's `seed`
    horizon_s: float | None = None  # the source's simulation horizon, if it has one
    notes: list[str] = field(default_factory=list)  # what was ignored or approximated


def checked(workload: dict[str, Any], reader: Reader) -> dict[str, Any]:
    """Load the converted section with the real schema, so the output is known to run."""
    try:
        load(TenantsWorkload, workload, "")
    except ScenarioError as exc:
        raise reader.error(f"(converted workload) {exc.path}", exc.problem, exc.valid) from None
    return workload


def workload_yaml(converted: Converted, title: str) -> str:
    """The section as YAML, headed by comments saying where it came from and what differs."""
    notes = [title]
    if converted.seed is not None:
        notes.append(f"Its seed is {converted.seed}: set the scenario's `seed` to it "
                     "(blis-simpy's draws differ from the source tool's anyway).")
    if converted.horizon_s is not None:
        notes.append(f"It also stops the simulation: set the scenario's "
                     f"`horizon_s: {converted.horizon_s:g}`.")
    notes += converted.notes
    lines = [line for note in notes
             for line in textwrap.wrap(note, 96, initial_indent="# ", subsequent_indent="#   ")]
    body = yaml.safe_dump({"workload": converted.workload}, sort_keys=False)
    return "\n".join(lines) + "\n" + body


# ================================================================ reference workload spec

SPEC_KEYS = ("version", "seed", "category", "aggregate_rate", "horizon", "num_requests",
             "servegen_data", "clients")
CLIENT_KEYS = ("id", "tenant_id", "slo_class", "rate_fraction", "streaming", "arrival",
               "input_distribution", "output_distribution", "prefix_group", "prefix_length",
               "network", "lifecycle", "multimodal", "reasoning")
SPEC_DIST_PARAMS: dict[str, tuple[str, ...] | None] = {
    "gaussian": ("mean", "std_dev", "min", "max"),
    "exponential": ("mean",),
    "pareto_lognormal": ("alpha", "xm", "mu", "sigma", "mix_weight"),
    "empirical": None,  # params are "<tokens>": probability
}
SPEC_PROCESSES = ("poisson", "gamma", "weibull")
DEFAULT_PREFIX_LENGTH = 50  # the reference's length for prefix_length 0
# With num_requests and no horizon the reference generates until the cap; blis-simpy's
# arrivals need a window, so it is made this many times the expected time to the cap.
CAP_WINDOW_FACTOR = 1000
SESSION_NOTE = (
    "Sessions (multi_turn): blis-simpy sends the next round think_time after the previous "
    "response completes; the reference schedules it think_time_us + output_len µs after "
    "the previous round's arrival."
)


def workload_spec(path: Path, label: str | None = None, num_requests: int | None = None,
                  horizon_us: int | None = None) -> Converted:
    """The blis-simpy workload equivalent to the reference's `--workload-spec path`.

    `num_requests` and `horizon_us` are the reference's `--num-requests`/`--horizon` when
    given explicitly; they override the spec's values, as in the reference.
    Mapping: horizon (µs) -> duration_s (arrivals in [0, horizon)); num_requests ->
    max_requests (0 = unlimited); with num_requests only, duration_s is made ample
    (CAP_WINDOW_FACTOR x num_requests / aggregate_rate) so the cap ends the arrivals."""
    reader = Reader(label or str(path))
    top = reader.mapping(read_yaml(path, reader), "", SPEC_KEYS)
    clients = reader.items(top.get("clients"), "clients")
    notes: list[str] = []
    check_servegen(reader, top, clients, notes)
    rate = reader.positive(top.get("aggregate_rate"), "aggregate_rate")
    parsed = [reader.mapping(c, f"clients[{i}]", CLIENT_KEYS) for i, c in enumerate(clients)]
    ids = tenant_ids(reader, parsed)
    groups = prefix_lengths(reader, parsed)
    tenants = [spec_tenant(reader, c, f"clients[{i}]", ids[i], notes)
               for i, c in enumerate(parsed)]
    used = [g for g in groups if any(t.get("prefix", {}).get("groups") == [g] for t in tenants)]
    workload: dict[str, Any] = {"type": "tenants", "tenants": tenants, "rate_per_s": rate}
    workload.update(spec_window(reader, top, rate, num_requests, horizon_us))
    if used:
        workload["prefix_groups"] = [
            {"id": g, "length": {"type": "constant", "value": groups[g]}} for g in used]
    seed = reader.whole(top.get("seed"), "seed", default=0)
    horizon = spec_horizon(reader, top, horizon_us)
    return Converted(checked(workload, reader), seed,
                     None if horizon is None else horizon / US_PER_S, notes)


def check_servegen(reader: Reader, top: dict[str, Any], clients: list[Any],
                   notes: list[str]) -> None:
    """ServeGen data is loaded only when there are no clients; blis-simpy has no reader."""
    if top.get("servegen_data") is None:
        if not clients:
            raise reader.error("clients", "needs at least one client")
        return
    if not clients:
        raise reader.error("servegen_data", "ServeGen data files are not supported; "
                           "describe the traffic with clients instead")
    notes.append("servegen_data is ignored: the reference reads it only without clients.")


def spec_horizon(reader: Reader, top: dict[str, Any], horizon_us: int | None) -> int | None:
    """The effective generation horizon (µs): --horizon, else the spec's (0 = unset)."""
    if horizon_us is not None:
        return horizon_us
    horizon = reader.whole(top.get("horizon"), "horizon", default=0)
    if horizon < 0:
        raise reader.error("horizon", f"must be > 0 µs (or 0: unset), got {horizon}")
    return horizon or None


def spec_window(reader: Reader, top: dict[str, Any], rate: float, num_requests: int | None,
                horizon_us: int | None) -> dict[str, Any]:
    """duration_s and max_requests from the horizon and the request cap."""
    cap = num_requests
    if cap is None:
        cap = reader.whole(top.get("num_requests"), "num_requests", default=0)
    if cap < 0:
        raise reader.error("num_requests", f"must be >= 0 (0: unlimited), got {cap}")
    horizon = spec_horizon(reader, top, horizon_us)
    if horizon is None and cap == 0:
        raise reader.error("num_requests", "the spec needs num_requests or horizon (the "
                           "reference stops with neither)", "num_requests > 0 or horizon > 0")
    window: dict[str, Any] = {}
    if horizon is not None:
        window["duration_s"] = horizon / US_PER_S
    else:
        window["duration_s"] = float(math.ceil(CAP_WINDOW_FACTOR * cap / rate))
    if cap:
        window["max_requests"] = cap
    return window


def tenant_ids(reader: Reader, clients: list[dict[str, Any]]) -> list[str]:
    """A client's tenant_id names its tenant (tenant policies key on it); a tenant_id shared
    by several clients cannot, so those clients are named by their client id."""
    tenant = [reader.text(c.get("tenant_id"), f"clients[{i}].tenant_id")
              for i, c in enumerate(clients)]
    ids = []
    for i, client in enumerate(clients):
        own = reader.text(client.get("id"), f"clients[{i}].id")
        if tenant[i] and tenant.count(tenant[i]) == 1:
            ids.append(tenant[i])
        else:
            ids.append(own or f"client-{i}")
    for i, name in enumerate(ids):
        if ids.index(name) != i:
            raise reader.error(f"clients[{i}].id", f"tenant id {name!r} is already used by "
                               f"clients[{ids.index(name)}]", "distinct ids")
    return ids


def prefix_lengths(reader: Reader, clients: list[dict[str, Any]]) -> dict[str, int]:
    """Each group's length comes from its first client, as the reference draws it."""
    groups: dict[str, int] = {}
    for i, client in enumerate(clients):
        key = f"clients[{i}]"
        name = reader.text(client.get("prefix_group"), join(key, "prefix_group"))
        length = reader.whole(client.get("prefix_length"), join(key, "prefix_length"), 0)
        if length < 0:
            raise reader.error(join(key, "prefix_length"), f"must be >= 0, got {length}")
        if name and name not in groups:
            groups[name] = length or DEFAULT_PREFIX_LENGTH
    return groups


def spec_tenant(reader: Reader, client: dict[str, Any], key: str, tenant_id: str,
                notes: list[str]) -> dict[str, Any]:
    check_unsupported(reader, client, key, notes)
    fraction = reader.number(client.get("rate_fraction"), join(key, "rate_fraction"), 0.0)
    if fraction < 0:
        raise reader.error(join(key, "rate_fraction"), f"must be >= 0, got {fraction}")
    reader.flag(client.get("streaming"), join(key, "streaming"))
    tenant: dict[str, Any] = {
        "id": tenant_id,
        "rate_fraction": fraction,
        "slo_class": reader.text(client.get("slo_class"), join(key, "slo_class")),
        "prompt": spec_distribution(reader, client.get("input_distribution"),
                                    join(key, "input_distribution")),
        "output": spec_distribution(reader, client.get("output_distribution"),
                                    join(key, "output_distribution")),
        "arrival": spec_arrival(reader, client.get("arrival"), join(key, "arrival")),
    }
    chat = spec_multi_turn(reader, client.get("reasoning"), join(key, "reasoning"))
    group = reader.text(client.get("prefix_group"), join(key, "prefix_group"))
    if chat is not None:
        tenant["request_type"] = "chat"
        tenant["chat"] = chat
        if SESSION_NOTE not in notes:
            notes.append(SESSION_NOTE)
        if group:
            notes.append(f"{key}.prefix_group is ignored: the reference's multi-turn "
                         "sessions carry no prefix.")
    elif group:
        tenant["prefix"] = {"groups": [group], "reuse_probability": 1.0}
    return tenant


def check_unsupported(reader: Reader, client: dict[str, Any], key: str,
                      notes: list[str]) -> None:
    """Parts with no blis-simpy equivalent fail; parts the reference ignores are dropped."""
    if client.get("multimodal") is not None:
        raise reader.error(join(key, "multimodal"), "multimodal clients are not supported "
                           "(blis-simpy requests are text token sequences)")
    lifecycle = reader.mapping(client.get("lifecycle"), join(key, "lifecycle"), ("windows",))
    if reader.items(lifecycle.get("windows"), join(key, "lifecycle.windows")):
        raise reader.error(join(key, "lifecycle.windows"), "lifecycle windows are not "
                           "supported; use the workload's load_profile (step or spike) instead")
    if client.get("network") is not None:
        reader.mapping(client["network"], join(key, "network"), ("rtt_ms", "bandwidth_mbps"))
        notes.append(f"{key}.network is ignored, as the reference ignores it (parsed, "
                     "never applied).")


def spec_arrival(reader: Reader, value: Any, key: str) -> dict[str, Any]:
    """poisson; gamma (cv missing: 1; cv > 10: shape < 0.01, which the reference draws as
    poisson); weibull (cv in [0.01, 10.4], missing: 1)."""
    fields = reader.mapping(value, key, ("process", "cv"))
    process = reader.text(fields.get("process"), join(key, "process")) or "poisson"
    if process not in SPEC_PROCESSES:
        raise reader.error(join(key, "process"), f"unknown arrival process {process!r}",
                           ", ".join(SPEC_PROCESSES))
    cv = None
    if fields.get("cv") is not None:
        cv = reader.positive(fields["cv"], join(key, "cv"))
    if process == "weibull" and cv is not None and not 0.01 <= cv <= 10.4:
        raise reader.error(join(key, "cv"), f"must lie in [0.01, 10.4] for weibull, got {cv}")
    if process == "poisson" or (process == "gamma" and (cv is None or cv > 10)):
        return {"type": "poisson"}
    return {"type": process, "cv": 1.0 if cv is None else cv}


def spec_distribution(reader: Reader, value: Any, key: str) -> dict[str, Any]:
    """gaussian{mean, std_dev, min, max} (int(min) == int(max): that constant), exponential
    {mean}, pareto_lognormal{alpha, xm, mu, sigma, mix_weight}, empirical{"<n>": p}.
    A missing parameter is 0, Go's zero value, as in the reference."""
    if value is None:
        raise reader.error(key, "is required", ", ".join(SPEC_DIST_PARAMS))
    fields = reader.mapping(value, key, ("type", "params", "file"))
    if fields.get("file"):
        raise reader.error(join(key, "file"), "distribution files are not supported (nor "
                           "by the reference)", "params")
    kind = reader.text(fields.get("type"), join(key, "type"))
    if kind not in SPEC_DIST_PARAMS:
        raise reader.error(join(key, "type"), f"unknown distribution type {kind!r}",
                           ", ".join(SPEC_DIST_PARAMS))
    where = join(key, "params")
    if kind == "empirical":
        return reader.distribution(spec_empirical(reader, fields.get("params"), where), key)
    params = reader.mapping(fields.get("params"), where, SPEC_DIST_PARAMS[kind] or ())
    p = {name: reader.number(params.get(name), join(where, name), 0.0)
         for name in SPEC_DIST_PARAMS[kind] or ()}
    if kind == "gaussian":
        if int(p["min"]) == int(p["max"]):
            out: dict[str, Any] = {"type": "constant", "value": p["min"]}
        else:
            out = {"type": "gaussian", "mean": p["mean"], "stdev": p["std_dev"],
                   "min": p["min"], "max": p["max"]}
    elif kind == "exponential":
        out = {"type": "exponential", "mean": p["mean"]}
    else:
        out = {"type": "pareto-lognormal", **p}
    return reader.distribution(out, where)


def spec_empirical(reader: Reader, value: Any, key: str) -> dict[str, Any]:
    """Bins with probability <= 0 are dropped, as the reference drops them."""
    if not isinstance(value, Mapping) or not value:
        raise reader.error(key, f"expected a mapping of tokens to probability, got "
                           f"{describe(value)}")
    bins = {str(k): reader.number(v, join(key, str(k))) for k, v in value.items()}
    kept = {k: w for k, w in bins.items() if w > 0}
    if not kept:
        raise reader.error(key, "no bin has a probability > 0")
    return {"type": "empirical", "bins": kept}


def spec_multi_turn(reader: Reader, value: Any, key: str) -> dict[str, Any] | None:
    """reasoning.multi_turn -> a chat session config; reason_ratio_distribution only labels
    the reference's requests and is dropped."""
    reasoning = reader.mapping(value, key, ("reason_ratio_distribution", "multi_turn"))
    if reasoning.get("multi_turn") is None:
        return None
    where = join(key, "multi_turn")
    turn = reader.mapping(reasoning["multi_turn"], where,
                          ("max_rounds", "think_time_us", "context_growth"))
    rounds = reader.whole(turn.get("max_rounds"), join(where, "max_rounds"), 0)
    if rounds < 1:
        raise reader.error(join(where, "max_rounds"), f"must be >= 1, got {rounds}")
    think = reader.number(turn.get("think_time_us"), join(where, "think_time_us"), 0.0)
    if think < 0:
        raise reader.error(join(where, "think_time_us"), f"must be >= 0, got {think}")
    growth = reader.text(turn.get("context_growth"), join(where, "context_growth"))
    if growth != "accumulate":
        raise reader.error(join(where, "context_growth"), f"{growth!r} is not supported: "
                           "blis-simpy chat sessions always carry the conversation",
                           "accumulate")
    return {"turns": {"type": "constant", "value": float(rounds)},
            "think_time_s": {"type": "constant", "value": think / US_PER_S},
            "context_growth": "linear"}


# ================================================================ inference-perf

IP_LOAD_KEYS = ("type", "interval", "stages", "sweep", "num_workers", "worker_max_concurrency",
                "worker_max_tcp_connections", "trace", "circuit_breakers", "request_timeout",
                "request_retries", "request_retry_backoff_sec", "lora_traffic_split",
                "base_seed")
IP_DATA_KEYS = ("type", "path", "input_distribution", "output_distribution", "shared_prefix",
                "multimodal", "trace", "otel_trace_replay", "conversation_replay")
IP_STAGE_KEYS = ("rate", "duration", "num_requests", "concurrency_level")
IP_DIST_KEYS = ("min", "max", "mean", "std_dev", "total_count", "type", "variance", "skew")
IP_DIST_DEFAULTS = {"min": 10.0, "max": 1024.0, "mean": 512.0, "std_dev": 200.0}
IP_SHARED_KEYS = {  # key -> its name in the output (aliases share one)
    "num_groups": "num_groups", "num_unique_system_prompts": "num_groups",
    "num_prompts_per_group": "num_prompts_per_group",
    "num_users_per_system_prompt": "num_prompts_per_group",
    "system_prompt_len": "system_prompt_len", "question_len": "question_len",
    "output_len": "output_len", "seed": "seed", "question_distribution": "question_distribution",
    "output_distribution": "output_distribution", "enable_multi_turn_chat": "multi_turn",
    "multimodal": "multimodal", "max_model_len": "max_model_len",
}
IP_PROCESSES = {"constant": "constant", "poisson": "poisson"}
IP_TENANT = "inference-perf"
IP_NOTES = ("Only load and data are converted; api, server, metrics, report and the load "
            "workers' concurrency limits describe the live client and are ignored.",)


def inference_perf(path: Path, label: str | None = None) -> Converted:
    """The blis-simpy workload equivalent to an inference-perf config's load and data.

    Stages -> rate_per_s = the highest stage rate, a step load_profile with each stage's
    multiplier = rate / highest from its start, duration_s = the stages' total; load.type
    constant|poisson -> the tenant's arrival process; lengths -> gaussian (normal), uniform,
    constant (fixed) or lognormal (only with min 0, the one case without a shift);
    shared_prefix -> num_groups prefix groups every request draws one of, uniformly."""
    reader = Reader(label or str(path))
    top = read_yaml(path, reader)
    if not isinstance(top, Mapping):
        raise reader.error("", f"expected a mapping with load and data, got {describe(top)}")
    load_cfg = reader.mapping(top.get("load"), "load", IP_LOAD_KEYS)
    data = reader.mapping(top.get("data"), "data", IP_DATA_KEYS)
    notes = list(IP_NOTES)
    tenant, groups = ip_data(reader, data, notes)
    tenant["arrival"] = {"type": ip_process(reader, load_cfg)}
    workload: dict[str, Any] = {"type": "tenants", "tenants": [tenant]}
    workload.update(ip_stages(reader, load_cfg))
    if groups:
        workload["prefix_groups"] = groups
    seed = load_cfg.get("base_seed")
    return Converted(checked(workload, reader),
                     None if seed is None else reader.whole(seed, "load.base_seed"), None, notes)


def ip_process(reader: Reader, load_cfg: dict[str, Any]) -> str:
    kind = reader.text(load_cfg.get("type"), "load.type") or "constant"
    if kind not in IP_PROCESSES:
        raise reader.error("load.type", f"{kind!r} loads are not supported (they replay "
                           "traces or hold a concurrency level)", ", ".join(IP_PROCESSES))
    for key in ("sweep", "trace"):
        if load_cfg.get(key) is not None:
            raise reader.error(join("load", key), "is not supported (a sweep probes the live "
                               "server; a trace needs its file)" if key == "sweep" else
                               "is not supported (use blis-simpy's `type: trace`)")
    return IP_PROCESSES[kind]


def ip_stages(reader: Reader, load_cfg: dict[str, Any]) -> dict[str, Any]:
    stages = reader.items(load_cfg.get("stages"), "load.stages")
    if not stages:
        raise reader.error("load.stages", "needs at least one {rate, duration} stage")
    rates, durations = [], []
    for i, stage in enumerate(stages):
        key = f"load.stages[{i}]"
        fields = reader.mapping(stage, key, IP_STAGE_KEYS)
        for name in ("num_requests", "concurrency_level"):
            if fields.get(name) is not None:
                raise reader.error(join(key, name), "belongs to concurrent loads, which are "
                                   "not supported")
        rates.append(reader.positive(fields.get("rate"), join(key, "rate")))
        durations.append(reader.positive(fields.get("duration"), join(key, "duration")))
    peak = max(rates)
    out: dict[str, Any] = {"rate_per_s": peak, "duration_s": sum(durations)}
    if len(set(rates)) > 1:
        starts = [sum(durations[:i]) for i in range(len(durations))]
        out["load_profile"] = {"type": "step", "steps": [
            {"at_s": float(at), "multiplier": rate / peak}
            for at, rate in zip(starts, rates, strict=True)]}
    return out


def ip_data(reader: Reader, data: dict[str, Any], notes: list[str]
            ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The one tenant (lengths, prefix use) and the prefix groups."""
    kind = reader.text(data.get("type"), "data.type") or "mock"
    if data.get("multimodal") is not None:
        raise reader.error("data.multimodal", "multimodal data is not supported")
    tenant: dict[str, Any] = {"id": IP_TENANT}
    if kind in ("synthetic", "random"):
        for part, name in (("prompt", "input_distribution"), ("output", "output_distribution")):
            if data.get(name) is None:
                raise reader.error(join("data", name), f"is required for data.type {kind}")
            tenant[part] = ip_distribution(reader, data[name], join("data", name))
        return tenant, []
    if kind == "shared_prefix":
        return ip_shared_prefix(reader, data.get("shared_prefix"), tenant, notes)
    raise reader.error("data.type", f"{kind!r} data is not supported (it needs a dataset or "
                       "trace file blis-simpy does not read)", "synthetic, random, shared_prefix")


def ip_distribution(reader: Reader, value: Any, key: str) -> dict[str, Any]:
    """inference-perf's Distribution: a draw clipped to [min, max] and rounded."""
    fields = reader.mapping(value, key, IP_DIST_KEYS)
    p = {name: reader.number(fields.get(name), join(key, name), default)
         for name, default in IP_DIST_DEFAULTS.items()}
    if fields.get("variance") is not None:
        if fields.get("std_dev") is not None:
            raise reader.error(join(key, "variance"), "give either std_dev or variance")
        variance = reader.number(fields["variance"], join(key, "variance"))
        if variance < 0:
            raise reader.error(join(key, "variance"), f"must be >= 0, got {variance}")
        p["std_dev"] = math.sqrt(variance)
    bounds = {"min": p["min"], "max": p["max"]}
    kind = reader.text(fields.get("type"), join(key, "type")) or "normal"
    if kind == "normal":
        out = {"type": "gaussian", "mean": p["mean"], "stdev": p["std_dev"], **bounds}
    elif kind == "uniform":
        out = {"type": "uniform", "low": p["min"], "high": p["max"], **bounds}
    elif kind == "fixed":
        out = {"type": "constant", "value": float(int(p["mean"])), **bounds}
    elif kind == "lognormal" and p["min"] == 0:
        sigma = math.sqrt(math.log1p((p["std_dev"] / p["mean"]) ** 2)) if p["mean"] > 0 else 0
        out = {"type": "lognormal", "mean": p["mean"] if p["mean"] > 0 else 1.0,
               "sigma": sigma, **bounds}
    elif kind == "lognormal":
        raise reader.error(join(key, "type"), "lognormal with min > 0 (a lognormal shifted "
                           "by min) has no blis-simpy equivalent", "normal, uniform, fixed, "
                           "or lognormal with min 0")
    else:
        raise reader.error(join(key, "type"), f"{kind!r} is not supported",
                           "normal, uniform, fixed, lognormal")
    return reader.distribution(out, key)


def ip_length(reader: Reader, value: Any, key: str, default: int) -> dict[str, Any]:
    """A shared_prefix length: a fixed int or a Distribution."""
    if value is None:
        return {"type": "constant", "value": float(default)}
    if isinstance(value, Mapping):
        return ip_distribution(reader, value, key)
    return {"type": "constant", "value": float(reader.whole(value, key))}


def ip_shared_prefix(reader: Reader, value: Any, tenant: dict[str, Any], notes: list[str]
                     ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    key = "data.shared_prefix"
    raw = reader.mapping(value, key, IP_SHARED_KEYS)
    shared = {IP_SHARED_KEYS[k]: v for k, v in raw.items()}
    if reader.flag(shared.get("multi_turn"), join(key, "enable_multi_turn_chat")):
        raise reader.error(join(key, "enable_multi_turn_chat"), "multi-turn shared-prefix "
                           "chat is not supported")
    if shared.get("multimodal") is not None:
        raise reader.error(join(key, "multimodal"), "multimodal data is not supported")
    count = reader.whole(shared.get("num_groups"), join(key, "num_groups"), 10)
    if count < 1:
        raise reader.error(join(key, "num_groups"), f"must be >= 1, got {count}")
    reader.whole(shared.get("num_prompts_per_group"), join(key, "num_prompts_per_group"), 10)
    for part, name, legacy, default in (("prompt", "question_len", "question_distribution", 50),
                                        ("output", "output_len", "output_distribution", 50)):
        if shared.get(legacy) is not None:
            if isinstance(shared.get(name), Mapping):
                raise reader.error(join(key, legacy), f"give either {legacy} or a "
                                   f"distribution in {name}")
            tenant[part] = ip_distribution(reader, shared[legacy], join(key, legacy))
        else:
            tenant[part] = ip_length(reader, shared.get(name), join(key, name), default)
    length = ip_length(reader, shared.get("system_prompt_len"), join(key, "system_prompt_len"),
                       100)
    tenant["prefix"] = {"groups": [], "reuse_probability": 1.0}
    notes.append("shared_prefix: every request draws a fresh question after its group's "
                 "system prompt; inference-perf reuses num_prompts_per_group questions per "
                 "group, so whole prompts repeat there.")
    return tenant, [{"id": f"group-{i}", "length": dict(length)} for i in range(count)]
