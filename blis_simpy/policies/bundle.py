"""A policy bundle: one candidate of a policy search, every axis in one file (seed PR 8), with
where it came from (id, generation, parent id, mutations).

Precedence is scenario < bundle < `--set`. An axis the bundle names a `type` for replaces the
scenario's axis whole (the old template's parameters would not fit the new one); an axis given
only `params` changes those parameters of the scenario's template and keeps the rest.

Two other spellings are accepted, because search frameworks produce them:
- the flat candidate form of seed F.4, `{"routing.weights.prefix-affinity": 3.0}`: one dotted
  key per value, `<axis>.type`, `<axis>.params.<name>`, or `<axis>.<name>` for a parameter;
- the parameter names of seed F.1 where ours differ (`bucket_size`, `cache_affinity_weight`,
  `weighted-scoring`, ...), translated by `F1_PARAMS` and `F1_TYPES`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blis_simpy.config.scenario import PoliciesConfig, PolicyConfig
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.files import read_text
from blis_simpy.core.schema import describe, join, load, spec
from blis_simpy.core.yamlio import load_yaml
from blis_simpy.policies.admission import ADMISSION
from blis_simpy.policies.autoscale import AUTOSCALE
from blis_simpy.policies.priority import PRIORITY
from blis_simpy.policies.registry import Registry
from blis_simpy.policies.routing import ROUTING
from blis_simpy.policies.scheduler import SCHEDULER

AXES = tuple(f.name for f in dataclasses.fields(PoliciesConfig))  # the gateway's and engines'
# A bundle also carries the autoscaler's policy, which lives in the deployment section.
BUNDLE_AXES = (*AXES, "autoscale")
PLACES = {"autoscale": "deployment.autoscaler.policy"}
REGISTRIES: dict[str, Registry[Any]] = {"admission": ADMISSION, "priority": PRIORITY,
                                        "routing": ROUTING, "scheduler": SCHEDULER,
                                        "autoscale": AUTOSCALE}
META_KEYS = ("id", "generation", "parent_id", "mutations")

# Seed F.1 spellings -> ours: template names, and parameter names (a dotted params path).
F1_TYPES = {"routing": {"weighted-scoring": "weighted"}}
F1_PARAMS = {
    "admission": {"bucket_size": "capacity", "refill_rate": "refill_per_s"},
    "priority": {"realtime_score": "class_scores.realtime",
                 "batch_score": "class_scores.batch"},
    "routing": {"cache_affinity_weight": "scorers.prefix-affinity",
                "load_balance_weight": "scorers.load-balance",
                "queue_depth_weight": "scorers.queue-depth"},
    "scheduler": {"preemption_policy": "preemption"},
}
# The F.4 form names scorer weights `routing.weights.<scorer>`.
PREFIX_ALIASES = {"routing": {"weights": "scorers"}}
# F.1 names with no counterpart here, and what to use instead.
F1_UNSUPPORTED = {
    "routing": {"prefix_match_bonus": "weight the prefix-affinity scorer instead "
                "(routing.weights.prefix-affinity)"},
    "scheduler": {"respect_priority": "choose priority-fcfs (or fcfs) as the type",
                  "preemption_enabled": "preemption always happens under KV pressure; "
                  "choose its victim with preemption: lifo | lowest-priority"},
}


def place(axis: str) -> str:
    """Where a bundle axis lands in the scenario."""
    return PLACES.get(axis, f"policies.{axis}")


@dataclass(frozen=True, slots=True)
class BundleMeta:
    """Where a candidate came from, carried into its evaluation for the search's records."""

    id: str | None = spec(None, help="candidate id")
    generation: int | None = spec(None, help="search generation that produced it", ge=0)
    parent_id: str | None = spec(None, help="id of the candidate it was mutated from")
    mutations: list[str] = spec(factory=list, help="what was changed from the parent")


