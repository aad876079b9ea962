"""The reference's `--workload-spec` YAML (spec cluster.md §6.1) as a blis-simpy
`workload: {type: tenants}` section: its clients become tenants. Validated while converting;
the converted workload draws from blis-simpy's numpy streams, not the reference's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from blis_simpy.core.schema import describe, join
from blis_simpy.core.units import US_PER_S
from blis_simpy.workload.imported import Converted, Reader, checked, read_yaml

SPEC_KEYS = ("version", "seed", "category", "aggregate_rate", "horizon", "num_requests",
             "servegen_data", "clients")
CLIENT_KEYS = ("id", "tenant_id", "slo_class", "rate_fraction", "streaming", "arrival",
               "input_distribution", "output_distribution", "prefix_group", "prefix_length",
               "network", "lifecycle", "multimodal", "reasoning", "adapter")
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
    if client.get("adapter"):
        raise reader.error(join(key, "adapter"), "a client's LoRA adapter (the head's registry "
                           "id) is not converted", "give the tenant adapters: {count, zipf, "
                           "rank} and engine.lora its slots (docs/guides/lora.md)")
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
