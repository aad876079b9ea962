"""What the autoscaler and the actuation write down: instance lifecycle transitions, scale
decisions and the work lost by handing requests back. Append-only plain tuples, like the
Recorder's channels; the scale metrics and the `scale_events` table are computed from them."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ScaleEvent:
    time: int  # µs
    config: str
    action: str  # up | down
    before: int  # replicas before the action
    after: int
    reason: str
    signals: str  # the aggregate signals the policy saw, as key=value pairs
    trigger: str  # periodic | queue_depth | recent_ttft


@dataclass(slots=True)
class ScaleLog:
    """One run's scaling records. `lifecycle` rows are (time µs, instance id, config id,
    state); `lost` rows are (time µs, instance id, request id, tokens computed and discarded)
    for every request handed back by a draining instance."""

    configs: dict[str, tuple[str, float]] = field(default_factory=dict)  # id -> (model, $/h)
    # id -> (oscillation window µs, whether the config's time-to-ready is added to it)
    windows: dict[str, tuple[int, bool]] = field(default_factory=dict)
    lifecycle: list[tuple[int, str, str, str]] = field(default_factory=list)
    events: list[ScaleEvent] = field(default_factory=list)
    lost: list[tuple[int, str, str, int]] = field(default_factory=list)
    placements: list[tuple[int, str, str, str, str, int, str]] = field(default_factory=list)
