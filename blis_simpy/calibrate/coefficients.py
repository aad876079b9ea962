"""A fit written as coefficient sets (config/step_models.py's format), one per server family:
its host costs, the kernel multipliers of every GPU the data ran on, and what the fit could
and could not identify. On a GPU without data a set uses the mean of the multipliers the data
identified (a GPU's kernels run the same server's code), else the physics prior."""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from blis_simpy.calibrate.fit import PRIORS, Fitted
from blis_simpy.config.step_models import HOST, KERNEL, graph_max_batch, mixes_prefill
from blis_simpy.core.files import replacing

COEFFICIENTS_FILE = "a coefficients file path, e.g. coefficients.json"


def coefficient_set(fitted: Fitted, family: str, source: str, accuracy: str = ""
                    ) -> dict[str, Any]:
    """The JSON object of one family's coefficient set."""
    host = {name: _rounded(fitted.values.get(f"{family}.{name}", PRIORS[name][0]))
            for name in HOST}
    kernel = {}
    for name in KERNEL:
        seen = [fitted.values[f"{name}@{gpu}"] for gpu in fitted.gpus
                if fitted.identified(f"{name}@{gpu}")]
        kernel[name] = _rounded(statistics.fmean(seen)) if seen else PRIORS[name][0]
    gpus = {gpu: {name: _rounded(fitted.values[f"{name}@{gpu}"]) for name in KERNEL}
            for gpu in fitted.gpus}
    columns = [c for c in fitted.columns if "@" in c or c.startswith(f"{family}.")]
    return {
        "family": family,
        "mixes_prefill": mixes_prefill(family),
        "graph_max_batch": graph_max_batch(family),
        "source": source,
        "accuracy": accuracy,
        "coefficients": {**kernel, **host},
        "gpus": gpus,
        "fit": {
            "stages": list(fitted.stages),
            "identified": [c for c in columns if fitted.identified(c)],
            "not_identified": [c for c in columns if not fitted.identified(c)],
            "information": {c: round(fitted.information.get(c, 0.0), 4) for c in columns},
            "prior": {name: {"value": value, "weight": weight}
                      for name, (value, weight) in PRIORS.items()},
        },
    }


def write_sets(fitted: Fitted, out: Path, source: str, families: Sequence[str] | None = None,
               accuracy: Mapping[str, str] | None = None, force: bool = False) -> list[Path]:
    """Write each family's set: `out` itself for a single family, else `out`'s stem plus
    `-<family>.json` beside it."""
    families = list(families or fitted.families)
    written = []
    for family in families:
        path = out if len(families) == 1 else out.with_name(f"{out.stem}-{family}.json")
        data = coefficient_set(fitted, family, source, (accuracy or {}).get(family, ""))
        with replacing(path, "--out", COEFFICIENTS_FILE, force) as temp:
            temp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        written.append(path)
    return written


def identification_table(fitted: Fitted) -> str:
    """One line per fitted column: value, the data's information against the prior's, and
    whether the data identified it."""
    lines = [f"  {'coefficient':<34} {'value':>11} {'data info':>10} {'prior':>7}  identified"]
    for col in fitted.columns:
        weight = fitted.prior_weight[col]
        lines.append(f"  {col:<34} {fitted.values[col]:>11.4g} "
                     f"{fitted.information.get(col, 0.0):>10.3g} {weight ** 2:>7.3g}  "
                     f"{'yes' if fitted.identified(col) else 'no: the prior outweighs the data'}")
    return "\n".join(lines)


# A kernel multiplier scales the time at the GPU's achievable rate (config/hardware.py); below
# the achievable share of the peak it would beat the datasheet's peak itself.
FLOORS = (("weights", "hbm_efficiency", "read the weights faster than its memory bandwidth"),
          ("kv_reads", "hbm_efficiency", "read the KV cache faster than its memory bandwidth"),
          ("gemm", "mfu", "multiply faster than its tensor cores' peak"),
          ("link", "link_efficiency", "move data faster than its link's peak"))


def impossible(fitted: Fitted) -> list[str]:
    """The identified kernel multipliers no run on that GPU can have: the data are not what
    the options said (another GPU, a smaller model, a server answering from a cache)."""
    from blis_simpy.config.hardware import bundled_gpu

    out = []
    for gpu in fitted.gpus:
        spec = bundled_gpu(gpu)
        for name, share, what in FLOORS:
            column = f"{name}@{gpu}"
            value = fitted.values.get(column)
            floor = None if spec is None else getattr(spec, share)
            if value is None or floor is None or not fitted.identified(column) or value >= floor:
                continue
            out.append(f"{column} {value:.4g} is physically impossible: the GPU would {what} "
                       f"({floor / value:.2g}x its peak); check --gpu, --tp and --model "
                       "against what the server ran")
    return out


def _rounded(value: float) -> float:
    return float(f"{value:.5g}")
