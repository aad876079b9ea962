"""A policy bundle: one candidate of a policy search, every axis in one file (seed PR 8), with
where it came from (id, generation, parent id, mutations).

Precedence is scenario < bundle < `--set`. An axis the bundle names a `type` for replaces the
scenario's axis whole (the old template's parameters would not fit the new one); an axis given
only `params` changes those parameters of the scenario's template and keeps the rest.

Axes: the gateway's and engines' (`admission`, `priority`, `routing`, `scheduler`), the
autoscaler's policy (`autoscale`, for a scenario with `deployment.autoscaler`), the P/D
decider (`pd`: `always | never | prefix-threshold`, for every disaggregated config) and the
KV tiers' offload (`kv_tiers`: `mirror | threshold | lazy`, params `threshold` and `eviction`, for a
scenario with `engine.kv_tiers`). Where an axis lands depends on the scenario, so
`overrides(scenario)` takes it.

Two other spellings are accepted, because search frameworks produce them:
- the flat candidate form of seed F.4, `{"routing.weights.prefix-affinity": 3.0}`: one dotted
  key per value, `<axis>.type`, `<axis>.params.<name>`, or `<axis>.<name>` for a parameter;
- the seed F.1 bundle as written: its names where ours differ (`bucket_size`,
  `cache_affinity_weight`, `weighted-scoring`, `scale_up_threshold`, ...), translated by
  `F1_PARAMS` and `F1_TYPES`; an F.1 parameter belongs to one template (`F1_TEMPLATES`), so a
  flat candidate giving it without a type means that template; and its two statements about
  the scheduler (`respect_priority`, `preemption_enabled`), accepted when they say what the
  template does and refused, naming the template that does, when they do not.

A bundle is a candidate, often written by a model: its types are built-in templates, never a
`module:Class` (that would import code into the evaluator, outside the sandbox code candidates
run in), and its `kv_tiers` params are the offload policy's, not the tiers' sizes.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from blis_simpy.config.pd import Decider
from blis_simpy.config.scenario import PoliciesConfig, PolicyConfig, Scenario
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
# A bundle also carries the autoscaler's policy (in the deployment section), the P/D decider
# (in each disaggregated config) and the KV tiers' offload policy (in engine.kv_tiers).
BUNDLE_AXES = (*AXES, "autoscale", "pd", "kv_tiers")
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
    "autoscale": {"scale_up_threshold": "up", "scale_down_threshold": "down",
                  "cooldown_seconds": "cooldown_s"},
}
# The template each F.1 parameter (and the F.4 `routing.weights.<scorer>`) belongs to.
F1_TEMPLATES = {
    "admission": dict.fromkeys(("bucket_size", "refill_rate"), "token-bucket"),
    "priority": dict.fromkeys(("realtime_score", "batch_score"), "slo-based"),
    "routing": dict.fromkeys(("cache_affinity_weight", "load_balance_weight",
                              "queue_depth_weight", "prefix_match_bonus", "weights"),
                             "weighted"),
    "autoscale": dict.fromkeys(("scale_up_threshold", "scale_down_threshold",
                                "cooldown_seconds"), "threshold"),
}
# The F.4 form names scorer weights `routing.weights.<scorer>`.
PREFIX_ALIASES = {"routing": {"weights": "scorers"}}
# F.1's statements about the scheduler: value -> the template that does it (None: every one).
F1_STATEMENTS: dict[str, dict[bool, str | None]] = {
    "respect_priority": {True: "priority-fcfs", False: "fcfs"},
    "preemption_enabled": {True: None},
}
WHY_NOT = {"preemption_enabled": "a vLLM-style engine preempts whenever the KV cache is full; "
           "choose the victim with preemption_policy: lifo | lowest-priority"}
SANDBOXED = ("a built-in template; code candidates go through the sandboxed code path: a "
             "component named after the axis, blis_simpy.search.code")


@dataclass(frozen=True, slots=True)
class OffloadParams:
    """The `kv_tiers` axis's parameters (its type is engine.kv_tiers.offload)."""

    threshold: float = spec(0.9, help="threshold offload: GPU use at which evicted blocks are "
                            "kept", gt=0, le=1)
    eviction: Literal["lru", "fifo", "lfu", "priority"] = spec(
        "lru", help="which block a full lower tier drops")


