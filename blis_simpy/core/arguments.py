"""The Python API's arguments, checked where they are passed: a wrong one is a ScenarioError
naming the argument, what it got and what is valid, never an AttributeError or TypeError from
deep inside a run. numpy scalars pass wherever the Python values they hold do (a seed from
`np.arange`, a flag from a numpy comparison), as they do in a scenario (`schema.plain`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.schema import describe, plain, scalar

T = TypeVar("T")


def flag(name: str, value: Any) -> bool:
    """True or False (a numpy bool too); not any object that happens to be truthy."""
    value = plain(value)
    if not isinstance(value, bool):
        raise ScenarioError(name, f"expected True or False, got {describe(value)}")
    return value


def callback(name: str, value: Callable[..., Any] | None, valid: str
             ) -> Callable[..., Any] | None:
    if value is not None and not callable(value):
        raise ScenarioError(name, f"expected a function, got {describe(value)}", valid)
    return value


def instance(name: str, value: Any, kind: type[T] | tuple[type, ...], valid: str) -> T:
    """`value` if it is a `kind` (or None, when None is part of `valid`'s promise)."""
    if not isinstance(value, kind):
        raise ScenarioError(name, f"expected {valid}, got {shown_kind(value)}")
    return value  # type: ignore[return-value]


def shown_kind(value: Any) -> str:
    return f"the class {value.__name__}" if isinstance(value, type) else describe(value)


def integer(name: str, value: Any, low: int | None = None) -> int:
    """An integer (a numpy one, or a float with no fraction, too), at least `low`."""
    number = scalar(int, plain(value), name)
    if low is not None and number < low:
        raise ScenarioError(name, f"must be >= {low}, got {number}")
    return int(number)


def integers(name: str, values: Any) -> list[int]:
    """A list of integers from any iterable of them (a list, a range, a numpy array)."""
    values = plain(values)
    if isinstance(values, str | bytes | Mapping) or not isinstance(values, Iterable):
        raise ScenarioError(name, f"expected a list of integers, got {describe(values)}",
                            "e.g. [1, 2, 3], range(5) or np.arange(5)")
    return [integer(f"{name}[{i}]", v) for i, v in enumerate(values)]
