"""Access to the management API: a bearer token (constant-time compare) or mutual TLS.

Clients send ``authorization: Bearer <token>`` metadata on every call. With mTLS configured
(``client_ca`` set), the TLS handshake already proved the client's certificate, so the token is
not asked for. A wrong or missing token ends the call with UNAUTHENTICATED before the servicer
runs and before the request is read (so nothing changes and no server thread waits on the
caller); the failure is logged (peer, method, rate-limited) and the peer is
locked out for a moment that grows with its failures in a row. A stream opened with a token
that is rotated meanwhile ends at its next message.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from edge_agent.errors import ConfigError
from edge_agent.logthrottle import LogThrottle
from edge_agent.protocol.converters import Undecodable
from edge_agent.state.token import tokens_equal

log = logging.getLogger(__name__)
_throttle = LogThrottle(log, interval_s=10.0, burst=3)

AUTH_HEADER = "authorization"
DENIED = ("missing or wrong management token; pass the agent's token "
          "(on the device: edge-agent token --state-dir DIR)")


@dataclass(frozen=True)
class TlsFiles:
    """Server certificate and key (PEM), and the CA that signs client certificates (mTLS)."""

    cert: Path
    key: Path
    client_ca: Path | None = None

    def server_credentials(self) -> grpc.ServerCredentials:
        """gRPC server credentials; client certificates required when ``client_ca`` is set."""
        try:
            cert, key = self.cert.read_bytes(), self.key.read_bytes()
            ca = self.client_ca.read_bytes() if self.client_ca else None
        except OSError as exc:
            raise ConfigError(f"cannot read the management TLS file {exc.filename}: "
                              f"{exc.strerror}") from None
        return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca,
                                           require_client_auth=ca is not None)


def bearer(token: str) -> tuple[tuple[str, str]]:
    """Call metadata carrying ``token``."""
    return ((AUTH_HEADER, f"Bearer {token}"),)


def _presented(metadata: Any) -> str | None:
    for key, value in metadata or ():
        if key == AUTH_HEADER and isinstance(value, str) and value.startswith("Bearer "):
            return value[len("Bearer "):].strip()
    return None


ROTATED = ("the management token was rotated; this call was opened with the old one. "
           "Reconnect with the new token (on the device: edge-agent token --state-dir DIR)")
FREE_FAILURES = 10
"""Failures in a row a peer may have before it is locked out (a mistyped token costs nothing)."""
PENALTY_BASE_S = 0.1
PENALTY_MAX_S = 1.0
MAX_PEERS = 4096
"""Peers whose failed attempts are remembered at most (the oldest are forgotten)."""


def _peer_key(peer: str) -> str:
    """The caller's address without its port."""
    if peer.startswith(("ipv4:", "ipv6:")):
        return peer.rpartition(":")[0]
    return peer.split(":", 1)[0] or "unknown"


class FailurePenalty:
    """Per-peer lockout after failed authentication: past ``free`` failures in a row, a peer's
    calls are refused unread for ``base_s * 2**k`` seconds (at most ``max_s``), so a flood
    gets about one answered attempt per ``max_s`` per address. Memory is bounded by
    :data:`MAX_PEERS`. Thread-safe."""

    def __init__(self, base_s: float = PENALTY_BASE_S, max_s: float = PENALTY_MAX_S,
                 free: int = FREE_FAILURES) -> None:
        self.base_s = base_s
        self.free = free
        self.max_s = max_s
        self._lock = threading.Lock()
        self._peers: OrderedDict[str, tuple[int, float]] = OrderedDict()  # fails, locked until

    def wait_s(self, peer: str) -> float:
        """Seconds ``peer`` is still locked out (0: it may try)."""
        with self._lock:
            entry = self._peers.get(peer)
        return max(0.0, entry[1] - time.monotonic()) if entry else 0.0

    def failed(self, peer: str) -> int:
        """Record a failure of ``peer``; returns its failures in a row."""
        with self._lock:
            fails = self._peers.pop(peer, (0, 0.0))[0] + 1
            over = fails - self.free
            lock = min(self.max_s, self.base_s * 2 ** min(over - 1, 30)) if over > 0 else 0.0
            self._peers[peer] = (fails, time.monotonic() + lock)
            while len(self._peers) > MAX_PEERS:
                self._peers.popitem(last=False)
        return fails

    def succeeded(self, peer: str) -> None:
        """Forget ``peer``'s failures."""
        if self._peers:
            with self._lock:
                self._peers.pop(peer, None)


