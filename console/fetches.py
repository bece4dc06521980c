"""Background fetches of a view and how they are doing: one that fails or stalls is shown with
its age (the views retry it), so data that stopped coming never passes for data that is live."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from console.fleet import format_duration

STALL_S = 5.0  # a fetch without an answer for longer is shown as stalled


@dataclass
class FetchState:
    """The last run of one fetch."""

    started_at: float | None = None  # running since (None: not running)
    ok_at: float | None = None  # the last answer
    failed_at: float | None = None  # the last failure (cleared by an answer)
    error: str = ""
    tries: int = 0  # failures in a row


class Fetches:
    """What each named fetch of a view is doing; workers report, the view shows
    :meth:`problems` (thread-safe)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._states: dict[str, FetchState] = {}

    def started(self, name: str) -> None:
        """``name`` asked the agent."""
        with self._lock:
            self._states.setdefault(name, FetchState()).started_at = self.clock()

    def answered(self, name: str) -> None:
        """``name`` got its answer."""
        with self._lock:
            s = self._states.setdefault(name, FetchState())
            s.started_at, s.ok_at, s.failed_at, s.error, s.tries = None, self.clock(), None, "", 0

    def failed(self, name: str, error: str) -> None:
        """``name`` failed with ``error`` (the caller retries)."""
        with self._lock:
            s = self._states.setdefault(name, FetchState())
            s.started_at, s.failed_at, s.error = None, self.clock(), error
            s.tries += 1

    def forget(self, name: str) -> None:
        """``name`` is no longer wanted (e.g. another plot range was chosen)."""
        with self._lock:
            self._states.pop(name, None)

    def state(self, name: str) -> FetchState | None:
        """A copy of ``name``'s state."""
        with self._lock:
            s = self._states.get(name)
            return None if s is None else FetchState(**vars(s))

    def problems(self, stall_s: float = STALL_S) -> list[str]:
        """One line per fetch that failed or has waited longer than ``stall_s``."""
        now = self.clock()
        out = []
        with self._lock:
            items = sorted(self._states.items())
        for name, s in items:
            if s.started_at is not None and now - s.started_at > stall_s:
                line = f"{name}: no answer for {format_duration(now - s.started_at)}"
                if s.failed_at is not None:
                    line += f" (try {s.tries + 1}; failed before: {s.error})"
                out.append(line)
            elif s.started_at is None and s.failed_at is not None:
                out.append(f"{name}: failed {format_duration(now - s.failed_at)} ago "
                           f"({s.tries}x): {s.error}; retrying")
        return out
