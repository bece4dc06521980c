"""The hook through which the serving core reports each finished request, off the protocol.

The metrics recorder implements :class:`InferenceObserver`. Calls happen on the hot path
(batcher worker threads), so implementations must only update in-memory counters: O(1), no I/O,
no blocking locks held for long.
"""

from __future__ import annotations

from typing import Protocol


class InferenceObserver(Protocol):
    """Receives one call per finished request (or cache hit) and one per executed batch."""

    def record_request(
        self,
        model: str,
        version: int,
        *,
        ok: bool,
        rows: int,
        queue_ns: int,
        compute_ns: int,
        total_ns: int,
    ) -> None:
        """One request finished (ok or failed) after waiting ``queue_ns`` and running."""
        ...

    def record_batch(self, model: str, version: int, batch_size: int, compute_ns: int) -> None:
        """One backend execution of ``batch_size`` rows took ``compute_ns``."""
        ...

    def record_cache_hit(self, model: str, version: int, *, rows: int, total_ns: int) -> None:
        """One request was answered from the response cache in ``total_ns`` (it counts as a
        request; no queue, no compute)."""
        ...


class NullObserver:
    """An observer that records nothing (metrics off)."""

    def record_request(self, model: str, version: int, *, ok: bool, rows: int, queue_ns: int,
                       compute_ns: int, total_ns: int) -> None:
        return None

    def record_batch(self, model: str, version: int, batch_size: int, compute_ns: int) -> None:
        return None

    def record_cache_hit(self, model: str, version: int, *, rows: int, total_ns: int) -> None:
        return None
