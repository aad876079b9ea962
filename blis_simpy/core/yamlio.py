"""Reading YAML that a user (or a search loop) wrote, with limits, as YAML 1.2 reads it.

Numbers and booleans are resolved by YAML 1.2's core schema, as every JSON parser and most YAML
libraries other than PyYAML read them: `2.5e1` and `1e-9` are numbers, `024` is 24 (not octal
20), `1:20` is text (not the sexagesimal 80), `yes`/`no`/`on`/`off` are text (a boolean field
names `true`/`false` as valid), and a date is text. PyYAML alone follows YAML 1.1, under
which those change silently; a JSON scenario reads as JSON does.

YAML aliases let a few hundred bytes stand for billions of values (the "billion laughs"
document): PyYAML shares the aliased objects, so parsing is quick, but anything that walks the
result afterwards (validation, hashing, writing the resolved scenario) expands them. The
expanded size is computed on the parsed node graph, before any Python object is built, and a
document over the limits is refused with its size. Scenario files are a few kilobytes; the
limits are far above any real one.

Every failure is a `ScenarioError` of one line: a control character (YAML allows none, not
even in a comment) names its line and column, and a value an explicit tag cannot hold
(`!!float abc`, a 5,000-digit integer) names its line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import yaml

from blis_simpy.core.errors import ScenarioError

MAX_BYTES = 16 * 1024 * 1024  # characters in one document
MAX_VALUES = 1_000_000  # values in the document with every alias expanded
MAX_DIGITS = 1000  # an integer's digits (Python refuses to convert more than 4,300)

INT = "tag:yaml.org,2002:int"
FLOAT = "tag:yaml.org,2002:float"
BOOL = "tag:yaml.org,2002:bool"
NULL = "tag:yaml.org,2002:null"

# YAML 1.2.2, 10.3.2 (the core schema): the plain scalars that are not strings.
CORE_SCHEMA: list[tuple[str, re.Pattern[str], str]] = [
    (NULL, re.compile(r"^(?:~|null|Null|NULL|)$"), "~nN"),
    (BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), "tTfF"),
    (INT, re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), "-+0123456789"),
    (FLOAT, re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                       r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"), "-+.0123456789"),
]
SURROGATE = re.compile("[\ud800-\udfff]")
MERGE = ("tag:yaml.org,2002:merge", re.compile(r"^(?:<<)$"), "<")


def core_resolvers(*extra: tuple[str, re.Pattern[str], str]
                   ) -> dict[str, list[tuple[str, re.Pattern[str]]]]:
    """PyYAML's resolver table (first character -> [(tag, pattern)]) for the core schema."""
    table: dict[str, list[tuple[str, re.Pattern[str]]]] = {}
    for tag, pattern, first in (*CORE_SCHEMA, *extra):
        for char in first or [""]:
            table.setdefault(char, []).append((tag, pattern))
    table.setdefault("", []).append((NULL, CORE_SCHEMA[0][1]))  # the empty scalar
    return table


class Loader(yaml.SafeLoader):
    """The safe loader with YAML 1.2's core schema (and the `<<` merge key, which scenario
    files use); a value that cannot be built from its text is a YAML error at its line."""

    yaml_implicit_resolvers = core_resolvers(MERGE)

    def construct_scalar(self, node: yaml.ScalarNode) -> str:  # type: ignore[override]
        """The scalar's text, with the surrogate pairs of JSON's escapes (`"\\ud83d\\ude00"`,
        what json.dumps writes for an emoji) joined into the character they stand for, as
        a JSON parser does; an unpaired one is no text at all and is refused."""
        text = super().construct_scalar(node)
        if not SURROGATE.search(text):
            return text
        try:
            return text.encode("utf-16", "surrogatepass").decode("utf-16")
        except UnicodeDecodeError:
            raise yaml.constructor.ConstructorError(
                None, None, f"{shorten(text)} holds an unpaired surrogate escape (\\ud800 to "
                "\\udfff), which is no character", node.start_mark) from None

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        text = self.construct_scalar(node)
        digits = text.lstrip("+-")
        if len(digits) > MAX_DIGITS:
            raise yaml.constructor.ConstructorError(
                None, None, f"an integer of {len(digits):,} digits", node.start_mark)
        if digits.startswith(("0o", "0x")):
            value = int(digits[2:], 8 if digits[1] == "o" else 16)
        else:
            value = int(digits, 10)  # leading zeros are decimal in YAML 1.2
        return -value if text.startswith("-") else value

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        text = self.construct_scalar(node).lower()
        if text.endswith(".inf"):
            return -math.inf if text.startswith("-") else math.inf
        if text == ".nan":
            return math.nan
        return float(text)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError):
            raise yaml.constructor.ConstructorError(
                None, None, f"{shorten(str(node.value))} is not a valid "
                f"{node.tag.replace('tag:yaml.org,2002:', '!!')}",
                node.start_mark) from None


