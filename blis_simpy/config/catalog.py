"""The bundled data: the coefficient catalog (the reference's defaults.yaml) and its lookup rules,
the HuggingFace model configs and the GPU figures the roofline model reads, and the reading of a
user's own JSON files in their place."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Any

import yaml

DEFAULT_KV_BLOCKS = 1_000_000

Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    model: str
    gpu: str
    tp: int
    vllm_version: str
    alpha: tuple[float, ...]
    beta: tuple[float, ...]
    kv_blocks: int


@functools.cache
def catalog() -> dict[str, Any]:
    """The parsed defaults.yaml; parsed once per process because it is read-only data."""
    text = resources.files("blis_simpy.data").joinpath("defaults.yaml").read_text()
    return yaml.load(text, Loader=Loader)


def model_defaults(model: str) -> dict[str, Any]:
    return catalog()["defaults"].get(model.lower(), {})


def workload_preset(name: str) -> dict[str, Any] | None:
    return catalog()["workloads"].get(name)


def find(model: str, gpu: str, tp: int, vllm_version: str) -> CatalogEntry | None:
    """The first entry with equal (id, tp, GPU, vLLM version), as the reference picks it."""
    for row in catalog()["models"]:
        if (row.get("id"), row.get("tensor_parallelism"), row.get("GPU"),
                row.get("vllm_version")) == (model.lower(), tp, gpu, vllm_version):
            return CatalogEntry(
                model=row["id"], gpu=row["GPU"], tp=row["tensor_parallelism"],
                vllm_version=row["vllm_version"],
                alpha=tuple(float(x) for x in row.get("alpha_coeffs") or ()),
                beta=tuple(float(x) for x in row.get("beta_coeffs") or ()),
                kv_blocks=int(row.get("total_kv_blocks") or 0),
            )
    return None


def models() -> list[str]:
    """Every model id that has coefficients."""
    return sorted({str(r["id"]) for r in catalog()["models"]})


def available(model: str) -> list[str]:
    """Human-readable (gpu, tp, vllm) combinations the catalog has for `model`."""
    rows = [r for r in catalog()["models"] if r.get("id") == model.lower()]
    return sorted(
        f"{r['GPU']} tp={r['tensor_parallelism']} {r['vllm_version']}" for r in rows
    )


def _data_dir() -> Traversable:
    """The bundled data directory, resolved through the package so it works from a wheel too."""
    return resources.files("blis_simpy.data")


def bundled_model_config(model: str) -> dict:
    """config.json of a bundled model, looked up by the model name's last path part, lower-cased."""
    configs = _data_dir() / "model_configs"
    name = model.rsplit("/", 1)[-1].lower()
    available = sorted(p.name for p in configs.iterdir() if (p / "config.json").is_file())
    if name not in available:
        raise ValueError(
            f"no bundled model config for {model!r} (looked for {name!r}); "
            f"available: {', '.join(available)}"
        )
    return json.loads((configs / name / "config.json").read_text(encoding="utf-8"))


def bundled_hardware_config() -> dict:
    """The bundled hardware_config.json, keyed by GPU name."""
    return json.loads((_data_dir() / "hardware_config.json").read_text(encoding="utf-8"))


def read_json(path: str, inside: str | None) -> dict[str, Any]:
    """A user's JSON file (or `inside` a folder); ValueError says what was wrong."""
    file = Path(path)
    if inside and file.is_dir():
        file = file / inside
    try:
        return json.loads(file.read_text())
    except OSError as exc:
        raise ValueError(f"cannot read {file}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{file} is not valid JSON: {exc}") from None