def _safe(deserialize: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """``deserialize`` that returns an :class:`Undecodable` instead of raising (gRPC would log
    a traceback per call, for anyone who can reach the port)."""
    if deserialize is None:
        return None
    owner = getattr(deserialize, "__self__", None)
    name = getattr(getattr(owner, "DESCRIPTOR", None), "full_name", "request")

    def decode(data: bytes) -> Any:
        try:
            return deserialize(data)
        except Exception as exc:
            return Undecodable(name, str(exc) or type(exc).__name__)

    return decode


def _rebuild(handler: grpc.RpcMethodHandler, behavior: Callable[..., Any]
             ) -> grpc.RpcMethodHandler:
    kw = {"request_deserializer": _safe(handler.request_deserializer),
          "response_serializer": handler.response_serializer}
    make: Callable[..., grpc.RpcMethodHandler]
    if handler.request_streaming and handler.response_streaming:
        make = grpc.stream_stream_rpc_method_handler
    elif handler.request_streaming:
        make = grpc.stream_unary_rpc_method_handler
    elif handler.response_streaming:
        make = grpc.unary_stream_rpc_method_handler
    else:
        make = grpc.unary_unary_rpc_method_handler
    return make(behavior, **kw)


def _original(handler: grpc.RpcMethodHandler) -> Callable[..., Any]:
    return (handler.unary_unary or handler.unary_stream or handler.stream_unary
            or handler.stream_stream)


class TokenAuthInterceptor(grpc.ServerInterceptor):
    """Refuses every call whose bearer token is not ``token`` (UNAUTHENTICATED).

    ``token`` may be a callable returning the current token (a rotated token file); a stream
    opened with a token that is then rotated ends (UNAUTHENTICATED) at its next message.
    Failed attempts are logged (peer, method; rate-limited) and lock the peer out for a
    growing moment (:class:`FailurePenalty`).
    """

    def __init__(self, token: str | Callable[[], str],
                 penalty: FailurePenalty | None = None) -> None:
        self._current = token if callable(token) else (lambda: token)
        self.penalty = penalty or FailurePenalty()

    def intercept_service(self, continuation: Callable[[Any], Any],
                          handler_call_details: grpc.HandlerCallDetails) -> Any:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        presented = _presented(handler_call_details.invocation_metadata)
        ok = tokens_equal(presented, self._current())
        method = handler_call_details.method
        behavior = _original(handler)
        current = self._current

        def still_valid() -> bool:
            return tokens_equal(presented, current())

        if not ok:
            return self._denial(method)

        def guarded(request: Any, context: grpc.ServicerContext) -> Any:
            peer = _peer_key(context.peer())
            wait = self.penalty.wait_s(peer)
            if wait > 0:
                context.abort(grpc.StatusCode.UNAUTHENTICATED, _locked(peer, wait))
            self.penalty.succeeded(peer)
            if handler.request_streaming:
                request = _checked_requests(request, still_valid, context)
            elif isinstance(request, Undecodable):
                _refuse_undecodable(request, method, context)
            result = behavior(request, context)
            if handler.response_streaming:
                return _checked_responses(result, still_valid, context)
            return result

        return _rebuild(handler, guarded)

    def _denial(self, method: str) -> grpc.RpcMethodHandler:
        """A handler that refuses without reading the request (whatever the method's kind, a
        non-blocking stream handler: a caller without the token, silent or not, holds no
        server thread)."""

        def deny(requests: Any, context: grpc.ServicerContext,
                 send: Callable[[Any], None]) -> None:
            peer = _peer_key(context.peer())
            wait = self.penalty.wait_s(peer)
            if wait > 0:
                details = _locked(peer, wait)
            else:
                fails = self.penalty.failed(peer)
                _throttle.warning(peer, "refused management call %s from %s: missing or "
                                  "wrong token (%d in a row)", method, context.peer(), fails)
                details = DENIED
            context.set_code(grpc.StatusCode.UNAUTHENTICATED)
            context.set_details(details)
            send(None)

        deny.experimental_non_blocking = True  # type: ignore[attr-defined]
        return grpc.stream_stream_rpc_method_handler(deny)


def _locked(peer: str, wait: float) -> str:
    return f"too many failed authentication attempts from {peer}; retry in {wait:.1f} s"


def _refuse_undecodable(request: Undecodable, method: str,
                        context: grpc.ServicerContext) -> None:
    _throttle.warning("undecodable", "refused an undecodable %s call from %s: %s", method,
                      context.peer(), request.reason[:200])
    context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(request.error()))


def _checked_requests(requests: Iterator[Any], valid: Callable[[], bool],
                      context: grpc.ServicerContext) -> Iterator[Any]:
    for item in requests:
        if not valid():
            context.abort(grpc.StatusCode.UNAUTHENTICATED, ROTATED)
        if isinstance(item, Undecodable):
            _refuse_undecodable(item, "stream", context)
        yield item
    if not valid():
        context.abort(grpc.StatusCode.UNAUTHENTICATED, ROTATED)


def _checked_responses(responses: Iterator[Any] | None, valid: Callable[[], bool],
                       context: grpc.ServicerContext) -> Iterator[Any]:
    for item in responses or ():
        if not valid():
            context.abort(grpc.StatusCode.UNAUTHENTICATED, ROTATED)
        yield item
