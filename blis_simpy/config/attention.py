"""Multi-head latent attention (DeepSeek-V2/V3 and their kin), read from config.json.

Such a model caches one compressed latent per token and layer, `kv_lora_rank` values plus a
shared rotary key of `qk_rope_head_dim`, instead of a key and a value per KV head; vLLM keeps
the whole latent on every GPU of a tensor-parallel group (it is not split by head). Decode
runs the absorbed form: each head scores its query against the latent and rotary key
(`kv_lora_rank + qk_rope_head_dim` wide) and reads the latent back as its value
(`kv_lora_rank`), so a (token, context token) pair costs `2 heads (2 kv_lora_rank + rope)`
FLOPs per layer. The projections: the query (through `q_lora_rank` when the config has one),
the latent and rotary key from the hidden state, the latent up to each head's key and value
(`qk_nope_head_dim`, `v_head_dim`), and the output.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple


class LatentAttention(NamedTuple):
    """The latent attention's widths (a NamedTuple: imported with every step model, and built
    at a tenth of a dataclass's cost)."""

    kv_lora_rank: int
    rope: int  # qk_rope_head_dim
    nope: int  # qk_nope_head_dim
    value: int  # v_head_dim
    q_lora_rank: int  # 0: the query is projected directly

    @property
    def cached(self) -> int:
        """Values cached per token and layer (on every GPU of the TP group)."""
        return self.kv_lora_rank + self.rope

    def params(self, hidden: int, heads: int) -> int:
        """One layer's attention parameters."""
        q_head = self.nope + self.rope
        query = (hidden * self.q_lora_rank + self.q_lora_rank * heads * q_head
                 if self.q_lora_rank else hidden * heads * q_head)
        latent = hidden * self.cached
        up = self.kv_lora_rank * heads * (self.nope + self.value)
        return query + latent + up + heads * self.value * hidden

    def flops_per_pair(self, heads: int) -> int:
        """One layer's attention FLOPs per (token, context token) pair, absorbed form."""
        return 2 * heads * (2 * self.kv_lora_rank + self.rope)


def latent_attention(config: Mapping[str, Any]) -> LatentAttention | None:
    """The latent attention of a (text) config, None for per-head keys and values;
    ValueError names a key whose value cannot be used."""
    if not config.get("kv_lora_rank"):
        return None
    dims: dict[str, int] = {}
    for key in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
        value = config.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"model config key {key!r} must be a positive integer for latent "
                             f"attention (kv_lora_rank is set), got {value!r}")
        dims[key] = value
    q_lora = config.get("q_lora_rank") or 0
    if isinstance(q_lora, bool) or not isinstance(q_lora, int) or q_lora < 0:
        raise ValueError(f"model config key 'q_lora_rank' must be a positive integer or null, "
                         f"got {q_lora!r}")
    return LatentAttention(dims["kv_lora_rank"], dims["qk_rope_head_dim"],
                           dims["qk_nope_head_dim"], dims["v_head_dim"], q_lora)
