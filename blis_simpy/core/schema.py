"""Generic, strict loading of frozen dataclasses from parsed YAML.

Every config section is a frozen dataclass whose fields carry their help text and bounds in
`metadata`. One loader walks them, so every section gets the same guarantees: unknown keys,
wrong types and out-of-range values fail with the YAML path, what was wrong and what is valid.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import math
import sys
import types
import typing
from collections.abc import Iterator, Mapping
from typing import Any, Literal, get_args, get_origin

from blis_simpy.core.errors import ScenarioError, closest_first
from blis_simpy.core.units import MAX_FLOAT, MAX_INT, MIN_POSITIVE, TICK_S


def spec(
    default: Any = dataclasses.MISSING, *, help: str, factory: Any = None, **bounds: Any
) -> Any:
    """A dataclass field with help text and optional bounds (`ge`, `gt`, `le`, `min_len`)."""
    meta = {"help": help, **bounds}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(a) for a in get_args(tp))
    if origin is list:
        return f"list of {type_name(get_args(tp)[0])}"
    if tp is type(None):
        return "null"
    if dataclasses.is_dataclass(tp):
        return "mapping"
    return getattr(tp, "__name__", str(tp))


class FieldTypes(Mapping[str, Any]):
    """A dataclass's field annotations, each evaluated when first read, in the module that
    declares it (what `typing.get_type_hints` gives, field by field). So a section's classes
    load only when a scenario has the section: its module imports them for type checking
    only and names where they live in `LAZY_TYPES` ({class name: module}), e.g.
    config/scenario.py's deployment section."""

    def __init__(self, cls: type) -> None:
        self.declared: dict[str, tuple[Any, type]] = {}  # name -> (annotation, declared in)
        for base in reversed(cls.__mro__):
            for name, annotation in inspect.get_annotations(base).items():
                self.declared[name] = (annotation, base)
        self.resolved: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self.resolved:
            annotation, base = self.declared[name]
            if isinstance(annotation, str):
                module = vars(sys.modules[base.__module__])
                annotation = eval(annotation, module, LazyTypes(module, base))
            self.resolved[name] = type(None) if annotation is None else annotation
        return self.resolved[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.declared)

    def __len__(self) -> int:
        return len(self.declared)


class LazyTypes(Mapping[str, Any]):
    """The names an annotation may use besides its module's own: the module's `LAZY_TYPES`,
    imported when named, then the declaring class's namespace (as get_type_hints reads it)."""

    def __init__(self, module: Mapping[str, Any], cls: type) -> None:
        self.lazy: Mapping[str, str] = module.get("LAZY_TYPES", {})
        self.module, self.cls = module, cls

    def __getitem__(self, name: str) -> Any:
        if name in self.lazy:
            return getattr(importlib.import_module(self.lazy[name]), name)
        if name in self.module or name not in vars(self.cls):
            raise KeyError(name)  # the module's own names, then builtins
        return vars(self.cls)[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.lazy)

    def __len__(self) -> int:
        return len(self.lazy)


@functools.cache
def field_types(cls: type) -> FieldTypes:
    return FieldTypes(cls)