Loader.add_constructor(INT, Loader.construct_yaml_int)
Loader.add_constructor(FLOAT, Loader.construct_yaml_float)


class Dumper(yaml.SafeDumper):
    """The safe dumper, quoting every string that YAML 1.1 or 1.2 would read as something
    else (`1e5`, `yes`), so what it writes reads back the same under either."""


CORE = core_resolvers()
Dumper.yaml_implicit_resolvers = {
    char: [*yaml.SafeDumper.yaml_implicit_resolvers.get(char, []), *CORE.get(char, [])]
    for char in sorted({*yaml.SafeDumper.yaml_implicit_resolvers, *CORE})}


def dump_yaml(data: Any) -> str:
    """`data` as block YAML in its own key order, readable back by `load_yaml` unchanged."""
    return yaml.dump(data, Dumper=Dumper, sort_keys=False)


def shorten(text: str, width: int = 40) -> str:
    return repr(text) if len(text) <= width else repr(text[: width - 3]) + "..."


def load_yaml(text: str, where: str) -> Any:
    """Parse one YAML document safely; `where` names the file or option in errors."""
    with parsing(text, where) as loader:
        node = loader.get_single_node()
        check_version(loader, where)
        if node is None:
            return None
        check_expansion(node, where)
        check_unique_keys(node, where, set())
        return loader.construct_document(node)


def first_node(text: str, where: str) -> yaml.Node | None:
    """The node tree of the first YAML document (later ones are not read), under the same
    limits as `load_yaml`; for readers that walk nodes themselves."""
    with parsing(text, where) as loader:
        node = loader.get_node() if loader.check_node() else None
        if node is not None:
            check_expansion(node, where)
        return node


def check_version(loader: Loader, where: str) -> None:
    """A `%YAML 1.1` directive asks for rules this reader does not follow (under 1.1 `yes`
    is true and `024` is 20): refused rather than read by other rules than the file asked."""
    version = loader.yaml_version
    if version is not None and tuple(version) != (1, 2):
        raise ScenarioError(where, f"%YAML {version[0]}.{version[1]}: the document asks for "
                            f"YAML {version[0]}.{version[1]} rules, and blis-simpy reads "
                            "YAML 1.2 (yes/no are text, 024 is 24)",
                            "no %YAML directive, or %YAML 1.2")


@contextmanager
def parsing(text: str, where: str) -> Iterator[Loader]:
    """A loader over `text` (checked for length first); whatever goes wrong while it is used
    becomes one ScenarioError."""
    check_length(text, where)
    try:
        loader = Loader(text)  # checks every character at once
    except yaml.reader.ReaderError as exc:
        raise unprintable(exc, text, where) from None
    try:
        yield loader
    except yaml.YAMLError as exc:
        raise yaml_error(exc, where) from None
    except RecursionError:
        raise ScenarioError(where, "the YAML document is nested too deeply") from None
    finally:
        loader.dispose()


def unprintable(exc: yaml.reader.ReaderError, text: str, where: str) -> ScenarioError:
    """A character YAML does not allow anywhere (a control character, even in a comment)."""
    before = text[: exc.position]
    line, column = before.count("\n") + 1, exc.position - before.rfind("\n")
    return ScenarioError(where, f"not valid YAML at line {line}, column {column}: control "
                         f"character U+{exc.character:04X}",
                         "text without control characters other than tab and newline")


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