OFFLOAD_TYPES = ("mirror", "threshold", "lazy")
PD_TYPES = ("always", "never", "prefix-threshold")


def place(axis: str) -> str:
    """Where a bundle axis lands in the scenario (the registry axes and autoscale)."""
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
    # axis -> the template its F.1 parameters belong to, where the bundle names no type
    implied: dict[str, str] = field(default_factory=dict)

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
        parser = Parser()
        for key, value in data.items():
            if not isinstance(key, str):
                raise ScenarioError(str(key), "bundle keys are strings")
            if key in META_KEYS:
                meta[key] = value
            else:
                parser.entry(key, value)
        bundle = cls(load(BundleMeta, meta, ""), parser.axes, parser.finish())
        bundle.validate()
        return bundle

    def validate(self) -> None:
        """Every axis whose template is known (named, or implied by its F.1 parameters) is
        built once now, so a bad parameter fails here, named by its place in the bundle, not
        in the middle of a search; first, before anything is built, no type may be a
        `module:Class` (module docstring). The kv_tiers axis's params are the offload
        policy's only (a candidate chooses policies, not the tiers' sizes)."""
        for axis, entry in self.axes.items():
            refuse_import(axis, entry.get("type"))
        for axis, template in self.implied.items():
            refuse_import(axis, template)
        for axis, entry in self.axes.items():
            if axis == "kv_tiers" and "type" not in entry:
                load(OffloadParams, entry.get("params", {}), f"{axis}.params")
            kind = entry.get("type", self.implied.get(axis))
            if kind is None:
                continue
            typed = {"type": kind, "params": translated(axis, kind, entry.get("params", {}))}
            registry = REGISTRIES.get(axis)
            if registry is not None:
                registry.create(load(PolicyConfig, typed, axis), axis)
            elif axis == "pd":
                load(Decider, {"type": kind, **typed["params"]}, axis)
            elif axis == "kv_tiers":
                if kind not in OFFLOAD_TYPES:
                    raise ScenarioError(f"{axis}.type", f"unknown offload policy {kind!r}",
                                        ", ".join(OFFLOAD_TYPES))
                load(OffloadParams, typed["params"], f"{axis}.params")

    def overrides(self, scenario: Scenario | None = None) -> dict[str, Any]:
        """Dotted scenario paths -> values, applied to `scenario` before `--set`. Without the
        scenario, only the registry axes (with their F.1 template if implied)."""
        out: dict[str, Any] = {}
        for axis, entry in self.axes.items():
            kind = entry.get("type")
            implied = self.implied.get(axis)
            params = entry.get("params", {})
            if axis in ("pd", "kv_tiers"):
                out.update(self.placed(axis, kind, params, scenario))
                continue
            if axis == "autoscale" and scenario is not None and (
                    scenario.deployment is None or scenario.deployment.autoscaler is None):
                raise ScenarioError("autoscale", "this scenario has no autoscaler for the "
                                    "bundle's autoscale policy", "a scenario with a "
                                    "deployment.autoscaler section (e.g. search-autoscale)")
            if kind is None and implied is not None:
                current = None if scenario is None else current_type(scenario, axis)
                if current == implied:  # the scenario's own template: merge, translated
                    params = translated(axis, implied, params)
                elif not (params and set(params) <= takes(axis, current or "")):
                    kind = implied  # the template its F.1 settings belong to
                    params = translated(axis, kind, params)
            where = place(axis)
            if kind is not None:
                out[where] = {"type": kind, "params": params}
            else:
                for name, value in flatten(params):
                    out[f"{where}.params.{name}"] = value
        return out

    @staticmethod
    def placed(axis: str, kind: str | None, params: Mapping[str, Any],
               scenario: Scenario | None) -> dict[str, Any]:
        """The `pd` axis in every disaggregated config, or the `kv_tiers` axis in the
        engine's tiers."""
        if axis == "pd":
            paths = [] if scenario is None or scenario.deployment is None else [
                f"deployment.models[{m}].configs[{c}].pd.decider"
                for m, model in enumerate(scenario.deployment.models)
                for c, config in enumerate(model.configs) if config.pd is not None]
            if not paths:
                raise ScenarioError("pd", "this scenario has no disaggregated config for the "
                                    "bundle's P/D decider", "a scenario with an "
                                    "architecture: disaggregated_pd config (e.g. search-pd)")
            decider = {**({} if kind is None else {"type": kind}), **params}
            return {f"{p}.{k}": v for p in paths for k, v in decider.items()} if kind is None \
                else dict.fromkeys(paths, decider)
        if scenario is None or not scenario.engine.kv_tiers.enabled:
            raise ScenarioError("kv_tiers", "this scenario has no KV tiers for the bundle's "
                                "offload policy", "a scenario with engine.kv_tiers.cpu_blocks "
                                "> 0 (e.g. search-kv-tiers)")
        values = {**(dataclasses.asdict(OffloadParams()) if kind is not None else {}),
                  **({} if kind is None else {"offload": kind}), **params}
        return {f"engine.kv_tiers.{k}": v for k, v in values.items()}

    def blame(self, exc: ScenarioError, file: object) -> ScenarioError:
        """`exc` from applying `overrides()`, said against the bundle when the bundle caused
        it: an axis given params only, on a scenario that names no policy for it, or with a
        parameter the scenario's template does not take (naming the templates that do)."""
        for axis, entry in self.axes.items():
            if "type" in entry:
                continue
            if exc.path == f"{place(axis)}.type":
                return ScenarioError(f"{axis}.type", f"is required: this bundle sets only "
                                     f"{axis} params and the scenario names no {axis} policy",
                                     exc.valid, str(file))
            prefix = f"{place(axis)}.params."
            registry = REGISTRIES.get(axis)
            if registry is not None and exc.path.startswith(prefix) and \
                    exc.problem == "unknown key":
                name = exc.path.removeprefix(prefix).split(".")[0]
                takers = [t for t in registry.names if name in param_names(registry, t)]
                if takers:
                    valid = f"name the {axis} type that does: {', '.join(takers)}"
                else:  # a misspelt key (`routing.typo`): the nearest one any template takes
                    keys = {"type", *(k for t in registry.names for k in param_names(registry, t))}
                    near = difflib.get_close_matches(name, sorted(keys), n=1)
                    valid = f"no {axis} type takes it" + (f"; did you mean {axis}.{near[0]}?"
                                                          if near else "")
                return ScenarioError(f"{axis}.{name}", "the scenario's template takes no such "
                                     "parameter", valid, str(file))
        return exc

    def to_dict(self) -> dict[str, Any]:
        """The nested form with metadata, as the K.4 export's deployable config."""
        meta = {k: v for k, v in dataclasses.asdict(self.meta).items() if v not in (None, [])}
        return {**meta, **{axis: self.axes[axis] for axis in BUNDLE_AXES if axis in self.axes}}


