"""The bundled coefficient catalog (the reference's defaults.yaml) and its lookup rules."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
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