@dataclass(frozen=True)
class PolicyBundle:
    """A validated bundle: its metadata and, per axis it sets, the type and/or parameters."""

    meta: BundleMeta
    axes: dict[str, dict[str, Any]]  # axis -> {"type": ..., "params": {...}} (either optional)

    @classmethod
    def from_yaml(cls, path: str | Path) -> PolicyBundle:
        path = Path(path)
        text = read_text(path, "--policy-config", "a policy bundle YAML file")
        try:
            return cls.from_dict(load_yaml(text, ""))
        except ScenarioError as exc:
            raise exc.in_file(path) from None

    @classmethod
    def from_dict(cls, data: Any) -> PolicyBundle:
        """The nested form (`routing: {type: ..., params: {...}}`) or the flat candidate form
        (`{"routing.type": ..., "routing.weights.prefix-affinity": 3.0}`); both may mix."""
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise ScenarioError("", f"a policy bundle is a mapping, got {describe(data)}",
                                "keys " + ", ".join((*META_KEYS, *BUNDLE_AXES)))
        meta: dict[str, Any] = {}
        axes: dict[str, dict[str, Any]] = {}
        for key, value in data.items():
            if not isinstance(key, str):
                raise ScenarioError(str(key), "bundle keys are strings")
            if key in META_KEYS:
                meta[key] = value
            else:
                add_entry(axes, key, value)
        bundle = cls(load(BundleMeta, meta, ""), axes)
        bundle.validate()
        return bundle

    def validate(self) -> None:
        """Every axis that names a type is built once now, so a bad parameter fails here,
        named by its place in the bundle, not in the middle of a search."""
        for axis, entry in self.axes.items():
            registry = REGISTRIES.get(axis)  # an axis without one is checked when built
            if "type" in entry and registry is not None:
                registry.create(load(PolicyConfig, entry, axis), axis)

    def overrides(self) -> dict[str, Any]:
        """Dotted scenario paths -> values, applied to the scenario before `--set`."""
        out: dict[str, Any] = {}
        for axis, entry in self.axes.items():
            where = place(axis)
            if "type" in entry:
                out[where] = {"type": entry["type"], "params": entry.get("params", {})}
            else:
                for name, value in flatten(entry.get("params", {})):
                    out[f"{where}.params.{name}"] = value
        return out

    def blame(self, exc: ScenarioError, file: object) -> ScenarioError:
        """`exc` from applying `overrides()`, said against the bundle when the bundle caused
        it: an axis given params only, on a scenario that names no policy for it."""
        for axis, entry in self.axes.items():
            if "type" not in entry and exc.path == f"{place(axis)}.type":
                return ScenarioError(f"{axis}.type", f"is required: this bundle sets only "
                                     f"{axis} params and the scenario names no {axis} policy",
                                     exc.valid, str(file))
        return exc

    def to_dict(self) -> dict[str, Any]:
        """The nested form with metadata, as the K.4 export's deployable config."""
        meta = {k: v for k, v in dataclasses.asdict(self.meta).items() if v not in (None, [])}
        return {**meta, **{axis: self.axes[axis] for axis in BUNDLE_AXES if axis in self.axes}}


def add_entry(axes: dict[str, dict[str, Any]], key: str, value: Any) -> None:
    """One top-level key of a bundle: an axis section, or a flat `axis.name` key."""
    axis, _, rest = key.partition(".")
    if axis not in BUNDLE_AXES:
        raise ScenarioError(key, "unknown bundle key", ", ".join((*META_KEYS, *BUNDLE_AXES)) +
                            ", or a flat key such as routing.weights.prefix-affinity")
    entry = axes.setdefault(axis, {})
    if not rest:
        if not isinstance(value, Mapping):
            raise ScenarioError(axis, f"expected a mapping, got {describe(value)}",
                                "{type: ..., params: {...}}")
        for name, item in value.items():
            add_entry(axes, f"{axis}.{name}", item)
    elif rest == "type":
        if not isinstance(value, str):
            raise ScenarioError(key, f"expected a template name, got {describe(value)}")
        entry["type"] = F1_TYPES.get(axis, {}).get(value, value)
    elif rest == "params":
        if not isinstance(value, Mapping):
            raise ScenarioError(key, f"expected a mapping, got {describe(value)}")
        for name, item in value.items():
            add_param(entry, axis, str(name), item)
    else:
        add_param(entry, axis, rest.removeprefix("params."), value)


def add_param(entry: dict[str, Any], axis: str, name: str, value: Any) -> None:
    """Set params path `name` (dotted), translating seed F.1/F.4 spellings."""
    hint = F1_UNSUPPORTED.get(axis, {}).get(name)
    if hint is not None:
        raise ScenarioError(f"{axis}.{name}", "a seed F.1 parameter with no counterpart "
                            "here", hint)
    name = F1_PARAMS.get(axis, {}).get(name, name)
    head, dot, tail = name.partition(".")
    head = PREFIX_ALIASES.get(axis, {}).get(head, head)
    name = head + dot + tail
    node = entry.setdefault("params", {})
    parts = name.split(".")
    for depth, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ScenarioError(join(f"{axis}.params", ".".join(parts[:depth + 1])),
                                f"is a value, cannot set {name} inside it")
        node = child
    node[parts[-1]] = dict(value) if isinstance(value, Mapping) else value


def flatten(params: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """Nested params -> (dotted name, leaf value) pairs."""
    out: list[tuple[str, Any]] = []
    for name, value in params.items():
        path = f"{prefix}{name}"
        if isinstance(value, Mapping) and value:
            out.extend(flatten(value, path + "."))
        else:
            out.append((path, value))
    return out