def load(cls: type, data: Any, path: str) -> Any:
    """Build dataclass `cls` from `data`, validating every field; raises ScenarioError."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ScenarioError(path, f"expected a mapping, got {describe(data)}")
    hints = field_types(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    for key in data:
        if not isinstance(key, str):  # `~:` or `1:`: str(None) would read as a key "None"
            text = "~ (null)" if key is None else describe(key)
            raise ScenarioError(path or "(the document)", f"key {text} is not a name",
                                "a field name")
    unknown = sorted(str(k) for k in data if k not in fields)
    if unknown:
        raise ScenarioError(join(path, unknown[0]), "unknown key",
                            ", ".join(closest_first(unknown[0], fields)))
    values = {}
    for name, f in fields.items():
        if name in data:
            values[name] = convert(hints[name], data[name], join(path, name), f.metadata)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ScenarioError(join(path, name), "is required", f.metadata.get("help"))
    obj = cls(**values)
    check = getattr(obj, "validate", None)
    if check is not None:
        check(path)
    return obj


def describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {value!r}"


def convert(tp: Any, value: Any, path: str, meta: Mapping[str, Any]) -> Any:
    value = plain(value)
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = get_args(tp)
        if value is None and type(None) in options:
            return None
        tagged = tagged_union(tuple(o for o in options if o is not type(None)))
        if tagged:
            return load_tagged(tagged, value, path)
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return convert(option, value, path, meta)
            except ScenarioError as exc:
                errors.append(exc)
        if len(errors) == 1:
            raise errors[0]
        raise ScenarioError(path, f"got {describe(value)}", type_name(tp))
    if origin is Literal:
        if value not in get_args(tp):
            raise ScenarioError(path, f"got {value!r}", type_name(tp))
        return value
    if origin is list:
        if not isinstance(value, list):
            raise ScenarioError(path, f"expected a list, got {describe(value)}", type_name(tp))
        (item,) = get_args(tp)
        items = [convert(item, v, join(path, i), {}) for i, v in enumerate(value)]
        min_len = meta.get("min_len")
        if min_len is not None and len(items) < min_len:
            raise ScenarioError(path, f"needs at least {min_len} items, got {len(items)}")
        return items
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return load(tp, value, path)
    if tp is dict or origin is dict:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise ScenarioError(path, f"expected a mapping, got {describe(value)}")
        item = get_args(tp)[1] if get_args(tp) else Any
        if item is Any:
            check_depth(value, path)
            return {str(k): v for k, v in value.items()}
        if isinstance(item, type) and dataclasses.is_dataclass(item):
            named_sections(item, value, path)
        return {str(k): convert(item, v, join(path, str(k)), {}) for k, v in value.items()}
    return bounded(scalar(tp, value, path), path, meta)


def named_sections(item: type, value: Mapping[Any, Any], path: str) -> None:
    """A mapping of names to sections (`slo_targets: {class: {ttft_ms: ...}}`): a value that
    is not a section is most often a section's own key written one level too high."""
    for key, section in value.items():
        if not isinstance(section, Mapping):
            keys = ", ".join(f.name for f in dataclasses.fields(item) if f.init)
            raise ScenarioError(join(path, str(key)), f"expected a mapping, got "
                                f"{describe(section)}", f"{path} maps names to sections: "
                                f"{{<name>: {{{keys}}}}}")


MAX_DEPTH = 100  # levels of free-form values (a policy's params); YAML stops far sooner


