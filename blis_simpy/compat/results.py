"""The reference's output files, byte for byte: printed metrics and --results-path JSON."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from blis_simpy.compat import gojson
from blis_simpy.core.records import RequestColumns
from blis_simpy.core.units import US_PER_MS, US_PER_S
from blis_simpy.metrics.conventions import RequestLatencies
from blis_simpy.metrics.summary import REFERENCE_KEYS


def reference_summary(summary: dict[str, Any]) -> dict[str, Any]:
    """Our summary without the fields the reference does not print."""
    return {k: v for k, v in summary.items() if k in REFERENCE_KEYS}


def stdout_text(summary: dict[str, Any]) -> str:
    """What the reference prints on stdout for a run: one metrics block per instance (when
    there are several) and one for the cluster, each only if something completed there."""
    text = ""
    for block in [*summary.get("instances", []), summary]:
        if block["completed_requests"] > 0:
            text += ("=== Simulation Metrics ===\n" + gojson.dumps(reference_summary(block))
                     + "\n")
    if summary["completed_requests"] == 0:
        return text
    completed = summary["completed_requests"]
    preemption_rate = summary["preemption_count"] / completed
    hit_rate = summary["cache_hit_rate"]
    if preemption_rate or hit_rate:
        text += ("=== KV Cache Metrics ===\n"
                 f"Preemption Rate: {preemption_rate:.4f}\n"
                 f"Cache Hit Rate: {hit_rate:.4f}\n"
                 "KV Thrashing Rate: 0.0000\n")
    return text


@dataclass(frozen=True)
class ReferenceOutputs:
    """What the reference would have written, kept as arrays and rendered only on demand
    (a large run's results.json is text the benchmark should not pay for)."""

    summary: dict[str, Any]
    ids: list[str]
    handled_by: list[str]
    arrival: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray
    ttft: np.ndarray
    itl_mean: np.ndarray
    e2e: np.ndarray
    scheduling_delay: np.ndarray

    @classmethod
    def of(cls, summary: dict[str, Any], lat: RequestLatencies, req: RequestColumns
           ) -> ReferenceOutputs:
        """Rows for every request that reached an instance (the reference's injected ones),
        named as the reference names them, `request_<n>` (a trace's own ids are ignored)."""
        keep = np.array([bool(i) and not reason for i, reason in
                         zip(req.instance, req.reject_reason, strict=True)], dtype=bool)
        rows = np.flatnonzero(keep)
        return cls(
            summary=summary,
            ids=[f"request_{n}" for n in req.index[keep].tolist()],
            handled_by=[req.instance[i] for i in rows],
            arrival=req.arrival[keep],
            input_len=req.input_len[keep],
            output_len=req.output_len[keep],
            ttft=np.maximum(lat.ttft[keep], 0),
            itl_mean=lat.itl_mean[keep],
            e2e=np.maximum(lat.e2e[keep], 0),
            scheduling_delay=np.maximum(lat.scheduling_delay[keep], 0),
        )

    def files(self) -> dict[str, str]:
        return {"results.json": self.results_json(), "blis_stdout.txt": stdout_text(self.summary)}

    def write(self, folder: Path) -> None:
        """The files into `folder`, results.json a block of rows at a time: a 100K run's
        rows are ~30 MB of text, which the whole file's string held twice over."""
        with open(folder / "results.json", "w") as f:
            f.writelines(self.results_json_parts())
        (folder / "blis_stdout.txt").write_text(stdout_text(self.summary))

    def results_json(self) -> str:
        """The reference's --results-path file: the summary plus one row per injected request,
        ordered by arrival then id. Per-request itl_ms and scheduling_delay_ms hold µs, as the
        reference writes them (Q10)."""
        return "".join(self.results_json_parts())

    def results_json_parts(self, rows_per_part: int = 10_000) -> Iterator[str]:
        """results.json's text in parts, `rows_per_part` request rows in each.

        The rows are rendered from a template (`ROW`), the bytes `gojson.dumps` gives for the
        same dicts at their depth, each field's column formatted at once; `row_dicts` is the
        dict form."""
        head = gojson.dumps(reference_summary(self.summary))
        if not self.ids:
            yield head[:-2] + ',\n  "requests": []\n}\n'
            return
        order = None if self.in_file_order() else self.order()

        def ordered(values: list[Any]) -> list[Any]:
            return values if order is None else [values[i] for i in order]

        def floats(values: np.ndarray) -> list[str]:
            return gojson.format_float_array(values if order is None else values[order])

        quoted = gojson.quote_all
        cells = zip(
            floats(self.arrival / US_PER_S),
            quoted(ordered(self.ids)),
            ordered(self.input_len.tolist()), ordered(self.output_len.tolist()),
            floats(self.ttft / US_PER_MS),
            floats(self.itl_mean.astype(np.float64)),
            floats(self.e2e / US_PER_MS),
            ordered(self.scheduling_delay.tolist()),
            quoted(ordered(self.handled_by)), strict=True)
        rows = map(ROW.__mod__, cells)
        yield f'{head[:-2]},\n  "requests": ['
        yield ",".join(islice(rows, rows_per_part))
        while part := ",".join(islice(rows, rows_per_part)):
            yield "," + part
        yield "\n  ]\n}\n"

    def order(self) -> list[int]:
        """Rows by arrival time, then id."""
        if self.in_file_order():
            return list(range(len(self.ids)))
        arrival = self.arrival.tolist()
        return sorted(range(len(self.ids)), key=lambda i: (arrival[i], self.ids[i]))

    def in_file_order(self) -> bool:
        """Whether the rows are in file order already: arrival times only increase (no two
        rows tie, so the ids do not matter), as they do in a synthetic compat run. Sorting
        100K rows by a Python key cost a tenth of a second."""
        arrival = self.arrival
        return bool((arrival[1:] > arrival[:-1]).all())

    def row_dicts(self) -> list[dict[str, Any]]:
        """The request rows as dicts, in file order (what `ROW` renders)."""
        return [{
            "arrived_at": int(self.arrival[i]) / US_PER_S,
            "requestID": self.ids[i],
            "num_prefill_tokens": int(self.input_len[i]),
            "num_decode_tokens": int(self.output_len[i]),
            "ttft_ms": int(self.ttft[i]) / US_PER_MS,
            "itl_ms": float(self.itl_mean[i]),
            "e2e_ms": int(self.e2e[i]) / US_PER_MS,
            "scheduling_delay_ms": int(self.scheduling_delay[i]),
            "handled_by": self.handled_by[i],
        } for i in self.order()]


# One request of results.json as Go's MarshalIndent lays it out inside the "requests" list.
ROW = """
    {
      "arrived_at": %s,
      "requestID": %s,
      "num_prefill_tokens": %d,
      "num_decode_tokens": %d,
      "ttft_ms": %s,
      "itl_ms": %s,
      "e2e_ms": %s,
      "scheduling_delay_ms": %d,
      "handled_by": %s
    }"""