def current_type(scenario: Scenario, axis: str) -> str | None:
    """The template the scenario names for a registry axis (or the autoscaler's policy)."""
    if axis == "autoscale":
        scaler = None if scenario.deployment is None else scenario.deployment.autoscaler
        return None if scaler is None else scaler.policy.type
    return str(getattr(scenario.policies, axis).type)


def param_names(registry: Registry[Any], template: str) -> set[str]:
    params = getattr(registry.templates.get(template), "Params", None)
    return {f.name for f in dataclasses.fields(params)} if params is not None else set()


class Parser:
    """Reads a bundle's keys into axes, noting the templates F.1 parameters imply and F.1's
    scheduler statements (checked once every key is read: the type may come after them)."""

    def __init__(self) -> None:
        self.axes: dict[str, dict[str, Any]] = {}
        self.implied: dict[str, str] = {}
        self.statements: dict[str, dict[str, bool]] = {}

    def entry(self, key: str, value: Any) -> None:
        """One top-level key of a bundle: an axis section, or a flat `axis.name` key."""
        axis, _, rest = key.partition(".")
        if axis not in BUNDLE_AXES:
            raise ScenarioError(key, "unknown bundle key", ", ".join(
                (*META_KEYS, *BUNDLE_AXES)) + ", or a flat key such as "
                "routing.weights.prefix-affinity")
        entry = self.axes.setdefault(axis, {})
        if not rest:
            if not isinstance(value, Mapping):
                raise ScenarioError(axis, f"expected a mapping, got {describe(value)}",
                                    "{type: ..., params: {...}}")
            for name, item in value.items():
                self.entry(f"{axis}.{name}", item)
        elif rest == "type":
            if not isinstance(value, str):
                raise ScenarioError(key, f"expected a template name, got {describe(value)}")
            refuse_import(axis, value)
            entry["type"] = F1_TYPES.get(axis, {}).get(value, value)
        elif rest == "params":
            if not isinstance(value, Mapping):
                raise ScenarioError(key, f"expected a mapping, got {describe(value)}")
            for name, item in value.items():
                self.param(entry, axis, str(name), item)
        else:
            self.param(entry, axis, rest.removeprefix("params."), value)

    def imply(self, axis: str, template: str, name: str) -> None:
        if self.implied.get(axis, template) != template:
            raise ScenarioError(f"{axis}.{name}", f"means {template}, but the bundle's other "
                                f"{axis} settings mean {self.implied[axis]}",
                                f"{axis}.type to choose one template")
        self.implied[axis] = template

    def param(self, entry: dict[str, Any], axis: str, name: str, value: Any) -> None:
        """Set params path `name` (dotted), translating seed F.1/F.4 spellings."""
        if name in F1_STATEMENTS:
            if axis != "scheduler" or not isinstance(value, bool) or \
                    value not in F1_STATEMENTS[name]:
                valid = WHY_NOT.get(name, "true or false") if axis == "scheduler" \
                    else "a scheduler setting"
                raise ScenarioError(f"{axis}.{name}", f"{describe(value)} has no meaning here",
                                    valid)
            self.statements.setdefault(axis, {})[name] = value
            does = F1_STATEMENTS[name][value]
            if does is not None:
                self.imply(axis, does, name)
            return
        template = F1_TEMPLATES.get(axis, {}).get(name.split(".")[0])
        if template is not None:
            self.imply(axis, template, name)
        head, dot, tail = name.partition(".")
        put(entry.setdefault("params", {}), PREFIX_ALIASES.get(axis, {}).get(head, head)
            + dot + tail, value, axis)

    def finish(self) -> dict[str, str]:
        """The implied templates of the axes that name no type; an axis that names one gets
        its F.1 names translated, and must agree with what its F.1 statements mean."""
        for axis, entry in self.axes.items():
            kind = entry.get("type")
            if kind is None:
                continue
            if "params" in entry:
                entry["params"] = translated(axis, kind, entry["params"])
            implied = self.implied.pop(axis, None)
            for name, value in self.statements.get(axis, {}).items():
                if F1_STATEMENTS[name][value] not in (None, kind):
                    raise ScenarioError(f"{axis}.{name}", f"{str(value).lower()} contradicts "
                                        f"the type {kind}", f"type {implied} does that; or "
                                        f"drop {name}")
        return self.implied


