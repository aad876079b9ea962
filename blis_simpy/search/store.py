"""The run store: every finished evaluation of a sweep, on disk the moment it finishes.

A policy search runs for hours; a sweep that kept its rows in memory lost them all when it
died. Here each row is written (and committed) as soon as its run returns, keyed by the
content of what was run: the scenario with the candidate's policies applied and the seed, a
code candidate's source, the contents of the files the scenario reads (traces, model and
hardware configs, user policy modules) and the simulator version (the package's own sources
and data). A sweep started again with the same store skips every run already there, and a
candidate a search proposes twice is run once: the rows are the same either way, because
a run is deterministic.

The store is one SQLite file: measured against Parquet (docs/guides/policy-search.md, "Durable,
resumable sweeps"), SQLite commits one row in a fraction of a millisecond and looks one up by key
without reading the others, where Parquet needs a file per row to be as durable. Its write-
ahead log makes a committed row survive the process being killed.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import sqlite3
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from stat import S_ISREG
from typing import Any

from blis_simpy.core.errors import ScenarioError

FORMAT = 1  # the layout of the store's tables; another one is refused by name
# Scenario keys whose value names a file the run reads: its content is part of the key, as is
# the content of any other value that names a file (`latency.coefficients`, a draft model's
# config: newcomer 18 found a recalibrated coefficients file served the old rows).
FILE_KEYS = ("path", "model_config", "hardware_config")


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


@functools.cache
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def file_digest(path: str) -> str | None:
    """The content digest of a file the scenario names; None if it is not a file."""
    try:
        stat = os.stat(path)
    except (OSError, ValueError):
        return None
    if not S_ISREG(stat.st_mode):
        return None
    return _file_digest(path, stat.st_size, stat.st_mtime_ns)


def module_digest(policy_type: str) -> str | None:
    """The source digest of a user policy's module (`module:Class`)."""
    module = policy_type.partition(":")[0]
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    origin = None if spec is None else spec.origin
    return None if origin is None else file_digest(origin)


def referenced(data: Any) -> dict[str, str | None]:
    """Every file a scenario dict reads (every string naming a file, whatever its key) and every
    user policy module it names -> digest."""
    found: dict[str, str | None] = {}

    def walk(node: Any, key: str) -> None:
        if isinstance(node, Mapping):
            for name, value in node.items():
                walk(value, str(name))
        elif isinstance(node, list):
            for item in node:
                walk(item, key)
        elif isinstance(node, str):
            if key == "type" and ":" in node:
                found[node] = module_digest(node)
            elif (digest := file_digest(node)) is not None or key in FILE_KEYS:
                found[node] = digest

    walk(data, "")
    return found


def run_key(scenario: Mapping[str, Any], seed: int, code: Any = None) -> str:
    """The content key of one run (module docstring); `code` is a code candidate's identity
    (axis, entry point, source), None for templates."""
    content = {"scenario": scenario, "seed": seed, "code": code, "files": referenced(scenario),
               "simulator": simulator_version()}
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
