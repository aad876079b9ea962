"""`dataclasses` as a candidate's process offers it: field names that cannot carry code.

`dataclasses` writes each field's name into the text of the methods it generates and compiles
(`__init__`, `__repr__`, ...), and reads attributes by those names (`asdict`, `replace`). A
name is a plain attribute of a `Field`, which a candidate can set, and a class made by
three-argument `type()` takes its annotations' keys, the field names, from strings built at
run time, which the static check never sees: a name such as `a" + (...) + "` ran code the
check refuses, in the candidate's module, once the class was printed (attacker 20b). The
operating system's boundary held (the real builtins reached that way open no file), but a
candidate must not get past the first filter by a route this easy. So, in the template, before
any candidate's process is forked from it:

* a `Field`'s name is set once, to an identifier that is not a dunder (`Field.__setattr__`);
* a class `dataclasses` reads fields from (a base being processed, the object given to
  `fields`, `asdict`, `astuple` or `replace`) has a metaclass of the standard library's or
  the policies', holds its fields in a plain dict of genuine `Field`s, and reads attributes in
  the usual way: a metaclass, `__getattribute__` or fields dict of the candidate's own, made
  from run-time strings, could answer differently after the check than during it.

This is part of the first filter, not of the boundary (docs/security.md).
"""

from __future__ import annotations

import abc
import dataclasses
import keyword
import typing
from collections.abc import Callable
from typing import Any

FIELDS = "__dataclass_fields__"
CLASS_DICT = type.__dict__["__dict__"]
PARAMS = vars(dataclasses)["_DataclassParams"]  # (private: what `dataclass` stores)
MRO = type.__dict__["__mro__"]


def plain(name: object) -> bool:
    """An attribute name that generated code can hold as text: an identifier, not a keyword,
    not a dunder."""
    return (type(name) is str and name.isidentifier() and not keyword.iskeyword(name)
            and not name.startswith("__"))


def seal(metaclasses: tuple[type, ...]) -> None:
    """Seal the process's `dataclasses` (module docstring); `metaclasses`: the policies' own,
    trusted like the standard library's."""
    trusted: frozenset[type] = frozenset({type, abc.ABCMeta, type(typing.Protocol),
                                         *metaclasses})
    dataclasses.Field.__setattr__ = set_field_attribute  # type: ignore[assignment,method-assign]
    module = vars(dataclasses)
    module["_process_class"] = checking(module["_process_class"], trusted)
    for name in ("fields", "asdict", "astuple", "replace"):
        module[name] = checking(module[name], trusted)


def set_field_attribute(field: dataclasses.Field[Any], attribute: str, value: object) -> None:
    """`Field.__setattr__`: its name is set once, to a `plain` name (None until then)."""
    if attribute == "name":
        current = getattr(field, "name", None)
        if value is not None and not plain(value):
            raise TypeError(f"a dataclass field may not be named {str(value)[:80]!r} in a "
                            "policy: an identifier that does not start with '__'")
        if current is not None and value != current:
            raise TypeError(f"dataclass field {current!r} cannot be renamed in a policy")
    object.__setattr__(field, attribute, value)


def checking(function: Callable[..., Any], trusted: frozenset[type]) -> Callable[..., Any]:
    """`function` of `dataclasses`, called once its first argument's classes are `genuine`."""
    def checked(subject: object, /, *args: Any, **kwargs: Any) -> Any:
        genuine(subject if isinstance(subject, type) else type(subject), trusted)
        return function(subject, *args, **kwargs)
    # (named by hand, not functools.wraps: its `__wrapped__` would lead past the check)
    checked.__name__ = checked.__qualname__ = function.__name__
    checked.__doc__ = function.__doc__
    return checked


def genuine(cls: type, trusted: frozenset[type]) -> None:
    """Raise TypeError unless every class of `cls`'s MRO has a trusted metaclass and the
    usual attribute lookup, and any fields it holds are a plain dict of `Field`s with plain
    names (read without running any of the candidate's code)."""
    for klass in MRO.__get__(cls):
        if type(klass) not in trusted:
            raise TypeError(f"{klass.__name__} has a metaclass of its own: dataclasses in a "
                            "policy take classes made by `class` or type()")
        own = CLASS_DICT.__get__(klass)
        if klass is not object and ("__getattribute__" in own or "__getattr__" in own):
            raise TypeError(f"{klass.__name__} defines how its attributes are read: not for a "
                            "dataclass in a policy")
        params = own.get("__dataclass_params__")
        if params is not None and type(params) is not PARAMS:
            raise TypeError(f"{klass.__name__}'s dataclass parameters are not dataclasses' own")
        fields = own.get(FIELDS)
        if fields is None:
            continue
        if type(fields) is not dict or any(
                type(f) is not dataclasses.Field or not plain(f.name) for f in fields.values()):
            raise TypeError(f"{klass.__name__}'s dataclass fields are not dataclasses' own")
