"""The `policies:` section of a converted scenario, from the reference's policy flags and its
`--policy-config` PolicyBundle (cluster.md §3).

The reference lets a flag given on the command line beat the bundle, and the bundle beat the
flag's default; it fills in default scorers for a weighted router and checks values in a fixed
order. Writing the outcome out as an explicit `policies:` section means blis-simpy's policies
never need to know where a value came from; only the errors do, and they name it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from blis_simpy.compat.bundle import (
    AXIS_FLAGS,
    BUNDLE_KEYS,
    Bundle,
    check_policy_name,
    check_scorer_name,
    load_bundle,
)
from blis_simpy.compat.flags import FLAGS, Args, default_values, go_float
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.schema import join
from blis_simpy.core.yamlio import dump_yaml

# What a weighted router uses when neither --routing-scorers nor the bundle names scorers.
DEFAULT_SCORERS = {"prefix-affinity": 3.0, "queue-depth": 2.0, "kv-utilization": 2.0}


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
        check_scorer_name(name, scorers, where)
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


def setting(args: Args, bundle: Bundle | None, flag: str) -> tuple[Any, str]:
    """A policy value and where it came from: an explicitly given flag beats the bundle,
    which beats the flag's default (the reference's Changed() precedence)."""
    if flag not in args.given and bundle is not None:
        value = bundle.values.get(BUNDLE_KEYS[flag])
        if value is not None and value != "":
            return value, bundle.where(BUNDLE_KEYS[flag])
    return args[flag], f"--{flag}"


def policies_section(args: Args, bundle: Bundle | None) -> dict[str, Any]:
    """The four policies after precedence, with the reference's checks in its order: the
    token-bucket parameters (only for token-bucket admission), then the policy names."""
    chosen = {axis: setting(args, bundle, flag) for axis, flag in AXIS_FLAGS.items()}
    bucket = token_bucket(args, bundle) if chosen["admission"][0] == "token-bucket" else {}
    for axis, (name, where) in chosen.items():
        check_policy_name(axis, name, where)
    section: dict[str, Any] = {}
    for axis in ("admission", "priority", "routing", "scheduler"):  # schema order
        name = chosen[axis][0] or FLAGS[AXIS_FLAGS[axis]].default
        section[axis] = {"type": name}
    if bucket:
        section["admission"]["params"] = bucket
    if section["routing"]["type"] == "weighted":
        section["routing"]["params"] = {"scorers": weighted_scorers(args, bundle)}
    # Otherwise the reference ignores --routing-scorers (with a warning) without parsing it.
    return section


def token_bucket(args: Args, bundle: Bundle | None) -> dict[str, Any]:
    """Token-bucket parameters after precedence; each must be a finite value > 0."""
    bucket: dict[str, Any] = {}
    for flag, param in (("token-bucket-capacity", "capacity"),
                        ("token-bucket-refill-rate", "refill_per_s")):
        value, where = setting(args, bundle, flag)
        if not (math.isfinite(value) and value > 0):
            raise ScenarioError(where, f"must be a finite value > 0 for token-bucket "
                                f"admission, got {value}")
        bucket[param] = float(value)
    bucket["cost"] = "tokens"  # the reference charges a request its input tokens
    return bucket


def weighted_scorers(args: Args, bundle: Bundle | None) -> dict[str, float]:
    """A weighted router's scorers: --routing-scorers if not empty, else the bundle's, else
    the reference's default profile."""
    if args["routing-scorers"] != "":
        return parse_scorers(args["routing-scorers"])
    if bundle is not None and bundle.scorers:
        return dict(bundle.scorers)
    return dict(DEFAULT_SCORERS)


def command_policies(args: Args) -> dict[str, Any]:
    """The `policies:` section of a command line: its policy flags over the bundle that
    --policy-config names, if any (read even when every flag overrides it, as the reference
    does)."""
    bundle = None
    if args["policy-config"]:
        bundle = load_bundle(args.path("policy-config"),
                             f"--policy-config {args['policy-config']}")
    return policies_section(args, bundle)


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
    return header + dump_yaml({"policies": policies})
