"""inference-perf's `load`/`data` config (github.com/kubernetes-sigs/inference-perf) as a
blis-simpy `workload: {type: tenants}` section: its rate stages become a step load profile, its
length distributions gaussians (or the uniform/fixed/lognormal shapes it names), its
shared-prefix groups prefix groups. Validated while converting, so an unsupported or malformed
part fails with the file's key path instead of producing a scenario that means something else.
The converted workload draws from blis-simpy's numpy streams: statistically the same request
stream, never draw-for-draw the same as the tool's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from blis_simpy.core.schema import describe, join
from blis_simpy.workload.imported import Converted, Reader, checked, read_yaml

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
    shared_prefix -> num_groups prefix groups every request draws one of, uniformly;
    load.request_timeout -> the workload's client timeout_s."""
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
    if load_cfg.get("request_timeout") is not None:  # the client's per-request timeout
        workload["timeout_s"] = reader.positive(load_cfg["request_timeout"],
                                                "load.request_timeout")
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
