"""The reference's PolicyBundle YAML (`--policy-config`, cluster.md §3.5), read as strictly
as the reference reads it.

The reference decodes the file with Go's yaml.v3 into a struct with KnownFields, then
validates it (LoadPolicyBundle + Validate); a file it rejects must be rejected here too, and
one it accepts must mean the same. So the YAML is read node by node, resolving scalars as
yaml.v3 does rather than as PyYAML's YAML 1.1 would, and every error names the file and the
key. How the bundle combines with the policy flags is `blis_simpy.compat.policy_config`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from blis_simpy.compat.flags import go_int
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.files import read_text
from blis_simpy.core.schema import join
from blis_simpy.core.yamlio import first_node

# The reference's policy names per axis (cluster.md §3.5), sorted as its messages list them;
# "" is also accepted and means the flag default.
# The head's own names (tier-shed, gaie-legacy, its scorers) are accepted too; a scenario
# using one runs natively (compat/head.py).
POLICY_NAMES = {
    "admission": ("always-admit", "gaie-legacy", "reject-all", "tier-shed", "token-bucket"),
    "routing": ("always-busiest", "least-loaded", "prefix-affinity", "round-robin", "weighted"),
    "priority": ("constant", "inverted-slo", "slo-based"),
    "scheduler": ("fcfs", "priority-fcfs", "reverse-priority", "sjf"),
}
SCORER_NAMES = ("active-requests", "kv-utilization", "load-aware", "load-balance",
                "lora-affinity", "no-hit-lru", "precise-prefix-cache", "prefix-affinity",
                "queue-depth", "running-requests", "vllm-dp")

# The policy flags a bundle can stand in for: flag -> its key in the PolicyBundle YAML.
BUNDLE_KEYS = {
    "admission-policy": "admission.policy",
    "token-bucket-capacity": "admission.token_bucket_capacity",
    "token-bucket-refill-rate": "admission.token_bucket_refill_rate",
    "routing-policy": "routing.policy",
    "priority-policy": "priority.policy",
    "scheduler": "scheduler",
}
# Each policy axis and its flag, in the order the reference checks them.
AXIS_FLAGS = {"admission": "admission-policy", "routing": "routing-policy",
              "priority": "priority-policy", "scheduler": "scheduler"}
# The later reference's autoscaling sections (cluster.md §8.1), named when refused.
AUTOSCALER_KEYS = {
    "autoscaler": "the later reference's autoscaler settings",
    "node_pools": "the later reference's node pools (GPU nodes, bounds, provisioning delay, "
                  "price)",
    "instance_lifecycle": "the later reference's instance lifecycle (loading delay, warm "
                          "start)",
}


@dataclass(slots=True)
class Bundle:
    """A validated PolicyBundle: the keys it sets (unset keys are absent) and its scorers."""
    label: str  # how messages name the file
    values: dict[str, Any]
    scorers: dict[str, float]

    def where(self, key: str) -> str:
        return f"{self.label}: {key}"


def check_policy_name(axis: str, name: str, where: str) -> None:
    """`name` must be one of the reference's policies for `axis`; "" means the flag default.
    The same check, with the same message, for a flag and for a bundle key."""
    if name != "" and name not in POLICY_NAMES[axis]:
        what = "scheduler" if axis == "scheduler" else f"{axis} policy"
        raise ScenarioError(where, f"unknown {what} {name!r}", ", ".join(POLICY_NAMES[axis]))


def check_scorer_name(name: str, seen: Collection[str], where: str) -> None:
    """A scorer the reference knows, not named before in the same list."""
    if name not in SCORER_NAMES:
        raise ScenarioError(where, f"unknown scorer {name!r}", ", ".join(SCORER_NAMES))
    if name in seen:
        raise ScenarioError(where, f"duplicate scorer {name!r}; each scorer may appear "
                            "at most once")


# ---------------------------------------------------------------- reading the YAML

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


def node_kind(node: yaml.Node | None) -> str:
    """What a node is, for messages (callers have already ruled out a missing node)."""
    if node is None:
        return "nothing"
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

    def where(self, key: str) -> str:
        return f"{self.label}: {key}" if key else self.label

    def error(self, key: str, problem: str, valid: str | None = None) -> ScenarioError:
        return ScenarioError(self.where(key), problem, valid)

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
            if not key and name in AUTOSCALER_KEYS:
                raise self.error(path, f"(line {line(key_node)}) {AUTOSCALER_KEYS[name]}: "
                                 "not converted; write a `deployment` section (replica pools "
                                 "with prices, autoscaler with actuation)", ", ".join(fields))
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
            check_policy_name(axis, values[key], self.where(key))
        for key in ("admission.token_bucket_capacity", "admission.token_bucket_refill_rate"):
            value = values[key]
            if value is not None and not math.isfinite(value):
                raise self.error(key, f"must be a finite number, got {value}")
            if value is not None and value < 0:
                raise self.error(key, f"must be non-negative, got {value}")
        seen: set[str] = set()
        for i, (name, weight) in enumerate(scorers):
            check_scorer_name(name, seen, self.where(f"routing.scorers[{i}].name"))
            seen.add(name)
            if not (math.isfinite(weight) and weight > 0):
                raise self.error(f"routing.scorers[{i}].weight", f"scorer {name!r}: weight "
                                 f"must be a finite positive number, got {weight}")


def load_bundle(path: Path, label: str | None = None) -> Bundle:
    """Read and validate a PolicyBundle YAML as the reference's LoadPolicyBundle + Validate:
    only the first YAML document is read, and a file without one is an error (EOF)."""
    label = label or str(path)
    text = read_text(path, label, "a policy bundle YAML file")
    root = first_node(text, label)
    if root is None:
        raise ScenarioError(label, "has no YAML document (the reference fails with EOF)",
                            "a mapping with admission, routing, priority and/or scheduler")
    return BundleReader(label).read(root)