def refuse_import(axis: str, kind: object) -> None:
    """Refuse a candidate's `module:Class` type, before anything imports it."""
    if isinstance(kind, str) and ":" in kind:
        raise ScenarioError(f"{axis}.type", f"{kind!r} is a module:Class policy, which a "
                            "candidate may not import", SANDBOXED)


def put(node: dict[str, Any], name: str, value: Any, axis: str) -> None:
    """Set the dotted params path `name` in `node`."""
    parts = name.split(".")
    for depth, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ScenarioError(join(f"{axis}.params", ".".join(parts[:depth + 1])),
                                f"is a value, cannot set {name} inside it")
        node = child
    node[parts[-1]] = dict(value) if isinstance(value, Mapping) else value


def takes(axis: str, template: str) -> set[str]:
    """The parameter names of a registry axis's template (none for another axis or a
    `module:Class`)."""
    registry = REGISTRIES.get(axis)
    return set() if registry is None else param_names(registry, template)


def translated(axis: str, template: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """`params` for `template` with the seed F.1 names it does not take as they are renamed
    to ours (kv-demand takes its own `scale_up_threshold`; threshold calls it `up`)."""
    own = takes(axis, template)
    out: dict[str, Any] = {}
    for name, value in params.items():
        ours = F1_PARAMS.get(axis, {}).get(name)
        put(out, name if ours is None or name in own else ours, value, axis)
    return out


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
