"""The hooks through which the serving core reports each finished request, off the protocol.

The metrics recorder implements :class:`InferenceObserver`. Calls happen on the hot path
(batcher worker threads), so implementations must only update in-memory counters: O(1), no I/O,
no blocking locks held for long.

A traced request carries a :class:`RequestTrace` (``InferRequest.trace``, made at the edge by
``edge_agent.tracing``): the batcher hands it the request's timestamps, and a model that calls
other models (pipeline steps, ``ctx.infer``) makes each nested call under a child of it. The
core knows nothing of how a trace is exported.
"""

from __future__ import annotations

import threading
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


class RequestTrace(Protocol):
    """One traced request as the core sees it: it only reports times (``time.monotonic_ns``)."""

    def executed(self, *, enqueued_ns: int, start_ns: int, compute_start_ns: int,
                 compute_end_ns: int, end_ns: int, batch_size: int, ok: bool) -> None:
        """The request waited from ``enqueued_ns`` to ``start_ns`` (its batch formed, of
        ``batch_size`` rows), ran from ``compute_start_ns`` to ``compute_end_ns`` and was
        answered at ``end_ns``. Called on the hot path: no I/O."""
        ...

    def nested(self, model: str) -> RequestTrace:
        """A child trace for a call this request's model makes to ``model``."""
        ...

    def finished(self, *, ok: bool) -> None:
        """The nested call this trace was made for (:meth:`nested`) returned."""
        ...


_local = threading.local()


def current_trace() -> RequestTrace | None:
    """The trace of the request whose model runs on this thread now (None: untraced)."""
    return getattr(_local, "trace", None)


def swap_trace(trace: RequestTrace | None) -> RequestTrace | None:
    """Make ``trace`` this thread's current trace; returns the one it replaces."""
    previous = getattr(_local, "trace", None)
    _local.trace = trace
    return previous
