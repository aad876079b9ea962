"""`schema.field_types` evaluates a dataclass's annotations field by field, importing a module's
`LAZY_TYPES` only when an annotation names one: it must give exactly what
`typing.get_type_hints` gives, for every config and policy-parameter dataclass."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import sys
import typing

import pytest

import blis_simpy.config
import blis_simpy.policies
from blis_simpy.core.schema import field_types


def dataclasses_of(*packages) -> list[type]:
    found = []
    for package in packages:
        for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
            module = importlib.import_module(info.name)
            found += [v for v in vars(module).values() if isinstance(v, type)
                      and dataclasses.is_dataclass(v) and v.__module__ == module.__name__]
    return found


CLASSES = dataclasses_of(blis_simpy.config, blis_simpy.policies)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_field_types_are_get_type_hints_field_by_field(cls):
    lazy = getattr(sys.modules[cls.__module__], "LAZY_TYPES", {})
    names = {name: getattr(importlib.import_module(module), name)
             for name, module in lazy.items()}
    assert dict(field_types(cls)) == typing.get_type_hints(cls, localns=names)


def test_the_deployment_and_faults_section_types_are_imported_when_read():
    from blis_simpy.config.deployment import DeploymentSection
    from blis_simpy.config.faults import FaultsConfig
    from blis_simpy.config.scenario import LAZY_TYPES, EngineConfig, Scenario
    from blis_simpy.config.seeds import SeedsConfig
    from blis_simpy.config.speculation import SpeculativeConfig

    assert LAZY_TYPES == {"DeploymentSection": "blis_simpy.config.deployment",
                          "FaultsConfig": "blis_simpy.config.faults",
                          "SeedsConfig": "blis_simpy.config.seeds",
                          "SpeculativeConfig": "blis_simpy.config.speculation"}
    assert field_types(Scenario)["deployment"] == DeploymentSection | None
    assert field_types(Scenario)["faults"] == FaultsConfig | None
    assert field_types(Scenario)["seeds"] == SeedsConfig | None
    assert field_types(EngineConfig)["speculative"] == SpeculativeConfig | None


def test_the_archetype_and_session_model_types_are_imported_when_read():
    """Issue 34 item 7's classes load only with a scenario that has them."""
    from blis_simpy.config.sessions import Archetype, SessionModel
    from blis_simpy.config.workload import LAZY_TYPES, ChatConfig, TenantsWorkload

    assert LAZY_TYPES == {"Archetype": "blis_simpy.config.sessions",
                          "SessionModel": "blis_simpy.config.sessions"}
    assert field_types(TenantsWorkload)["archetypes"] == list[Archetype]
    assert field_types(ChatConfig)["session"] == SessionModel | None


Number, Shadowed = int, float  # module names the classes below use


@dataclasses.dataclass(frozen=True)
class Base:
    size: Number = 0


@dataclasses.dataclass(frozen=True)
class WithInner(Base):
    Inner, Shadowed = str, bytes
    label: Inner = ""
    weight: Shadowed = 0.0


def test_names_resolve_as_get_type_hints_resolves_them():
    """The module's names first, then the declaring class's namespace; a base's fields from
    the base."""
    expected = {"size": int, "label": str, "weight": float}
    assert dict(field_types(WithInner)) == typing.get_type_hints(WithInner) == expected


def test_enough_classes_are_checked():
    assert len(CLASSES) > 60


def test_a_sections_key_written_one_level_too_high_says_what_the_mapping_holds():
    from blis_simpy.config.scenario import Scenario
    from blis_simpy.core.errors import ScenarioError
    from tests.conftest import BASE

    bad = {**BASE, "evaluation": {"slo_targets": {"ttft_ms": 2000}}}
    with pytest.raises(ScenarioError) as err:
        Scenario.from_dict(bad)
    assert err.value.path == "evaluation.slo_targets.ttft_ms"
    assert "{<name>: {ttft_ms, tpot_ms, e2e_ms}}" in str(err.value)
