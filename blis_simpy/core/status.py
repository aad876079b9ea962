"""The live progress line of the long commands (`run --progress`, `sweep`), drawn by rich.

rich (which typer brings) fits the line to the terminal's width, draws the bar and redraws in
place; the commands say what the line holds. It is imported at the first draw, not with the
command: `run` draws after a second of running, so a short or `--quiet` run never loads it
(150 M instructions, 9 % of a whole 100-request quickstart run: docs/hand-rolled.md).
"""

from __future__ import annotations

import time
from typing import Any


class StatusLine:
    """A bar and a line of text on stderr, redrawn on every `show`; `note` prints a line that
    stays above it. On a non-terminal stderr (a log file) nothing is redrawn: the line is
    printed as it is at most once every `every_s` seconds, the first time at once, so a log
    shows a run that is still going (or hung), and the notes stay."""

    EVERY_S = 10.0

    def __init__(self, every_s: float = EVERY_S) -> None:
        self.progress: Any = None  # the live bar, on a terminal only
        self.task: Any = None
        self.plain: Any = None  # the console the lines go to
        self.every_s = every_s
        self.printed: float | None = None  # when the last line went to a non-terminal

    def start(self) -> Any:
        if self.progress is None:
            from rich.progress import BarColumn, Progress, TextColumn

            self.progress = Progress(BarColumn(bar_width=24), TextColumn("{task.description}",
                                                                         markup=False),
                                     console=self.console(), auto_refresh=False,
                                     transient=True)
            self.progress.start()
            self.task = self.progress.add_task("", total=None)
        return self.progress

    def console(self) -> Any:
        if self.plain is None:
            from rich.console import Console

            self.plain = Console(stderr=True)
        return self.plain

    def show(self, text: str, done: float | None = None, total: float | None = None) -> None:
        """The line now: `text`, and a bar at `done` of `total` (pulsing without a total)."""
        if not self.console().is_terminal:
            now = time.monotonic()
            if self.printed is None or now - self.printed >= self.every_s:
                self.printed = now
                self.note(text)
            return
        progress = self.start()
        progress.update(self.task, description=text, completed=done or 0, total=total)
        progress.refresh()

    def note(self, text: str) -> None:
        console = self.console() if self.progress is None else self.progress.console
        console.print(text, markup=False, highlight=False, soft_wrap=True)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
