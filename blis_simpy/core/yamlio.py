"""Reading YAML that a user (or a search loop) wrote, with limits.

YAML aliases let a few hundred bytes stand for billions of values (the "billion laughs"
document): PyYAML shares the aliased objects, so parsing is quick, but anything that walks the
result afterwards (validation, hashing, writing the resolved scenario) expands them. The
expanded size is computed on the parsed node graph, before any Python object is built, and a
document over the limits is refused with its size. Scenario files are a few kilobytes; the
limits are far above any real one.
"""

from __future__ import annotations

from typing import Any

import yaml

from blis_simpy.core.errors import ScenarioError

MAX_BYTES = 16 * 1024 * 1024  # characters in one document
MAX_VALUES = 1_000_000  # values in the document with every alias expanded


def load_yaml(text: str, where: str) -> Any:
    """Parse one YAML document safely; `where` names the file or option in errors."""
    check_length(text, where)
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        check_expansion(node, where)
        check_unique_keys(node, where, set())
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise yaml_error(exc, where) from None
    except RecursionError:
        raise ScenarioError(where, "the YAML document is nested too deeply") from None
    finally:
        loader.dispose()


def first_node(text: str, where: str) -> yaml.Node | None:
    """The node tree of the first YAML document (later ones are not read), under the same
    limits as `load_yaml`; for readers that walk nodes themselves."""
    check_length(text, where)
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_node() if loader.check_node() else None
        if node is not None:
            check_expansion(node, where)
        return node
    except yaml.YAMLError as exc:
        raise yaml_error(exc, where) from None
    except RecursionError:
        raise ScenarioError(where, "the YAML document is nested too deeply") from None
    finally:
        loader.dispose()


def check_length(text: str, where: str) -> None:
    if len(text) > MAX_BYTES:
        raise ScenarioError(where, f"the YAML document has {len(text):,} characters; the "
                            f"limit is {MAX_BYTES:,}")


def check_expansion(node: yaml.Node, where: str) -> None:
    values = expanded_size(node, {}, where)
    if values > MAX_VALUES:
        raise ScenarioError(where, f"the YAML document expands to {values:,} values through "
                            f"its aliases (&anchor / *alias); the limit is {MAX_VALUES:,}",
                            "write the values out, or use fewer nested aliases")


def yaml_error(exc: yaml.YAMLError, where: str) -> ScenarioError:
    mark = getattr(exc, "problem_mark", None)
    at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = getattr(exc, "problem", None) or str(exc)
    return ScenarioError(where, f"not valid YAML{at}: {problem}")


def expanded_size(node: yaml.Node, seen: dict[int, int], where: str = "") -> int:
    """Values under `node` counting every alias as a copy; shared nodes are sized once."""
    key = id(node)
    if key in seen:
        if seen[key] < 0:
            raise ScenarioError(where, "a YAML alias refers to a value that contains it")
        return seen[key]
    seen[key] = -1
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(expanded_size(child, seen, where) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        size += sum(expanded_size(k, seen, where) + expanded_size(v, seen, where)
                    for k, v in node.value)
    seen[key] = size
    return size


def check_unique_keys(node: yaml.Node, where: str, seen: set[int]) -> None:
    """No key written twice in one mapping: YAML loaders keep the last silently, which would
    hide the first setting. (Readers of `first_node` report repeats with their own paths.)"""
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        for child in node.value:
            check_unique_keys(child, where, seen)
    elif isinstance(node, yaml.MappingNode):
        lines: dict[str, int] = {}
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                line = key.start_mark.line + 1
                if key.value in lines:
                    raise ScenarioError(where, f"the key {key.value!r} appears twice in one "
                                        f"mapping (lines {lines[key.value]} and {line})")
                lines[key.value] = line
            check_unique_keys(value, where, seen)
