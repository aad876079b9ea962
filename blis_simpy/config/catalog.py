"""The bundled data: the coefficient catalog (the reference's defaults.yaml) and its lookup rules,
the HuggingFace model configs and the GPU figures the roofline model reads, and the reading of a
user's own files in their place (a defaults.yaml, JSON configs).

The lookup rules exist once, on `Catalog`, because two callers need them: resolving a scenario
(always the bundled catalog) and converting a reference command line, whose
`--defaults-filepath` may name another file.

defaults.yaml is the source; every run reads its JSON twin, data/defaults.json (the same data:
parsing the YAML took 18-27 ms of each run, the JSON 0.4 ms). `python
scripts/catalog_json.py` writes the twin after an edit; tests/config/test_catalog.py fails
while the two differ."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Any

import yaml

from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.files import read_text
from blis_simpy.core.yamlio import load_yaml

DEFAULT_KV_BLOCKS = 1_000_000
# The catalog's `total_kv_blocks` were measured with vLLM's default block of 16 tokens.
CATALOG_BLOCK_SIZE = 16
BUNDLED_SOURCE = "the bundled defaults.yaml"

Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
BUNDLED_YAML, BUNDLED_JSON = "defaults.yaml", "defaults.json"


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One fitted row of the catalog: blackbox coefficients and KV size for a model on a GPU."""
    model: str
    gpu: str
    tp: int
    vllm_version: str
    alpha: tuple[float, ...]
    beta: tuple[float, ...]
    kv_blocks: int

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> CatalogEntry:
        return cls(
            model=row["id"], gpu=row["GPU"], tp=row["tensor_parallelism"],
            vllm_version=row["vllm_version"],
            alpha=tuple(float(x) for x in row.get("alpha_coeffs") or ()),
            beta=tuple(float(x) for x in row.get("beta_coeffs") or ()),
            kv_blocks=int(row.get("total_kv_blocks") or 0),
        )


@dataclass(frozen=True, slots=True)
class Catalog:
    """A coefficient catalog in the reference's defaults.yaml format, with its lookup rules.

    Usually the bundled one (`bundled()`); the reference's `--defaults-filepath` can name a
    user's file instead (`from_file`), so the rules live here once for both. A section the
    file leaves out, or leaves empty, looks up as empty."""
    data: Mapping[str, Any]
    source: str  # how messages name the file

    @classmethod
    def from_file(cls, path: Path, where: str) -> Catalog:
        """A user's defaults.yaml; a ScenarioError at `where` (the option that named it)
        says what is wrong with the file."""
        text = read_text(path, where, "a defaults YAML file")
        try:
            data = load_yaml(text, str(path))
        except ScenarioError as exc:
            raise ScenarioError(where, str(exc)) from None
        if not isinstance(data, Mapping):
            raise ScenarioError(where, f"{path} is not a mapping with defaults, workloads "
                                "and models sections")
        return cls(data, str(path))

    def _section(self, name: str) -> Any:
        return self.data.get(name) or {}

    def _rows(self) -> list[Mapping[str, Any]]:
        return self.data.get("models") or []

    def model_defaults(self, model: str) -> Mapping[str, Any]:
        """GPU, tensor parallelism and vLLM version to use when the model's are not given."""
        return self._section("defaults").get(model.lower()) or {}

    def workload_preset(self, name: str) -> Mapping[str, Any] | None:
        return self._section("workloads").get(name)

    def workload_names(self) -> list[str]:
        return list(self._section("workloads"))

    def find(self, model: str, gpu: str, tp: int, vllm_version: str) -> CatalogEntry | None:
        """The first entry with equal (id, tp, GPU, vLLM version), as the reference picks it."""
        for row in self._rows():
            if (row.get("id"), row.get("tensor_parallelism"), row.get("GPU"),
                    row.get("vllm_version")) == (model.lower(), tp, gpu, vllm_version):
                return CatalogEntry.from_row(row)
        return None

    def models(self) -> list[str]:
        """Every model id that has coefficients."""
        return sorted({str(row.get("id")) for row in self._rows()})

    def combinations(self, model: str) -> list[tuple[Any, Any, Any]]:
        """(GPU, TP, vLLM version) of every entry for `model`, in file order; callers say them
        in their own words (scenario keys or reference flags)."""
        return [(row.get("GPU"), row.get("tensor_parallelism"), row.get("vllm_version"))
                for row in self._rows() if row.get("id") == model.lower()]


@functools.cache
def bundled() -> Catalog:
    """The bundled defaults.yaml (read from its JSON twin); parsed once per process because
    it is read-only data."""
    text = data_dir().joinpath(BUNDLED_JSON).read_text(encoding="utf-8")
    return Catalog(json.loads(text), BUNDLED_SOURCE)


def bundled_yaml() -> Any:
    """defaults.yaml itself, parsed: what the JSON twin must hold."""
    text = data_dir().joinpath(BUNDLED_YAML).read_text(encoding="utf-8")
    return yaml.load(text, Loader=Loader)


def data_dir() -> Traversable:
    """The bundled data directory, resolved through the package so it works from a wheel too."""
    return resources.files("blis_simpy.data")


def bundled_model_config(model: str) -> dict:
    """config.json of a bundled model, looked up by the model name's last path part, lower-cased
    (a new dict each time: the caller may change it)."""
    name = model.rsplit("/", 1)[-1].lower()
    available = bundled_models()
    if name not in available:
        raise ValueError(
            f"no bundled model config for {model!r} (looked for {name!r}); "
            f"available: {', '.join(available)}"
        )
    return json.loads(bundled_model_text(name))


@functools.cache
def bundled_models() -> tuple[str, ...]:
    """The bundled model configs' names, listed once per process (read-only data: a policy
    search resolves and builds a scenario per run)."""
    configs = data_dir() / "model_configs"
    return tuple(sorted(p.name for p in configs.iterdir() if (p / "config.json").is_file()))


@functools.cache
def bundled_model_text(name: str) -> str:
    return (data_dir() / "model_configs" / name / "config.json").read_text(encoding="utf-8")


def bundled_hardware_config() -> dict:
    """The bundled hardware_config.json, keyed by GPU name."""
    return json.loads((data_dir() / "hardware_config.json").read_text(encoding="utf-8"))


def bundled_native_hardware_config() -> dict:
    """The bundled hardware_native.json (the native roofline's GPU figures), keyed by GPU name."""
    return json.loads((data_dir() / "hardware_native.json").read_text(encoding="utf-8"))


def read_json(path: str, inside: str | None) -> dict[str, Any]:
    """A user's JSON object file (or `inside` a folder); ValueError says what was wrong (a
    model or hardware config is an object: `[1]` or `null` would fail later, far from here)."""
    file = Path(path)
    if inside and file.is_dir():
        file = file / inside
    try:
        data = json.loads(read_text(file, "", "a JSON file"))
    except ScenarioError as exc:
        raise ValueError(exc.problem) from None
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"{file} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
            type(data), "a number")
        raise ValueError(f"{file} holds {kind}, not a JSON object ({{...}})")
    return data
