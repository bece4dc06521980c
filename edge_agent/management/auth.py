"""Access to the management API: a bearer token (constant-time compare) or mutual TLS.

Clients send ``authorization: Bearer <token>`` metadata on every call (inside TLS unless the
agent runs with ``--insecure``; see :mod:`edge_agent.management.tls`). With mTLS configured
(``client_ca`` set), the TLS handshake already proved the client's certificate, so the token is
not asked for. A wrong or missing token ends the call with UNAUTHENTICATED before the servicer
runs and before the request is read (so nothing changes and no server thread waits on the
caller); the failure is logged (peer, method, rate-limited) and, past 10 failures in a row
from one address, answered late (0.1 s doubling to 1 s; no thread waits meanwhile). A stream
opened with a token that is rotated meanwhile ends at its next message.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any, NoReturn, Protocol

import grpc

from edge_agent import grpc_internals
from edge_agent.config.management import TlsFiles
from edge_agent.errors import ConfigError, InvalidInputError
from edge_agent.frontends.common.undecodable import Undecodable, safe_deserializer
from edge_agent.logthrottle import LogThrottle
from edge_agent.state.token import tokens_equal

log = logging.getLogger(__name__)
_throttle = LogThrottle(log, interval_s=10.0, burst=3)

AUTH_HEADER = "authorization"
DENIED = ("missing or wrong management token; pass the agent's token "
          "(on the device: edge-agent token --state-dir DIR)")


__all__ = ["TlsFiles", "TokenAuthInterceptor", "bearer", "server_credentials"]


def server_credentials(tls: TlsFiles) -> grpc.ServerCredentials:
    """gRPC server credentials; client certificates required when ``tls.client_ca`` is set."""
    try:
        cert, key = tls.cert.read_bytes(), tls.key.read_bytes()
        ca = tls.client_ca.read_bytes() if tls.client_ca else None
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
MAX_DELAYED = 1024
"""Refusals waiting to be sent late at most (beyond, they are sent at once)."""
MAX_PEERS = 4096
"""Peers whose failed attempts are remembered at most (the oldest are forgotten)."""


def _peer_key(peer: str) -> str:
    """The caller's address without its port."""
    if peer.startswith(("ipv4:", "ipv6:")):
        return peer.rpartition(":")[0]
    return peer.split(":", 1)[0] or "unknown"


class FailurePenalty:
    """Per-peer slowing of failed authentication: past ``free`` failures in a row, each further
    refusal to that address is answered ``base_s * 2**k`` seconds late (at most ``max_s``),
    without holding a server thread (:class:`DelayedAnswers`). A call with the right token is
    never slowed and clears the count. Memory is bounded by :data:`MAX_PEERS`. Thread-safe."""

    def __init__(self, base_s: float = PENALTY_BASE_S, max_s: float = PENALTY_MAX_S,
                 free: int = FREE_FAILURES) -> None:
        self.base_s = base_s
        self.free = free
        self.max_s = max_s
        self._lock = threading.Lock()
        self._peers: OrderedDict[str, int] = OrderedDict()  # failures in a row

    def failed(self, peer: str) -> tuple[int, float]:
        """Record a failure of ``peer``: (its failures in a row, seconds to delay the answer)."""
        with self._lock:
            fails = self._peers.pop(peer, 0) + 1
            self._peers[peer] = fails
            while len(self._peers) > MAX_PEERS:
                self._peers.popitem(last=False)
        over = fails - self.free
        return fails, (min(self.max_s, self.base_s * 2 ** min(over - 1, 30)) if over > 0
                       else 0.0)

    def succeeded(self, peer: str) -> None:
        """Forget ``peer``'s failures."""
        if self._peers:
            with self._lock:
                self._peers.pop(peer, None)


class DelayedAnswers:
    """Sends answers later from one scheduler thread (no server thread waits); at most
    ``max_pending`` wait at once, beyond which :meth:`later` refuses (answer at once)."""

    def __init__(self, max_pending: int = MAX_DELAYED) -> None:
        self.max_pending = max_pending
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = 0
        self._thread: threading.Thread | None = None

    def later(self, delay_s: float, answer: Callable[[], None]) -> bool:
        """Run ``answer`` in ``delay_s`` seconds; False (not scheduled) when too many wait."""
        with self._cond:
            if len(self._heap) >= self.max_pending:
                return False
            self._seq += 1
            heapq.heappush(self._heap, (time.monotonic() + delay_s, self._seq, answer))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="edge-auth-delay",
                                                daemon=True)
                self._thread.start()
            self._cond.notify()
        return True

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    self._cond.wait(self._heap[0][0] - time.monotonic() if self._heap else None)
                _, _, answer = heapq.heappop(self._heap)
            try:
                answer()
            except Exception:  # the caller left: nothing to answer
                log.debug("a delayed refusal could not be sent", exc_info=True)


