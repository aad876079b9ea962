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

# Modules that register templates on several axes at once, imported the first time a registry
# is asked for a name it does not hold or for all its names: few scenarios use decision trees,
# and importing them costs every run 5 ms.
LATER = ("blis_simpy.policies.tree",)


class PolicySpec(Protocol):
    """What names a policy in a scenario: a template (or module:Class) and its parameters."""

    @property
    def type(self) -> str: ...

    @property
    def params(self) -> Mapping[str, Any]: ...


@dataclasses.dataclass(frozen=True, slots=True)
class NoParams:
    """A template without parameters."""


def shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


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

    def holds(self, name: str) -> bool:
        """A template's name (importing the `LATER` modules before saying no)."""
        if name not in self.templates:
            for module in LATER:
                importlib.import_module(module)
        return name in self.templates

    @property
    def names(self) -> list[str]:
        for module in LATER:
            importlib.import_module(module)
        return sorted(self.templates)

    def create(self, config: PolicySpec, path: str) -> P:
        """Instantiate the configured policy; EC-1: an unknown name lists the valid ones."""
        cls = self.resolve(config.type, f"{path}.type")
        template = self.holds(config.type)
        params_cls = getattr(cls, "Params", NoParams if template else None)
        if params_cls is None:  # a user policy without a Params dataclass gets the mapping
            params: Any = dict(config.params)
        else:
            params = load(params_cls, config.params, f"{path}.params")
        if template:
            return cls(params)
        try:
            policy = cls(params)
        except Exception as exc:  # the user's constructor: reported before the run
            raise ScenarioError(f"{path}.params", f"{config.type}({shown(params)}) raised "
                                f"{type(exc).__name__}: {exc}") from None
        if not hasattr(policy, "params"):
            raise ScenarioError(f"{path}.type", f"{config.type}.__init__ did not call "
                                "super().__init__(params), so the policy has no `params`",
                                "call super().__init__(params) in __init__, or define no "
                                "__init__ (docs/guides/policies.md)")
        return policy

    def is_user(self, config: PolicySpec) -> bool:
        """A `module:Class` policy (guarded during the run), not a template."""
        return not self.holds(config.type)

    def resolve(self, name: str, path: str) -> type:
        if self.holds(name):
            return self.templates[name]
        if ":" in name:
            return self.load_user_class(name, path)
        raise ScenarioError(path, f"unknown {self.axis} policy {name!r}",
                            ", ".join(self.names) + ", or module:Class")

    def load_user_class(self, name: str, path: str) -> type:
        """Import `module:Class`; the module is looked up on sys.path (the command line adds
        the current folder and the scenario's folder)."""
        module_name, _, class_name = name.partition(":")
        base = f"{self.base.__module__}.{self.base.__name__}"
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ScenarioError(path, f"cannot import {module_name!r}: {exc}",
                                "a module on the Python path (sys.path); the command line "
                                "adds the current folder, and loading a scenario from its "
                                "file adds the file's folder") from None
        except Exception as exc:  # the user's module failed while importing
            raise ScenarioError(path, f"importing {module_name!r} raised "
                                f"{type(exc).__name__}: {exc}") from None
        where = getattr(module, "__file__", None) or module_name
        if not hasattr(module, class_name):
            classes = sorted(n for n, v in vars(module).items() if isinstance(v, type)
                             and issubclass(v, self.base) and v.__module__ == module.__name__)
            raise ScenarioError(path, f"{where} defines no {class_name!r}",
                                ", ".join(f"{module_name}:{c}" for c in classes)
                                or f"a class deriving from {base}")
        cls = getattr(module, class_name)
        if not isinstance(cls, type):
            raise ScenarioError(path, f"{name!r} is a {type(cls).__name__}, not a class",
                                f"a class deriving from {base}")
        if not issubclass(cls, self.base):
            raise ScenarioError(path, f"{name!r} does not derive from {self.base.__name__}",
                                f"a class deriving from {base}")
        return cls
