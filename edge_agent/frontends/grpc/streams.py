"""Inference streams that cannot hold serving capacity: caps, a first-message and an idle
timeout.

ModelStreamInfer runs non-blocking (:func:`~edge_agent.grpc_internals.non_blocking`):
the handler registers a :class:`StreamSession` and returns, so a stream holds no handler thread
(where grpcio lacks that hook, one thread of the stream pool, sized to the cap, per stream).
Each open stream has
one reader thread (blocked in gRPC while the caller sends nothing) and, once it has sent a
request, one sender thread. :class:`StreamSessions` caps open streams in total and per peer
(the caller's address without its port: every local TCP caller is one peer, as is the Unix
socket) and one reaper thread closes with DEADLINE_EXCEEDED the streams that sent nothing
within ``first_message_s`` of opening, or that were idle (no request, no answer owed) for
``idle_s``.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from edge_agent.errors import QueueFullError

log = logging.getLogger(__name__)

END = object()
"""Queued by the reader when the caller half-closed or went away."""

Send = Callable[[Any], None]


@dataclass(frozen=True)
class StreamLimits:
    """Caps and timeouts of ModelStreamInfer streams (``[grpc]`` keys of the same names)."""

    max_streams: int = 64
    max_streams_per_peer: int = 16
    stream_first_message_s: float = 10.0
    stream_idle_s: float = 60.0


def peer_key(peer: str) -> str:
    """The caller's address without its port ("ipv4:127.0.0.1:5000" -> "ipv4:127.0.0.1")."""
    if peer.startswith(("ipv4:", "ipv6:")):
        return peer.rpartition(":")[0]
    return peer.split(":", 1)[0] or "unknown"


class StreamSession:
    """One open stream: its send callback, activity, and the queue its sender drains."""

    def __init__(self, peer: str, context: grpc.ServicerContext, send: Send) -> None:
        self.peer = peer
        self.context = context
        self._send = send
        self.opened = self.last_activity = time.monotonic()
        self.received = 0
        self.pending = 0  # requests read and not yet answered
        self.ended = False
        self.items: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._sender: threading.Thread | None = None

    def received_one(self) -> None:
        """Note a request read from the caller."""
        with self._lock:
            self.received += 1
            self.pending += 1
            self.last_activity = time.monotonic()

    def answered_one(self) -> None:
        """Note an answer sent (or dropped because the stream ended)."""
        with self._lock:
            self.pending -= 1
            self.last_activity = time.monotonic()

    def push(self, item: Any, start_sender: Callable[[StreamSession], None]) -> None:
        """Queue ``item`` for the sender, starting it once a request was read (the reader
        and the threads that finish requests push, so the start is under the lock)."""
        self.items.put(item)
        if self._sender is not None:
            return
        with self._lock:
            if self._sender is not None:
                return
            if self.received:
                self._sender = threading.Thread(target=start_sender, args=(self,),
                                                name="stream-infer-sender", daemon=True)
                self._sender.start()
                return
        self.finish()  # END before any request: the caller closed without sending anything

    def send(self, response: Any) -> bool:
        """Send one response; False when the stream has ended (or the caller left)."""
        if self.ended or not self.context.is_active():
            return False
        self._send(response)
        return True

    def finish(self) -> None:
        """End the stream with OK (the caller half-closed and every answer went out)."""
        with self._lock:
            if self.ended:
                return
            self.ended = True
        self._send(None)

    def end(self, code: grpc.StatusCode, details: str) -> None:
        """End the stream with ``code`` (idempotent; the reader then sees the end)."""
        with self._lock:
            if self.ended:
                return
            self.ended = True
        self.context.set_code(code)
        self.context.set_details(details)
        self._send(None)

    def overdue(self, now: float, limits: StreamLimits) -> str | None:
        """Why the stream must be closed now, or None."""
        with self._lock:
            if self.ended:
                return None
            if self.received == 0:
                if now - self.opened > limits.stream_first_message_s:
                    return (f"the stream sent no request within {limits.stream_first_message_s:g}"
                            " s of opening (grpc.stream_first_message_s); silent streams are "
                            "closed")
                return None
            if self.pending == 0 and now - self.last_activity > limits.stream_idle_s:
                return (f"the stream was idle for {limits.stream_idle_s:g} s "
                        "(grpc.stream_idle_s); idle streams are closed, open a new one when "
                        "needed")
        return None


class StreamSessions:
    """Open inference streams: admission by caps, and the reaper that closes overdue ones."""

    def __init__(self, limits: StreamLimits | None = None) -> None:
        self.limits = limits or StreamLimits()
        self._lock = threading.Lock()
        self._open: set[StreamSession] = set()
        self._per_peer: dict[str, int] = {}
        self._stop = threading.Event()
        self._reaper: threading.Thread | None = None

    @property
    def count(self) -> int:
        """Streams open now."""
        return len(self._open)

    def open(self, peer: str, context: grpc.ServicerContext, send: Send) -> StreamSession:
        """Admit a stream from ``peer`` or raise :class:`QueueFullError`."""
        lim = self.limits
        with self._lock:
            if len(self._open) >= lim.max_streams:
                raise QueueFullError(
                    f"the agent already serves {lim.max_streams} inference streams "
                    "(grpc.max_streams); retry later, or use ModelInfer")
            if self._per_peer.get(peer, 0) >= lim.max_streams_per_peer:
                raise QueueFullError(
                    f"{peer} already holds {lim.max_streams_per_peer} inference streams "
                    "(grpc.max_streams_per_peer); close one, or use ModelInfer")
            session = StreamSession(peer, context, send)
            self._open.add(session)
            self._per_peer[peer] = self._per_peer.get(peer, 0) + 1
            if self._reaper is None:
                self._reaper = threading.Thread(target=self._reap, name="stream-reaper",
                                                daemon=True)
                self._reaper.start()
        return session

    def close(self, session: StreamSession) -> None:
        """Release ``session``'s place (when its RPC terminated; idempotent)."""
        with self._lock:
            if session not in self._open:
                return
            self._open.discard(session)
            left = self._per_peer.get(session.peer, 1) - 1
            if left:
                self._per_peer[session.peer] = left
            else:
                self._per_peer.pop(session.peer, None)

    def _reap(self) -> None:
        lim = self.limits
        tick = min(1.0, max(0.05, min(lim.stream_first_message_s, lim.stream_idle_s) / 4))
        while not self._stop.wait(tick):
            now = time.monotonic()
            with self._lock:
                sessions = list(self._open)
            for session in sessions:
                why = session.overdue(now, lim)
                if why is not None:
                    log.info("closing an inference stream of %s: %s", session.peer, why)
                    session.end(grpc.StatusCode.DEADLINE_EXCEEDED, why)

    def stop(self) -> None:
        """Stop the reaper (the server's stop ends the streams themselves)."""
        self._stop.set()
