"""Gateway flow control metrics (summary.json `gateway_queue`), from the requests table and the
rejections channel: per priority band, the requests that queued, were dispatched or refused
(band full, queue full, shed, expired), their wait in the queue and the band's peak depth.

A request's wait is from its admission to its dispatch (its routing time less the routing
latency); one refused on arrival at the queue never waited in it. A request that leaves the
queue another way leaves it when it was shed or expired (the rejection's time), when its client
gave up, or at the run's end.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blis_simpy.config.flow_control import FlowControlConfig, Priorities
from blis_simpy.core.records import Records
from blis_simpy.core.request import RejectCode
from blis_simpy.core.units import US_PER_S
from blis_simpy.metrics.columns import Table
from blis_simpy.metrics.raw import distribution

NEVER_QUEUED = (RejectCode.BAND_FULL, RejectCode.QUEUE_FULL)
REFUSED = (RejectCode.BAND_FULL, RejectCode.QUEUE_FULL, RejectCode.QUEUE_SHED,
           RejectCode.QUEUE_TTL)


def gateway_queue_summary(records: Records, requests: Table, config: FlowControlConfig,
                          routing_latency_us: int) -> dict[str, Any]:
    """The summary's `gateway_queue` section."""
    table = Priorities(config.priorities, config.default_priority)
    left_at = {name: time for time, _, name in records.rejections}
    classes = requests["slo_class"]
    codes = requests["reject_code"]
    admitted = requests.array("admitted_s")
    routed = requests.array("routed_s")
    timed_out = requests.array("timed_out_s")
    names = requests["id"]
    latency_s = routing_latency_us / US_PER_S
    end_s = records.ended_at / US_PER_S
    bands: dict[int, dict[str, Any]] = {
        band: {"classes": sorted({c or "default" for c in classes if table.of(c) == band}),
               "queued": 0, "dispatched": 0, "refused": {}, "waits": [], "changes": []}
        for band in table.bands()}
    for i, cls in enumerate(classes):
        if np.isnan(admitted[i]):
            continue
        band = bands[table.of(cls)]
        code = codes[i]
        if code in REFUSED:
            band["refused"][code] = band["refused"].get(code, 0) + 1
        if code in NEVER_QUEUED:
            continue
        band["queued"] += 1
        if not np.isnan(routed[i]):
            band["dispatched"] += 1
            out = routed[i] - latency_s
            band["waits"].append((round(out * US_PER_S) - round(admitted[i] * US_PER_S))
                                 / 1000)
        elif names[i] in left_at and code in REFUSED:
            out = left_at[names[i]] / US_PER_S
        elif not np.isnan(timed_out[i]):
            out = timed_out[i]
        else:
            out = end_s
        band["changes"] += [(admitted[i], 1), (out, -1)]
    out_bands = {}
    for priority, band in bands.items():
        if not band["classes"] and not band["queued"]:
            continue
        changes = sorted(band.pop("changes"), key=lambda c: (c[0], c[1]))
        depth = np.cumsum([c[1] for c in changes]) if changes else np.zeros(0)
        waits = np.array(band.pop("waits"), dtype=float)
        band["refused"] = dict(sorted(band["refused"].items()))
        out_bands[str(priority)] = {**band, "peak_depth": int(depth.max()) if len(depth) else 0,
                                    **distribution("wait", waits)}
    total: dict[str, int] = {}
    for band in out_bands.values():
        for code, n in band["refused"].items():
            total[code] = total.get(code, 0) + n
    return {"bands": out_bands, "refused": dict(sorted(total.items()))}
