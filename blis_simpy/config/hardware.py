"""The GPU figures every native step-time model reads (data/hardware_native.json), one format
for all of them: the native roofline, the physical model and the KV cache's sizing from memory.

An entry holds datasheet figures (dense BF16 tensor peak, memory bandwidth and capacity, the
link the tensor-parallel all-reduces use) and the achievable share of each that public
microbenchmarks reach (the physics priors the physical model's coefficients multiply). Where
each number comes from is in docs/roofline.md. `compat: blis` reads the reference's own format
(data/hardware_config.json) instead, as the reference does.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, fields
from typing import Any

from blis_simpy.config.catalog import bundled_native_hardware_config, read_json

# Keys of the first native format, renamed when PCIe cards joined: an old file says which.
RENAMED = {"nvlink_gbs": "link_gbs", "nvlink_efficiency": "link_efficiency"}


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU's entry of hardware_native.json."""

    tflops_peak: float  # dense BF16 tensor-core peak (FP32 accumulate), TFLOP/s
    hbm_tbs: float  # memory bandwidth peak, TB/s
    memory_mib: float  # memory as the driver reports it (nvidia-smi "Total"), MiB
    mfu: float  # achievable share of tflops_peak on large GEMMs
    hbm_efficiency: float  # achievable share of hbm_tbs on streaming reads
    link_gbs: float  # the all-reduce link per GPU, one direction, GB/s (NVLink or PCIe)
    link_efficiency: float  # achievable share of link_gbs in a ring all-reduce
    allreduce_latency_us: float  # fixed cost of one small all-reduce (2-8 GPUs)
    step_overhead_us: float  # the roofline's per-step CPU and launch overhead

    @classmethod
    def from_entry(cls, entry: Any, gpu: str) -> GpuSpec:
        """Validate one entry; ValueError names the GPU and the key."""
        if not isinstance(entry, dict):
            raise ValueError(f"native hardware config for {gpu!r}: expected a mapping of "
                             f"figures, got {type(entry).__name__}")
        for old, new in RENAMED.items():
            if old in entry and new not in entry:
                raise ValueError(f"native hardware config for {gpu!r}: key {old!r} is now "
                                 f"{new!r} (the link may be NVLink or PCIe)")
        values = {}
        keys = ", ".join(f.name for f in fields(cls))
        for field in fields(cls):
            value = entry.get(field.name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not (
                    math.isfinite(value) and value >= 0):
                raise ValueError(f"native hardware config for {gpu!r}: {field.name!r} must be "
                                 f"a number >= 0, got {value!r} (an entry has: {keys})")
            values[field.name] = float(value)
        spec = cls(**values)
        for name in ("tflops_peak", "hbm_tbs", "memory_mib", "mfu", "hbm_efficiency",
                     "link_gbs", "link_efficiency"):
            if getattr(spec, name) <= 0:
                raise ValueError(f"native hardware config for {gpu!r}: {name!r} must be > 0")
        for name in ("mfu", "hbm_efficiency", "link_efficiency"):
            if getattr(spec, name) > 1:
                raise ValueError(f"native hardware config for {gpu!r}: {name!r} is a share "
                                 f"of the peak, at most 1, got {getattr(spec, name)}")
        return spec

    @property
    def flops_per_s(self) -> float:
        """What large GEMMs reach (the peak times the achievable share)."""
        return self.tflops_peak * 1e12 * self.mfu

    @property
    def bytes_per_s(self) -> float:
        """What streaming reads reach from memory."""
        return self.hbm_tbs * 1e12 * self.hbm_efficiency

    @property
    def link_bytes_per_s(self) -> float:
        return self.link_gbs * 1e9 * self.link_efficiency


def names(config: dict[str, Any]) -> dict[str, str]:
    """Every name a GPU is known by (its key and its `aliases`), case-folded, to its key."""
    out: dict[str, str] = {}
    for key, entry in config.items():
        out[key.casefold()] = key
        aliases = entry.get("aliases", []) if isinstance(entry, dict) else []
        for alias in aliases if isinstance(aliases, list) else []:
            if isinstance(alias, str):
                out.setdefault(alias.casefold(), key)
    return out


def gpu_spec(config: dict[str, Any], gpu: str) -> GpuSpec:
    """Pick `gpu` (its name or an alias, any case) out of a whole hardware_native.json."""
    if not isinstance(config, dict):
        raise ValueError("the native hardware config must be a mapping of GPU name to figures")
    key = names(config).get(gpu.casefold())
    if key is None:
        raise ValueError(f"unknown GPU {gpu!r} in the native hardware config; known GPUs: "
                         f"{', '.join(sorted(config))}")
    return GpuSpec.from_entry(config[key], key)


@functools.cache
def bundled() -> dict[str, Any]:
    """The bundled hardware_native.json (read once per process: read-only data)."""
    return bundled_native_hardware_config()


def hardware(path: str | None) -> dict[str, Any]:
    """A scenario's `latency.hardware_config` file (native format), else the bundled one."""
    return read_json(path, None) if path else bundled()


def bundled_gpu(gpu: str) -> GpuSpec | None:
    """A bundled GPU's figures, or None when the name is not bundled."""
    try:
        return gpu_spec(bundled(), gpu)
    except ValueError:
        return None
