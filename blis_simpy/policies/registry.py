"""A name-keyed registry per policy axis, plus `module:Class` for user policies.

A template declares its parameters as a frozen dataclass (`Params`), validated with the same
loader as the scenario, so a bad parameter names its YAML path. Policy objects are created once
per run and may keep state across calls (seed F.6).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from typing import Any, Generic, Protocol, TypeVar

from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.schema import load

P = TypeVar("P")


class PolicySpec(Protocol):
    """What names a policy in a scenario: a template (or module:Class) and its parameters."""

    @property
    def type(self) -> str: ...

    @property
    def params(self) -> Mapping[str, Any]: ...


@dataclasses.dataclass(frozen=True, slots=True)
class NoParams:
    """A template without parameters."""


class Registry(Generic[P]):
    """The templates of one axis (admission, priority, routing, scheduler)."""

    def __init__(self, axis: str, base: type) -> None:
        self.axis = axis
        self.base = base
        self.templates: dict[str, type] = {}

    def register(self, name: str) -> Callable[[type], type]:
        def add(cls: type) -> type:
            self.templates[name] = cls
            setattr(cls, "name", name)  # noqa: B010 (every axis base declares `name`)
            return cls
        return add

    @property
    def names(self) -> list[str]:
        return sorted(self.templates)

    def create(self, config: PolicySpec, path: str) -> P:
        """Instantiate the configured policy; EC-1: an unknown name lists the valid ones."""
        cls = self.resolve(config.type, f"{path}.type")
        params_cls = getattr(cls, "Params", NoParams if config.type in self.templates else None)
        if params_cls is None:  # a user policy without a Params dataclass gets the mapping
            return cls(dict(config.params))
        return cls(load(params_cls, config.params, f"{path}.params"))

    def resolve(self, name: str, path: str) -> type:
        if name in self.templates:
            return self.templates[name]
        if ":" in name:
            return self.load_user_class(name, path)
        raise ScenarioError(path, f"unknown {self.axis} policy {name!r}",
                            ", ".join(self.names) + ", or module:Class")

    def load_user_class(self, name: str, path: str) -> type:
        module_name, _, class_name = name.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ScenarioError(path, f"cannot import {module_name!r}: {exc}") from None
        cls = getattr(module, class_name, None)
        if not isinstance(cls, type) or not issubclass(cls, self.base):
            raise ScenarioError(path, f"{name!r} is not a {self.base.__name__} subclass",
                                f"a class deriving from blis_simpy.policies.{self.base.__name__}")
        return cls
