"""One agent-wide budget for the memory that inputs sent as values (not as raw bytes) take.

A tensor sent as gRPC typed contents (``int64_contents``, ``bytes_contents``, ...) or as HTTP
JSON ``data`` costs many times its wire size once parsed and converted (a packed 1-byte varint
becomes an 8-byte value in the parsed message, then an array; a BYTES element becomes a Python
object). Both front ends charge what such a request will take, before taking it, to one
:class:`TypedBudget` (``[agent] max_typed_input_mib``); a request beyond it is refused with
RESOURCE_EXHAUSTED / 429 (retryable) and nothing is decoded. Raw contents, binary data and
shared memory are not charged: they cost their own size.

A charge is held by the thread that handles the request and given back when that call ends
(:meth:`HeldBudget.release_held`), or handed to a stream's answer (:meth:`HeldBudget.take_held`).
HTTP charges on its handling thread; gRPC's deserializer runs on the server's polling thread,
so it reserves (:meth:`HeldBudget.reserve`) and the handler's thread takes the reservation up
(:meth:`HeldBudget.hold`; :class:`~edge_agent.frontends.grpc.received.Received`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from edge_agent.errors import QueueFullError
from edge_agent.frontends.common.undecodable import RefusedUnread

KEY = "agent.max_typed_input_mib"
DEFAULT_MAX_TYPED_INPUT_BYTES = 256 * 1024 * 1024
BYTES_OBJECT = 56
"""Bytes per BYTES element converted, besides its data (a pointer and a bytes object)."""
SEND_RAW = ("send large tensors as raw_input_contents (gRPC) or binary data (HTTP), which cost "
            "only their size")


class HeldBudget:
    """Bytes in flight, at most ``max_bytes``, each charge held by the thread handling its call
    (thread-safe). Subclasses word the refusal (:meth:`_refusal`)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._used = 0
        self._local = threading.local()

    @property
    def used(self) -> int:
        """Bytes charged now."""
        return self._used

    def reserve(self, nbytes: int, what: str) -> None:
        """Take ``nbytes`` for ``what``, held by no thread yet (:meth:`hold` or :meth:`release`
        it), or raise :class:`QueueFullError` naming the setting (nothing is taken then)."""
        if nbytes <= 0:
            return
        with self._lock:
            admit = self._used + nbytes <= self.max_bytes
            if admit:
                self._used += nbytes
        if not admit:
            raise self._refusal(nbytes, what)

    def hold(self, nbytes: int) -> None:
        """The calling thread's call now holds ``nbytes`` taken with :meth:`reserve`."""
        self._local.held = getattr(self._local, "held", 0) + nbytes

    def charge(self, nbytes: int, what: str) -> None:
        """Charge ``nbytes`` for ``what`` to the calling thread's call, or raise
        :class:`QueueFullError` naming the setting (nothing is charged then)."""
        self.reserve(nbytes, what)
        if nbytes > 0:
            self.hold(nbytes)

    def _refusal(self, nbytes: int, what: str) -> QueueFullError:
        return QueueFullError(f"{what} would take {nbytes} bytes, more than the "
                              f"{self.max_bytes} bytes in flight allowed; retry shortly")

    def take_held(self) -> int:
        """What the calling thread holds, now the caller's to :meth:`release` (a stream hands
        it to the request's answer)."""
        held: int = getattr(self._local, "held", 0)
        self._local.held = 0
        return held

    def release_held(self) -> None:
        """Give back what the calling thread holds (its call ended)."""
        self.release(self.take_held())

    def release(self, nbytes: int) -> None:
        """Give back ``nbytes`` taken with :meth:`take_held` or :meth:`reserve`."""
        if nbytes:
            with self._lock:
                self._used -= nbytes

    @contextmanager
    def held(self) -> Iterator[None]:
        """Charges made inside are given back on leaving."""
        self.release_held()
        try:
            yield
        finally:
            self.release_held()


class TypedBudget(HeldBudget):
    """Bytes that typed-contents / JSON-data inputs in flight may take, at most ``max_bytes``
    (thread-safe)."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_TYPED_INPUT_BYTES) -> None:
        super().__init__(max_bytes)

    def _refusal(self, nbytes: int, what: str) -> QueueFullError:
        mib = self.max_bytes / (1 << 20)
        if nbytes > self.max_bytes:
            return QueueFullError(
                f"{what} would take about {nbytes / (1 << 20):.0f} MiB in memory decoded, more "
                f"than the agent's {mib:g} MiB for typed inputs in flight ({KEY}); {SEND_RAW}")
        return QueueFullError(
            f"typed inputs in flight already take close to the agent's {mib:g} MiB ({KEY}); "
            f"retry shortly, or {SEND_RAW}")


class OverBudget(RefusedUnread):
    """What the gRPC deserializer hands on, undecoded, for a request the budget refused: the
    call gets the refusal (RESOURCE_EXHAUSTED) instead of INVALID_ARGUMENT."""
