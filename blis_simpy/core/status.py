"""The live progress line of the long commands (`run --progress`, `sweep`), drawn by rich.

rich (which typer brings) fits the line to the terminal's width, draws the bar and redraws in
place; the commands say what the line holds. It is imported at the first draw, not with the
command: `run` draws after a second of running, so a short or `--quiet` run never loads it
(150 M instructions, 9 % of a whole 100-request quickstart run: docs/hand-rolled.md).
"""

from __future__ import annotations

from typing import Any


class StatusLine:
    """A bar and a line of text on stderr, redrawn on every `show`; `note` prints a line that
    stays above it. Nothing is drawn on a non-terminal stderr but the notes (a log file gets
    the lines that matter, not a redraw per update)."""

    def __init__(self) -> None:
        self.progress: Any = None
        self.task: Any = None

    def start(self) -> Any:
        if self.progress is None:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn

            self.progress = Progress(BarColumn(bar_width=24), TextColumn("{task.description}",
                                                                         markup=False),
                                     console=Console(stderr=True), auto_refresh=False,
                                     transient=True)
            self.progress.start()
            self.task = self.progress.add_task("", total=None)
        return self.progress

    def show(self, text: str, done: float | None = None, total: float | None = None) -> None:
        """The line now: `text`, and a bar at `done` of `total` (pulsing without a total)."""
        progress = self.start()
        progress.update(self.task, description=text, completed=done or 0, total=total)
        progress.refresh()

    def note(self, text: str) -> None:
        self.start().console.print(text, markup=False, highlight=False, soft_wrap=True)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
