"""The run store: every finished evaluation of a sweep, on disk the moment it finishes.

A policy search runs for hours; a sweep that kept its rows in memory lost them all when it
died. Here each row is written (and committed) as soon as its run returns, keyed by the
content of what was run: the scenario with the candidate's policies applied and the seed, a
code candidate's source and limits, the contents of the files the scenario's input fields
name (`INPUTS`: traces, coefficients, model and hardware configs; user policy modules) and the
simulator version (the package's own sources and data). A sweep started again with the same
store skips every run already there, and a candidate a search proposes twice is run once: the
rows are the same either way, because a run is deterministic.

The store is one SQLite file: measured against Parquet (docs/guides/policy-search.md, "Durable,
resumable sweeps"), SQLite commits one row in a fraction of a millisecond and looks one up by key
without reading the others, where Parquet needs a file per row to be as durable. Its write-
ahead log makes a committed row survive the process being killed.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
import json
import os
import sqlite3
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from blis_simpy.config.deployment import DeploymentConfig, ScalePolicyConfig
from blis_simpy.config.pd import PoolSpec
from blis_simpy.config.scenario import EngineConfig, LatencyConfig, PolicyConfig, Scenario
from blis_simpy.config.speculation import SpeculativeConfig
from blis_simpy.config.step_models import bundled_families
from blis_simpy.config.workload import TraceWorkload
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.files import MAX_TEXT_BYTES, MAX_TRACE_BYTES, digest
from blis_simpy.core.schema import join, load

FORMAT = 1  # the layout of the store's tables; another one is refused by name


@dataclasses.dataclass(frozen=True)
class Input:
    """How a scenario field names a file the run reads (as that file's reader takes it)."""

    what: str  # the kind of file, for errors
    limit: int = MAX_TEXT_BYTES
    inside: str | None = None  # the file read when the field names a folder
    bundled: bool = False  # a bundled coefficient set's name is not a file


# The fields that name a file the run reads, by the section that has them. Only these are read
# for the key, never any other string: a candidate's decision tree may compare with the text
# "/proc/self/mem" (newcomer 20).
INPUTS: dict[type, dict[str, Input]] = {
    TraceWorkload: {"path": Input("a trace file", MAX_TRACE_BYTES)},
    LatencyConfig: {"coefficients": Input("a coefficients JSON file", bundled=True),
                    "model_config": Input("a JSON file", inside="config.json"),
                    "hardware_config": Input("a JSON file")},
    SpeculativeConfig: {"model_config": Input("a JSON file", inside="config.json")},
}
POLICY_TYPES = (PolicyConfig, ScalePolicyConfig)  # `type` may be a user's module:Class
# Sections a deployment keeps as the mappings it was given (the scenario's own `latency:` and
# `engine:` by default), read here as the sections they are.
KEPT_AS_MAPPINGS: dict[type, dict[str, type]] = {
    DeploymentConfig: {"latency": LatencyConfig, "engine": EngineConfig},
    PoolSpec: {"latency": LatencyConfig, "engine": EngineConfig},
}


@functools.cache
def simulator_version() -> str:
    """The package version and a digest of its sources and bundled data: any change to the
    simulator gives new keys, so a store never serves a row an older simulator made."""
    import blis_simpy

    root = Path(blis_simpy.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".json", ".yaml", ".csv", ".txt") and "__pycache__" \
                not in path.parts and path.is_file():
            digest.update(path.relative_to(root).as_posix().encode())
            digest.update(path.read_bytes())
    return f"{blis_simpy.__version__}+{digest.hexdigest()[:16]}"


def input_digest(name: str, field: str, kind: Input) -> str | None:
    """The content digest of the file a scenario field names, through the bounded reader
    (core/files.py: a special, endless or unreadable file is a ScenarioError naming the
    field); None when there is no such file (the run's own reader says so)."""
    path = Path(name)
    if kind.inside and path.is_dir():
        path = path / kind.inside
    if not os.path.lexists(path) or (kind.bundled and name in bundled_families()):
        return None
    return digest(path, field, kind.what, kind.limit)


def module_digest(policy_type: str, field: str) -> str | None:
    """The source digest of a user policy's module (`module:Class`)."""
    module = policy_type.partition(":")[0]
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    origin = None if spec is None else spec.origin
    if origin is None or not os.path.isfile(origin):
        return None
    return digest(origin, field, "a Python source file")


def referenced(scenario: Scenario) -> dict[str, str | None]:
    """Every input file of the scenario (`INPUTS`) and every user policy module it names, by
    the field naming it -> its content digest."""
    found: dict[str, str | None] = {}

    def walk(node: Any, where: str) -> None:
        if isinstance(node, POLICY_TYPES):
            if ":" in node.type:
                found[join(where, "type")] = module_digest(node.type, join(where, "type"))
            return  # (its params are data, never a file)
        if isinstance(node, list | tuple):
            for i, item in enumerate(node):
                walk(item, join(where, i))
        elif dataclasses.is_dataclass(node):
            for name, kind in INPUTS.get(type(node), {}).items():
                if value := getattr(node, name):
                    found[join(where, name)] = input_digest(value, join(where, name), kind)
            mappings = KEPT_AS_MAPPINGS.get(type(node), {})
            for item in dataclasses.fields(node):
                value, inner = getattr(node, item.name), join(where, item.name)
                section = mappings.get(item.name)
                walk(value if section is None or value is None else load(section, value, inner),
                     inner)

    walk(scenario, "")
    return found


def run_key(scenario: Scenario, seed: int, code: Any = None) -> str:
    """The content key of one run (module docstring); `code` is a code candidate's identity
    (axis, entry point, source, its limits), None for templates. A file the scenario names
    that cannot be read is a ScenarioError naming its field."""
    content = {"scenario": scenario.to_dict(), "seed": seed, "code": code,
               "files": referenced(scenario), "simulator": simulator_version()}
    text = json.dumps(content, sort_keys=True, default=str, allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()


def plain(value: Any) -> Any:
    """A row value as JSON keeps it: numpy scalars become Python numbers."""
    item = getattr(value, "item", None)
    return item() if callable(item) and not isinstance(value, str | bytes) else value


def normalised(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row as the store gives it back (JSON round trip): a row just computed and one read
    from the store are then equal to the last bit, so a resumed sweep's table is the same."""
    text = json.dumps({k: plain(v) for k, v in row.items()}, allow_nan=True)
    return dict(json.loads(text))


class RunStore:
    """A SQLite file of rows keyed by `run_key`. Opening checks that the file is a store
    (or creates it), so a bad path fails before any run."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.lock = threading.Lock()
        where = f"store ({self.path})"
        if self.path.is_dir():
            raise ScenarioError(where, "is a directory", "a file, e.g. sweep.runs.sqlite")
        if self.path.exists() and not self.path.is_file():  # a FIFO would hang, a device...
            raise ScenarioError(where, "is not a regular file (a device or FIFO is never used "
                                "as a store)", "a file, e.g. sweep.runs.sqlite")
        parent = self.path.parent
        if not parent.is_dir():
            raise ScenarioError(where, f"cannot be created: {parent} is not a folder")
        try:
            # One connection, shared by the threads of a search framework (OpenEvolve
            # evaluates in a thread pool): each use holds the lock.
            self.db = sqlite3.connect(self.path, timeout=60, isolation_level=None,
                                      check_same_thread=False)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")  # WAL: a commit survives a kill
            tables = {r[0] for r in self.db.execute(
                "SELECT name FROM sqlite_master WHERE type='table'")}
            if not tables:
                self.db.execute("CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT)")
                self.db.execute("CREATE TABLE runs (key TEXT PRIMARY KEY, row TEXT NOT NULL)")
                self.db.execute("INSERT INTO meta VALUES ('format', ?)", (str(FORMAT),))
            elif tables != {"meta", "runs"}:
                raise ScenarioError(where, "is an SQLite file but not a run store (tables "
                                    f"{', '.join(sorted(tables))})", "a store made by a sweep, "
                                    "or a new file name")
            else:
                found = self.db.execute("SELECT value FROM meta WHERE name='format'").fetchone()
                if found is None or found[0] != str(FORMAT):
                    raise ScenarioError(where, f"store format {found and found[0]!r}",
                                        f"format {FORMAT}: a store made by this version, or a "
                                        "new file name")
        except sqlite3.DatabaseError as exc:
            raise ScenarioError(where, f"is not a run store: {exc}",
                                "a store made by a sweep, or a new file name") from None

    def get(self, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The stored rows of those keys that are there."""
        wanted = list(dict.fromkeys(keys))
        out: dict[str, dict[str, Any]] = {}
        with self.lock:
            for start in range(0, len(wanted), 500):
                chunk = wanted[start:start + 500]
                marks = ",".join("?" * len(chunk))
                for key, text in self.db.execute(
                        f"SELECT key, row FROM runs WHERE key IN ({marks})", chunk):
                    out[key] = json.loads(text)
        return out

    def put(self, key: str, row: Mapping[str, Any]) -> None:
        """Store one row now (committed before this returns)."""
        with self.lock:
            self.db.execute("INSERT OR REPLACE INTO runs VALUES (?, ?)",
                            (key, json.dumps(row, allow_nan=True)))

    def __len__(self) -> int:
        with self.lock:
            return int(self.db.execute("SELECT count(*) FROM runs").fetchone()[0])

    def close(self) -> None:
        with self.lock:
            self.db.close()
