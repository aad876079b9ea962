"""Foreign workload descriptions read strictly: every error names the file and the key, and a
converted `workload:` section is loaded with the real schema before it is written, so it is
known to run. Used by the inference-perf importer and the reference workload-spec importer.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from blis_simpy.config.distributions import parse_distribution
from blis_simpy.config.workload import TenantsWorkload
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.files import read_text
from blis_simpy.core.schema import describe, join, load
from blis_simpy.core.yamlio import dump_yaml, load_yaml


@dataclass(frozen=True, slots=True)
class Reader:
    """Strict access to a foreign YAML file; every error names the file and the key."""

    label: str

    def error(self, key: str, problem: str, valid: str | None = None) -> ScenarioError:
        return ScenarioError(f"{self.label}: {key}" if key else self.label, problem, valid)

    def mapping(self, value: Any, key: str, fields: Iterable[str]) -> dict[str, Any]:
        """A mapping whose keys are all in `fields` (null reads as empty)."""
        fields = tuple(fields)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.error(key, f"expected a mapping, got {describe(value)}", ", ".join(fields))
        for name in value:
            if str(name) not in fields:
                raise self.error(join(key, str(name)), "unknown key", ", ".join(fields))
        return {str(k): v for k, v in value.items()}

    def items(self, value: Any, key: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.error(key, f"expected a list, got {describe(value)}")
        return value

    def number(self, value: Any, key: str, default: float | None = None) -> float:
        if value is None and default is not None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(key, f"expected a number, got {describe(value)}")
        if not math.isfinite(value):
            raise self.error(key, f"must be a finite number, got {value!r}")
        return float(value)

    def positive(self, value: Any, key: str, default: float | None = None) -> float:
        number = self.number(value, key, default)
        if number <= 0:
            raise self.error(key, f"must be > 0, got {value!r}")
        return number

    def whole(self, value: Any, key: str, default: int | None = None) -> int:
        number = self.number(value, key, None if default is None else float(default))
        if not number.is_integer():
            raise self.error(key, f"expected an integer, got {value!r}")
        return int(number)

    def text(self, value: Any, key: str) -> str:
        if value is None:
            return ""
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise self.error(key, f"expected a name, got {describe(value)}")
        return str(value)

    def flag(self, value: Any, key: str) -> bool:
        if value is None:
            return False
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {describe(value)}")
        return value

    def distribution(self, data: dict[str, Any], key: str) -> dict[str, Any]:
        """Check a converted distribution against blis-simpy's schema, under the source key."""
        try:
            parse_distribution(data, "")
        except ScenarioError as exc:
            raise self.error(join(key, exc.path) if exc.path else key, exc.problem,
                             exc.valid) from None
        return data


def read_yaml(path: Path, reader: Reader) -> Any:
    try:
        text = read_text(path, "", "a YAML file")
    except ScenarioError as exc:
        raise reader.error("", exc.problem, exc.valid) from None
    return load_yaml(text, reader.label)


@dataclass(slots=True)
class Converted:
    """A `workload:` section plus what the source said that belongs elsewhere."""

    workload: dict[str, Any]
    seed: int | None = None  # the source's seed, for the scenario's `seed`
    horizon_s: float | None = None  # the source's simulation horizon, if it has one
    notes: list[str] = field(default_factory=list)  # what was ignored or approximated


def checked(workload: dict[str, Any], reader: Reader) -> dict[str, Any]:
    """Load the converted section with the real schema, so the output is known to run."""
    try:
        load(TenantsWorkload, workload, "")
    except ScenarioError as exc:
        raise reader.error(f"(converted workload) {exc.path}", exc.problem, exc.valid) from None
    return workload


def workload_yaml(converted: Converted, title: str) -> str:
    """The section as YAML, headed by comments saying where it came from and what differs."""
    notes = [title]
    if converted.seed is not None:
        notes.append(f"Its seed is {converted.seed}: set the scenario's `seed` to it "
                     "(blis-simpy's draws differ from the source tool's anyway).")
    if converted.horizon_s is not None:
        notes.append(f"It also stops the simulation: set the scenario's "
                     f"`horizon_s: {converted.horizon_s:g}`.")
    notes += converted.notes
    lines = [line for note in notes
             for line in textwrap.wrap(note, 96, initial_indent="# ", subsequent_indent="#   ")]
    body = dump_yaml({"workload": converted.workload})
    return "\n".join(lines) + "\n" + body
