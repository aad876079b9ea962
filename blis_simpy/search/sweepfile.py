"""The sweep file of `blis-simpy sweep`: which scenarios, policies and seeds to run.

```yaml
scenarios: [prefix-heavy, my-scenario.yaml]   # library names, or paths from this file
set: {cluster.instances: 2}                   # dotted overrides for every scenario
policies:                                     # name -> candidate, or a bundle file
  round-robin: {routing.type: round-robin}
  tuned: tuned-bundle.yaml
seeds: [1, 2, 3]
out: sweep.csv                                # the table (.csv or .parquet)
store: sweep.runs.sqlite                      # finished runs (default: out's name + .runs.sqlite)
```
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blis_simpy.config.library import scenario_file
from blis_simpy.config.scenario import Scenario
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.files import read_text
from blis_simpy.core.schema import load, spec
from blis_simpy.core.yamlio import load_yaml
from blis_simpy.policies.bundle import PolicyBundle
from blis_simpy.sim.run import load as load_scenario


@dataclass(frozen=True, slots=True)
class SweepSpec:
    scenarios: list[str] = spec(help="library scenario names or YAML paths", min_len=1)
    set: dict[str, Any] = spec(factory=dict, help="dotted overrides applied to every scenario")
    policies: dict[str, Any] = spec(
        factory=dict, help="name -> candidate (bundle mapping or flat keys) or bundle file; "
        "default: each scenario's own policies")
    seeds: list[int] = spec(factory=list, help="seeds; default: each scenario's own seed")
    out: str = spec("sweep.csv", help="where the table goes (.csv or .parquet)")
    store: str | None = spec(None, help="the run store: every finished run, kept at once "
                             "(default: out's name with .runs.sqlite)")


@dataclass(frozen=True)
class Sweep:
    """A sweep file read and checked: parsed scenarios and bundles, ready for run_many."""

    scenarios: dict[str, Scenario]
    policies: dict[str, PolicyBundle | None]
    seeds: list[int] | None
    out: Path
    store: Path | None


def read_sweep(path: Path) -> Sweep:
    text = read_text(path, "", "a sweep YAML file")
    try:
        spec_ = load(SweepSpec, load_yaml(text, ""), "")
        folder = path.parent
        scenarios = {}
        for i, name in enumerate(spec_.scenarios):
            scenario = load_scenario(scenario_file(name, folder, f"scenarios[{i}]"),
                                     overrides=spec_.set)
            scenarios[scenario.name] = scenario
        policies = {name: policy(value, folder, f"policies.{name}")
                    for name, value in spec_.policies.items()}
    except ScenarioError as exc:
        raise exc.in_file(path) from None
    return Sweep(scenarios, policies or {"scenario": None}, spec_.seeds or None,
                 folder / spec_.out, None if spec_.store is None else folder / spec_.store)


def policy(value: Any, folder: Path, where: str) -> PolicyBundle | None:
    if value is None:
        return None
    try:
        if isinstance(value, str):
            return PolicyBundle.from_yaml(folder / value)
        return PolicyBundle.from_dict(value)
    except ScenarioError as exc:
        raise ScenarioError(f"{where}: {exc.path}".rstrip(": "), exc.problem, exc.valid,
                            exc.file) from None
