"""Cross-validation that counts: the coefficients are fitted without a group of stages (one
measured set, or one model), the group is simulated with them, and only those held-out rows
are reported (`blis-simpy validate-real --cv set|model`)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from blis_simpy.calibrate.coefficients import write_sets
from blis_simpy.calibrate.fit import ROUNDS, fit
from blis_simpy.core.errors import ScenarioError
from blis_simpy.validate.harness import FIT_REQUESTS, Latency, Row, validate
from blis_simpy.validate.sets import Stage

GROUPS: dict[str, Callable[[Stage], str]] = {
    "set": lambda stage: stage.set,
    "model": lambda stage: stage.model.lower(),
}


def cross_validate(stages: Sequence[Stage], by: str, seed: int = 42,
                   fit_requests: int | None = FIT_REQUESTS, rounds: int = ROUNDS,
                   requests: int | None = None,
                   progress: Callable[[str], None] | None = None,
                   keep: Path | None = None) -> list[Row]:
    """Every stage, simulated with coefficients fitted on the other groups only (each fold's
    coefficient sets written to `keep`, if given, to be read)."""
    if by not in GROUPS:
        raise ScenarioError("--cv", f"got {by!r}", ", ".join(GROUPS))
    key = GROUPS[by]
    groups = sorted({key(s) for s in stages})
    if len(groups) < 2:
        raise ScenarioError("--cv", f"needs stages of at least two {by}s, got {groups}")
    rows: list[Row] = []
    for group in groups:
        held = [s for s in stages if key(s) == group]
        train = [s for s in stages if key(s) != group]
        if progress:
            progress(f"fitting without {by} {group} ({len(train)} stages)")
        fitted = fit(train, seed=seed, max_requests=fit_requests, rounds=rounds)
        with tempfile.TemporaryDirectory() as folder:
            families = sorted({s.server for s in held})
            where = keep / group.replace("/", "_") if keep is not None else Path(folder)
            where.mkdir(parents=True, exist_ok=True)
            paths = write_sets(fitted, where / "cv.json",
                               f"cross-validation fit without {by} {group}", families,
                               force=True)
            files = dict(zip(families, paths, strict=True))
            if progress:
                progress(f"simulating {by} {group} ({len(held)} held-out stages)")
            rows += validate(held, Latency.files(files), seed=seed, max_requests=requests)
    return rows
