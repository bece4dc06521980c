"""A small adapter so the build can report steps to a callback or to a rich Progress."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ProgressCallback = Callable[[str, int, int], None]


class Steps:
    """Counts build steps; forwards ``(description, done, total)`` to the sink.

    The sink is None, a callable ``f(description, done, total)``, or a ``rich.progress.Progress``.
    """

    def __init__(self, sink: Any, total: int, label: str = "edge-pack build") -> None:
        self.sink = sink
        self.total = total
        self.done = 0
        self._task = None
        if sink is not None and hasattr(sink, "add_task"):
            self._task = sink.add_task(label, total=total)

    def start(self, description: str) -> None:
        """Show what is running now."""
        self._emit(description)

    def advance(self, description: str) -> None:
        """Mark one step finished."""
        self.done += 1
        self._emit(description, advance=1)

    def _emit(self, description: str, advance: int = 0) -> None:
        if self.sink is None:
            return
        if self._task is not None:
            self.sink.update(self._task, description=description, advance=advance)
        else:
            self.sink(description, self.done, self.total)
