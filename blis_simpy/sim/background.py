"""A value computed on a second thread while the caller goes on.

Building a long run's tables is mostly numpy work (sorts, takes, divisions over a million
rows), which lets go of the interpreter lock, so on a machine with two cores one table can be
built beside the others in about the time they take alone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Background(Generic[T]):
    """`work()` running on its own thread from the moment this is made; `result()` waits for
    it and returns its value or raises its error, in the caller's thread. A result nobody asks
    for is dropped (the thread never holds up the interpreter's exit)."""

    def __init__(self, work: Callable[[], T], name: str) -> None:
        self.work = work
        self.value: T | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.value = self.work()
        except BaseException as exc:  # raised again by result(), in the caller's thread
            self.error = exc

    def result(self) -> T:
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]  # set: work() returned
