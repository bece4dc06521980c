"""Recent latencies per model version and load/unload totals: what Prometheus summaries read.

Both are cheap where they are written: :class:`LatencyWindow` keeps the last
:data:`WINDOW` requests in fixed rings (a few stores per request, under the batcher's lock);
:class:`LifecycleTally` adds to a dict once per load or unload.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

WINDOW = 1024
"""Requests kept per model version for the latency quantiles (a power of two)."""
_MASK = WINDOW - 1


class _Queued(Protocol):
    @property
    def enqueued(self) -> int: ...


class LatencyWindow:
    """The request, queue and compute-infer durations (ns) of a version's last WINDOW
    successful requests. Not thread-safe: the batcher writes and reads it under its lock."""

    __slots__ = ("infer", "n", "queue", "request")

    def __init__(self) -> None:
        self.request = [0] * WINDOW
        self.queue = [0] * WINDOW
        self.infer = [0] * WINDOW
        self.n = 0

    def add(self, batch: Sequence[_Queued], t0: int, infer_ns: int, t3: int) -> None:
        """One execution of ``batch`` that started (left the queue) at ``t0`` and ended at
        ``t3`` (monotonic ns), its model running ``infer_ns``."""
        n = self.n
        for p in batch:
            i = n & _MASK
            self.queue[i] = t0 - p.enqueued
            self.request[i] = t3 - p.enqueued
            self.infer[i] = infer_ns
            n += 1
        self.n = n

    def samples(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """(request, queue, compute infer) durations kept, in no particular order."""
        k = min(self.n, WINDOW)
        return tuple(self.request[:k]), tuple(self.queue[:k]), tuple(self.infer[:k])


def quantile(ordered: Sequence[int], q: float) -> int:
    """The ``q`` quantile (nearest rank) of ``ordered`` (sorted, not empty)."""
    return ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.5) - 1))]


@dataclass(frozen=True, slots=True)
class LifecycleTotal:
    """Loads or unloads of one model for one reason, and the seconds they took."""

    model: str
    event: str  # "load" or "unload"
    reason: str
    count: int
    seconds: float


class LifecycleTally:
    """Counts loads and unloads per model and reason (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals: dict[tuple[str, str, str], tuple[int, float]] = {}

    def record(self, model: str, event: str, reason: str, seconds: float) -> None:
        key = (model, event, reason)
        with self._lock:
            count, total = self._totals.get(key, (0, 0.0))
            self._totals[key] = (count + 1, total + max(0.0, seconds))

    def totals(self) -> list[LifecycleTotal]:
        with self._lock:
            return [LifecycleTotal(m, e, r, c, s)
                    for (m, e, r), (c, s) in sorted(self._totals.items())]
