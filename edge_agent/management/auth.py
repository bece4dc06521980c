"""Access to the management API: a bearer token (constant-time compare) or mutual TLS.

Clients send ``authorization: Bearer <token>`` metadata on every call (inside TLS unless the
agent runs with ``--insecure``; see :mod:`edge_agent.management.tls`). With mTLS configured
(``client_ca`` set), the TLS handshake already proved the client's certificate, so the token is
not asked for. A wrong or missing token ends the call with UNAUTHENTICATED before the servicer
runs and before the request is read (so nothing changes and no server thread waits on the
caller); the failure is logged (peer, method, rate-limited) and, past 10 failures in a row
from one address, every call from that address not on an already authenticated connection is
answered late, one slot after the other whatever the number of calls in parallel (0.1 s
doubling to 1 s apart; a wrong token's refusal holds no thread meanwhile; beyond 32 waiting,
calls are refused unchecked). A stream opened with a token that is rotated meanwhile ends at
its next message.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

import grpc

from edge_agent import grpc_internals
from edge_agent.config.management import TlsFiles
from edge_agent.errors import AgentError, ConfigError
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
"""Calls waiting for their late answer at most, from all addresses."""
MAX_WAITING_PER_PEER = 32
"""Calls of one address waiting for their late answer at most (beyond: refused unchecked)."""
BUSY = ("too many calls from {peer} are waiting for their answers after failed tokens; "
        "retry in a few seconds")
MAX_PEERS = 4096
"""Peers whose failed attempts are remembered at most (the oldest are forgotten)."""


def _peer_key(peer: str) -> str:
    """The caller's address without its port."""
    if peer.startswith(("ipv4:", "ipv6:")):
        return peer.rpartition(":")[0]
    return peer.split(":", 1)[0] or "unknown"


@dataclass
class _Suspect:
    fails: int = 0  # failures in a row
    next_answer: float = 0.0  # monotonic time of the latest answer promised
    waiting: int = 0  # calls waiting for their answer


class FailurePenalty:
    """Per-address slowing of failed authentication, across concurrent calls: past ``free``
    failures in a row from an address, every call from it that is not on an authenticated
    connection (right token or wrong: the answer must not tell them apart) is answered at
    the address's next free slot, ``base_s * 2**k`` seconds (at most ``max_s``) after the
    previous one, so parallel guessers share one slow line. At most ``max_waiting`` calls of
    an address (:data:`MAX_DELAYED` in all) wait; beyond, calls are refused unchecked. A call
    with the right token clears the count. Memory is bounded by :data:`MAX_PEERS`.
    Thread-safe."""

    def __init__(self, base_s: float = PENALTY_BASE_S, max_s: float = PENALTY_MAX_S,
                 free: int = FREE_FAILURES, max_waiting: int = MAX_WAITING_PER_PEER) -> None:
        self.base_s = base_s
        self.free = free
        self.max_s = max_s
        self.max_waiting = max_waiting
        self._lock = threading.Lock()
        self._peers: OrderedDict[str, _Suspect] = OrderedDict()
        self._waiting = 0

    def admit(self, peer: str) -> float | None:
        """Before a call of ``peer`` is answered: the seconds its answer must wait (0: none),
        or None when too many of its calls wait already (refuse it without checking)."""
        if not self._peers:
            return 0.0
        with self._lock:
            suspect = self._peers.get(peer)
            if suspect is None or suspect.fails < self.free:
                return 0.0
            if suspect.waiting >= self.max_waiting or self._waiting >= MAX_DELAYED:
                return None
            now = time.monotonic()
            step = min(self.max_s, self.base_s * 2 ** min(suspect.fails - self.free, 30))
            suspect.next_answer = max(now, suspect.next_answer) + step
            suspect.waiting += 1
            self._waiting += 1
            return suspect.next_answer - now

    @property
    def waiting(self) -> int:
        """Calls waiting for their late answer now, from all addresses."""
        return self._waiting

    def answered(self, peer: str) -> None:
        """A call :meth:`admit` gave a delay has been answered."""
        with self._lock:
            self._waiting -= 1
            suspect = self._peers.get(peer)
            if suspect is not None and suspect.waiting > 0:
                suspect.waiting -= 1

    def failed(self, peer: str) -> int:
        """Record a failure of ``peer``; its failures in a row."""
        with self._lock:
            suspect = self._peers.pop(peer, None) or _Suspect()
            suspect.fails += 1
            self._peers[peer] = suspect
            while len(self._peers) > MAX_PEERS:
                self._peers.popitem(last=False)
            return suspect.fails

    def succeeded(self, peer: str) -> None:
        """Forget ``peer``'s failures."""
        if self._peers:
            with self._lock:
                suspect = self._peers.get(peer)
                if suspect is not None:
                    suspect.fails = 0


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
            peer = connections.peer(via)
            if not connections.is_authenticated(via):  # routine calls skip the penalty
                self._wait_turn(_peer_key(peer), context)
                connections.authenticated(via)
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

    def _wait_turn(self, peer: str, context: grpc.ServicerContext) -> None:
        """A call with the right token from an address in penalty waits for its slot as a
        wrong one would (else a short deadline would tell the right token apart)."""
        delay = self.penalty.admit(peer)
        if delay is None:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, BUSY.format(peer=peer))
        if delay:
            remaining = context.time_remaining()
            wait = delay if remaining is None else max(0.0, min(delay, remaining))
            try:
                time.sleep(wait)
            finally:
                self.penalty.answered(peer)
            if wait < delay:  # the caller's deadline came first: it learns nothing
                context.abort(grpc.StatusCode.DEADLINE_EXCEEDED,
                              f"the call's deadline passed while waiting its turn ({peer} "
                              "has failed authentication many times in a row)")

    def _denial(self, method: str) -> grpc.RpcMethodHandler[Any, Any]:
        """A handler that refuses without reading the request (whatever the method's kind, a
        non-blocking stream handler: a caller without the token, silent or not, holds no
        server thread; answered at once, never late, where gRPC lacks the non-blocking hook)."""

        def deny(requests: Any, context: grpc.ServicerContext,
                 send: Callable[[Any], None] | None = None) -> Iterator[Any] | None:
            client = self.connections.peer(context.peer())
            peer = _peer_key(client)
            delay = self.penalty.admit(peer)
            if delay is None:  # refused unchecked: the answer tells nothing of the token
                context.set_code(grpc.StatusCode.RESOURCE_EXHAUSTED)
                context.set_details(BUSY.format(peer=peer))
                if send is None:
                    return iter(())
                send(None)
                return None
            fails = self.penalty.failed(peer)
            _throttle.warning(peer, "refused management call %s from %s: missing or wrong "
                              "token (%d in a row)", method, client, fails)
            context.set_code(grpc.StatusCode.UNAUTHENTICATED)
            if send is None:  # a blocking handler after all: answer now, with no delay
                if delay:
                    self.penalty.answered(peer)
                context.set_details(DENIED)
                return iter(())
            if delay > 0:
                context.set_details(f"{DENIED} (answered {delay:.1f} s late: {fails} failures "
                                    f"in a row from {peer})")

                def answer() -> None:
                    self.penalty.answered(peer)
                    send(None)

                if self.delayed.later(delay, answer):
                    return None
                self.penalty.answered(peer)
            else:
                context.set_details(DENIED)
            send(None)
            return None

        grpc_internals.non_blocking(deny)
        return grpc.stream_stream_rpc_method_handler(deny)


def _refuse(context: grpc.ServicerContext, error: AgentError) -> NoReturn:
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