def check_depth(value: Any, path: str) -> None:
    """Free-form values nested at most MAX_DEPTH levels (and no value inside itself): every
    later walk of the scenario (copying, writing scenario.yaml) recurses through them."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ScenarioError(path, f"nested more than {MAX_DEPTH} levels deep (or inside "
                                "itself)", "a flatter mapping")
        if isinstance(item, Mapping):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list | tuple):
            stack.extend((v, depth + 1) for v in item)


def tagged_union(options: tuple[Any, ...]) -> dict[str, type]:
    """Map `type` tag -> dataclass when every option is a dataclass with a Literal `type`."""
    tags: dict[str, type] = {}
    for option in options:
        if not (isinstance(option, type) and dataclasses.is_dataclass(option)):
            return {}
        tag = field_types(option).get("type")
        if get_origin(tag) is not Literal:
            return {}
        for name in get_args(tag):
            tags[name] = option
    return tags


def load_tagged(tags: dict[str, type], value: Any, path: str) -> Any:
    if not isinstance(value, Mapping):
        raise ScenarioError(path, f"expected a mapping, got {describe(value)}")
    tag = value.get("type", next(iter(tags)))
    if not isinstance(tag, str) or tag not in tags:
        raise ScenarioError(join(path, "type"), f"got {describe(tag)}", ", ".join(tags))
    return load(tags[tag], value, path)


def plain(value: Any) -> Any:
    """A numpy scalar or array as the Python value it holds (`np.int64(3)` -> 3, `np.bool_`
    -> bool, `np.longdouble(10)` -> 10.0, an array -> a list), so a value computed with numpy
    is valid wherever the Python number it stands for is (numpy is not imported for it). A
    time or a date (`timedelta64`, `datetime64`) is no number: it stays as it is, and is
    refused where a number is expected."""
    if type(value).__module__ != "numpy" or not hasattr(value, "tolist"):
        return value
    kind = getattr(getattr(value, "dtype", None), "kind", "")
    if kind in ("m", "M"):
        return value
    held = value.tolist()
    if kind == "f" and type(held).__module__ == "numpy":  # a long double, which no Python
        return float(held)  # type holds: its value as a float (every limit is far below)
    return held


def scalar(tp: Any, value: Any, path: str) -> Any:
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool):
            if abs(value) > MAX_INT:
                raise ScenarioError(path, f"{value} is out of range", "|value| <= 2**53")
            return value
    elif tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise ScenarioError(path, f"must be a finite number, got {value!r}")
            if abs(value) > MAX_FLOAT:
                raise ScenarioError(path, f"{value!r} is out of range",
                                    f"|value| <= {MAX_FLOAT:g}")
            return float(value)
    elif tp is str and isinstance(value, str):
        return value
    raise ScenarioError(path, f"expected {type_name(tp)}, got {describe(value)}")


def bounded(value: Any, path: str, meta: Mapping[str, Any]) -> Any:
    if "ge" in meta and value < meta["ge"]:
        raise ScenarioError(path, f"must be >= {meta['ge']}, got {value!r}")
    if "gt" in meta and value <= meta["gt"]:
        raise ScenarioError(path, f"must be > {meta['gt']}, got {value!r}")
    if meta.get("gt") == 0 and isinstance(value, float) and value < MIN_POSITIVE:
        raise ScenarioError(path, f"{value!r} is too small", f">= {MIN_POSITIVE:g}")
    if meta.get("gt") == 0 and isinstance(value, float) and value < TICK_S and duration(path):
        raise ScenarioError(path, f"{value!r} s rounds to 0 µs, the clock's tick (a timer "
                            "of 0 would fire at the same time for ever)", f">= {TICK_S:g}")
    if "le" in meta and value > meta["le"]:
        raise ScenarioError(path, f"must be <= {meta['le']}, got {value!r}")
    return value


def duration(path: str) -> bool:
    """Whether the field at `path` is a time in seconds: named `*_s` (README: times are
    seconds), except the rates `*_per_s` and bandwidths `*_gb_s`."""
    name = path.rpartition(".")[2]
    return name.endswith("_s") and not name.endswith(("per_s", "gb_s"))


@functools.cache
def plain_fields(cls: Any) -> tuple[tuple[dataclasses.Field[Any], bool], ...] | None:
    """A dataclass's fields `to_plain` writes, each with whether it is left out at its
    default; None for any other type. Found once per class: a sweep writes every run's
    scenario to key it."""
    if not dataclasses.is_dataclass(cls):
        return None
    return tuple((f, bool(f.metadata.get("omit_default"))) for f in dataclasses.fields(cls)
                 if f.init)


def default_of(f: dataclasses.Field[Any]) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def to_plain(obj: Any) -> Any:
    """Dataclass -> plain dict/list tree in field order (for the resolved-scenario file). A
    field declared with `omit_default=True` is left out while it has its default, so an
    optional feature that is off does not change the file."""
    fields = None if isinstance(obj, type) else plain_fields(type(obj))  # type: ignore[arg-type]
    if fields is not None:
        return {f.name: to_plain(getattr(obj, f.name)) for f, omit in fields
                if not (omit and getattr(obj, f.name) == default_of(f))}
    if dataclasses.is_dataclass(obj):  # (a dataclass itself, not an instance)
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                if f.init and not (f.metadata.get("omit_default")
                                   and getattr(obj, f.name) == default_of(f))}
    if isinstance(obj, list | tuple):
        return [to_plain(v) for v in obj]
    if isinstance(obj, Mapping):
        return {k: to_plain(v) for k, v in obj.items()}
    return obj
