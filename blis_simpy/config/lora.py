"""LoRA adapters as data: how many adapters an instance holds in GPU memory and what loading
one costs (`engine.lora`), and which adapters a tenant's requests name (`adapters` of a
workload tenant). The slots and their eviction rule are `engine/adapters.py`;
docs/guides/lora.md is the user's guide.
"""

from __future__ import annotations

from dataclasses import dataclass

from blis_simpy.core.schema import spec

MAX_SLOTS = 4096  # adapters resident at once (vLLM's max_loras is usually 1-32)
MAX_ADAPTERS = 100_000  # adapters one tenant draws from
MAX_RANK = 4096
MAX_LOAD_MS = 3_600_000.0  # one adapter load: an hour is no longer a model of anything


@dataclass(frozen=True, slots=True)
class LoraConfig:
    slots: int = spec(help="adapters an instance holds in GPU memory at once (vLLM's "
                      "--max-loras, the reference head's --lora-adapter-capacity); a request "
                      "whose adapter is not resident loads it into a free slot or the least "
                      "recently used one no running request holds", ge=1, le=MAX_SLOTS)
    load_ms: float = spec(1.5, help="fixed time of one adapter load (ms), charged to the step "
                          "that admits the request needing it (the reference head's default)",
                          ge=0, le=MAX_LOAD_MS)
    load_ms_per_rank: float = spec(0.15, help="... plus this per unit of the adapter's rank "
                                   "(ms): its weights' copy from host memory (an 8B model's "
                                   "adapter on every linear layer, ~3.7 MB per rank unit, over "
                                   "PCIe at ~25 GB/s)", ge=0, le=MAX_LOAD_MS)

    def load_us(self, rank: int) -> int:
        """One load of an adapter of this rank (µs)."""
        return round((self.load_ms + self.load_ms_per_rank * rank) * 1000)


@dataclass(frozen=True, slots=True)
class AdapterUse:
    count: int = spec(help="adapters this tenant's requests name: <tenant>-lora-0 ... "
                      "<tenant>-lora-<count-1>", ge=1, le=MAX_ADAPTERS)
    zipf: float = spec(1.0, help="popularity: adapter k (from 0) is drawn with weight "
                       "1/(k+1)^zipf; 0: all equally", ge=0, le=10)
    rank: int = spec(16, help="LoRA rank of these adapters (engine.lora.load_ms_per_rank)",
                     ge=1, le=MAX_RANK)
    fraction: float = spec(1.0, help="share of the tenant's requests that name an adapter; "
                           "the rest use the base model", ge=0, le=1)

    def names(self, tenant: str) -> list[str]:
        return [adapter_name(tenant, k) for k in range(self.count)]

    def weights(self) -> list[float]:
        return [1.0 / (k + 1) ** self.zipf for k in range(self.count)]


def adapter_name(tenant: str, k: int) -> str:
    return f"{tenant}-lora-{k}"
