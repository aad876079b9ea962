"""KV tiers below the GPU (`engine.kv_tiers`): a CPU tier, an optional storage tier, the links
that move blocks between them and the GPU, and how blocks get there (engine/kv/tiered.py).

A tier's size is in blocks of the engine's `block_size`. A link's speed is either given in
blocks per second or derived from a bandwidth in GB/s and the bytes one KV block takes on one
GPU (K and V, every layer, the KV heads that GPU holds under tensor parallelism): each GPU of a
TP group moves its own shard over its own link at the same time. `resolve()` writes the derived
`blocks_per_s` into the resolved scenario. `cpu_blocks: 0` (the default) is no tier at all:
the run is exactly the run without this section.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Literal

from blis_simpy.config.memory import DTYPE_BYTES, latent_or_none, positive_int
from blis_simpy.core.errors import ScenarioError
from blis_simpy.core.schema import join, spec
from blis_simpy.core.units import MAX_FLOAT, MAX_KV_BLOCKS

GB = 1e9


@dataclass(frozen=True, slots=True)
class KVLinkConfig:
    """One direction-agnostic link between the GPU and a lower tier (PCIe for the CPU, a
    disk or network path for storage). Transfers on it queue, one after the other."""

    gb_per_s: float = spec(25.0, help="bandwidth per GPU (GB/s); ignored when blocks_per_s is "
                           "given", gt=0, le=MAX_FLOAT)
    blocks_per_s: float | None = spec(
        None, help="KV blocks moved per second; default: gb_per_s over the bytes of one block "
        "on one GPU (from the model config and TP)", gt=0, le=MAX_FLOAT)
    base_latency_us: int = spec(0, help="fixed cost of every transfer (µs)", ge=0, le=10**9)


@dataclass(frozen=True, slots=True)
class KVTiersConfig:
    cpu_blocks: int = spec(0, help="CPU KV tier per instance, in blocks; 0 = no lower tiers",
                           ge=0, le=MAX_KV_BLOCKS)
    storage_blocks: int = spec(0, help="storage tier below the CPU (what the CPU tier evicts "
                               "goes there), in blocks; 0 = none", ge=0, le=MAX_KV_BLOCKS)
    offload: Literal["mirror", "threshold", "lazy"] = spec(
        "mirror", help="mirror (eager): every full hashed block is copied to the CPU tier as it "
        "is computed (vLLM v1 OffloadingConnector / LMCache); threshold: a cached block is "
        "copied when the GPU evicts it while GPU use is at or above `threshold`; lazy: a "
        "cached block is copied when the GPU evicts it, whatever its use")
    threshold: float = spec(0.9, help="threshold offload: GPU blocks used / total at which "
                            "evicted blocks are kept on the CPU", ge=0, le=1)
    eviction: Literal["lru", "fifo", "lfu", "priority"] = spec(
        "lru", help="which block a full lower tier drops: lru (least recently stored or "
        "reloaded), fifo (first stored), lfu (stored or reloaded the fewest times since it "
        "came) or priority (its last user, the request that released it on the GPU or "
        "reloaded it, had the lowest priority); ties go to the least recently used")
    cpu_link: KVLinkConfig = spec(factory=KVLinkConfig, help="GPU <-> CPU link")
    storage_link: KVLinkConfig = spec(
        factory=lambda: KVLinkConfig(gb_per_s=5.0, base_latency_us=100),
        help="GPU/CPU <-> storage link")
    thrash_window_s: float = spec(
        1.0, help="a reload of a block the GPU evicted less than this long ago is a thrash; "
        "thrash_anomaly_count of them within it on one instance make a kv_thrashing anomaly",
        gt=0, le=1e6)
    thrash_anomaly_count: int = spec(10, help="thrashes within thrash_window_s that make a "
                                     "kv_thrashing anomaly", ge=2)

    @property
    def enabled(self) -> bool:
        return self.cpu_blocks > 0

    def validate(self, path: str) -> None:
        if self.storage_blocks and not self.cpu_blocks:
            raise ScenarioError(join(path, "storage_blocks"), "a storage tier sits below the "
                                "CPU tier, which has 0 blocks", "0, or cpu_blocks > 0 too")


def block_bytes(model_config: dict[str, Any], tp: int, block_size: int) -> int | None:
    """Bytes one KV block takes on one GPU of the TP group; None if config.json lacks a
    dimension or the dtype."""
    text = model_config.get("text_config")
    config = {**model_config, **text} if isinstance(text, dict) else model_config
    layers, hidden = positive_int(config, "num_hidden_layers"), positive_int(config, "hidden_size")
    heads = positive_int(config, "num_attention_heads")
    dtype = config.get("torch_dtype")
    size = DTYPE_BYTES.get(dtype) if isinstance(dtype, str) else None
    if not (layers and hidden and heads and size):
        return None
    latent = latent_or_none(config)
    if latent is not None:  # every GPU of the group holds the whole latent
        return layers * latent.cached * size * block_size
    kv_heads = positive_int(config, "num_key_value_heads") or heads
    head_dim = positive_int(config, "head_dim") or hidden // heads
    return 2 * layers * math.ceil(kv_heads / tp) * head_dim * size * block_size


def resolve_tiers(tiers: KVTiersConfig, model_config: dict[str, Any] | None, tp: int,
                  block_size: int, path: str) -> KVTiersConfig:
    """Each link's blocks per second made explicit (only when the tiers are on)."""
    if not tiers.enabled:
        return tiers
    size = block_bytes(model_config, tp, block_size) if model_config else None
    storage_link = tiers.storage_link
    if tiers.storage_blocks:
        storage_link = resolve_link(storage_link, size, join(path, "storage_link"))
    return replace(tiers, cpu_link=resolve_link(tiers.cpu_link, size, join(path, "cpu_link")),
                   storage_link=storage_link)


def resolve_link(link: KVLinkConfig, block_size_bytes: int | None, path: str) -> KVLinkConfig:
    if link.blocks_per_s is not None:
        return link
    if block_size_bytes is None:
        raise ScenarioError(join(path, "blocks_per_s"), "the model's config.json is not "
                            "available to size a KV block in bytes",
                            "blocks_per_s given explicitly")
    return replace(link, blocks_per_s=link.gb_per_s * GB / block_size_bytes)