class Connections(Protocol):
    """What the management port's accept loop knows of a call's connection
    (:class:`~edge_agent.management.gate.ConnectionGate`), by ``context.peer()``."""

    def peer(self, grpc_peer: str) -> str:
        """The client's address behind ``grpc_peer``."""

    def is_authenticated(self, grpc_peer: str) -> bool:
        """Whether the connection has made an authenticated call."""

    def authenticated(self, grpc_peer: str) -> None:
        """Mark the connection as having made an authenticated call."""


class _Direct:
    """Calls that reach the server directly: ``context.peer()`` is the client."""

    def peer(self, grpc_peer: str) -> str:
        return grpc_peer

    def is_authenticated(self, grpc_peer: str) -> bool:
        return False

    def authenticated(self, grpc_peer: str) -> None:
        return None


class TokenAuthInterceptor(grpc.ServerInterceptor):  # type: ignore[type-arg]  # generic only in grpc-stubs
    """Refuses every call whose bearer token is not ``token`` (UNAUTHENTICATED).

    ``token`` may be a callable returning the current token (a rotated token file); a stream
    opened with a token that is then rotated ends (UNAUTHENTICATED) at its next message.
    Failed attempts are logged (peer, method; rate-limited) and, past a few in a row, answered
    late (:class:`FailurePenalty`); the right token is never slowed.
    ``connections``: the accept loop in front of the server (client addresses, and the
    connections that have authenticated); by default calls come straight from their clients.
    """

    def __init__(self, token: str | Callable[[], str],
                 penalty: FailurePenalty | None = None,
                 connections: Connections | None = None) -> None:
        self._current = token if callable(token) else (lambda: token)
        self.penalty = penalty or FailurePenalty()
        self.delayed = DelayedAnswers()
        self.connections: Connections = connections or _Direct()

    def intercept_service(self, continuation: Callable[[Any], Any],
                          handler_call_details: grpc.HandlerCallDetails) -> Any:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        presented = _presented(handler_call_details.invocation_metadata)
        ok = tokens_equal(presented, self._current())
        method = handler_call_details.method
        behavior = grpc_internals.behavior_of(handler)
        current = self._current

        def still_valid() -> bool:
            return tokens_equal(presented, current())

        if not ok:
            return self._denial(method)

        connections = self.connections

        def guarded(request: Any, context: grpc.ServicerContext) -> Any:
            via = context.peer()
            connections.authenticated(via)
            peer = connections.peer(via)
            self.penalty.succeeded(_peer_key(peer))
            if handler.request_streaming:
                request = _checked_requests(request, still_valid, context, peer)
            elif isinstance(request, Undecodable):
                _refuse(context, request.refused(method, peer))
            result = behavior(request, context)
            if handler.response_streaming:
                return _checked_responses(result, still_valid, context)
            return result

        return grpc_internals.rebuild(
            handler, behavior=guarded,
            request_deserializer=safe_deserializer(handler.request_deserializer))

    def _denial(self, method: str) -> grpc.RpcMethodHandler[Any, Any]:
        """A handler that refuses without reading the request (whatever the method's kind, a
        non-blocking stream handler: a caller without the token, silent or not, holds no
        server thread; answered at once, never late, where gRPC lacks the non-blocking hook)."""

        def deny(requests: Any, context: grpc.ServicerContext,
                 send: Callable[[Any], None] | None = None) -> Iterator[Any] | None:
            client = self.connections.peer(context.peer())
            peer = _peer_key(client)
            fails, delay = self.penalty.failed(peer)
            _throttle.warning(peer, "refused management call %s from %s: missing or wrong "
                              "token (%d in a row)", method, client, fails)
            context.set_code(grpc.StatusCode.UNAUTHENTICATED)
            if send is None:  # a blocking handler after all: answer now, with no delay
                context.set_details(DENIED)
                return iter(())
            if delay > 0:
                context.set_details(f"{DENIED} (answered {delay:.1f} s late: {fails} failures "
                                    f"in a row from {peer})")
                if self.delayed.later(delay, lambda: send(None)):
                    return None
            else:
                context.set_details(DENIED)
            send(None)
            return None

        grpc_internals.non_blocking(deny)
        return grpc.stream_stream_rpc_method_handler(deny)


def _refuse(context: grpc.ServicerContext, error: InvalidInputError) -> NoReturn:
    # not frontends.grpc.status: clients import this module (bearer) and load no front end
    context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
    raise AssertionError("unreachable: context.abort raises")  # pragma: no cover


def _checked_requests(requests: Iterator[Any], valid: Callable[[], bool],
                      context: grpc.ServicerContext, peer: str) -> Iterator[Any]:
    for item in requests:
        if not valid():
            context.abort(grpc.StatusCode.UNAUTHENTICATED, ROTATED)
        if isinstance(item, Undecodable):
            _refuse(context, item.refused("stream", peer))
        yield item
    if not valid():
        context.abort(grpc.StatusCode.UNAUTHENTICATED, ROTATED)


def _checked_responses(responses: Iterator[Any] | None, valid: Callable[[], bool],
                       context: grpc.ServicerContext) -> Iterator[Any]:
    for item in responses or ():
        if not valid():
            context.abort(grpc.StatusCode.UNAUTHENTICATED, ROTATED)
        yield item
