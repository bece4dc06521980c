"""The management port's own accept loop: per-address connection caps and deadlines in front
of the gRPC server, which grpcio cannot give (it has one global connection cap and no accept
hook).

One selector thread accepts on the management port and relays each admitted connection's bytes
to the gRPC server, which listens on a Unix socket in a private (0700) directory only this
loop connects to; TLS stays end to end between the client and that server. The loop binds each
relay socket to an abstract name, which is the call's ``context.peer()`` on the server side:
:meth:`ConnectionGate.peer` turns it back into the client's address, and
:meth:`ConnectionGate.authenticated` marks the connection once a call on it presented the right
token (with mTLS, the TLS handshake itself authenticates).

What a connection may do before it is authenticated (``[management]`` keys, see
:class:`~edge_agent.config.management.ConnectionLimits`): finish its TLS handshake within
``handshake_timeout_s`` (plaintext: send the HTTP/2 preface), make an authenticated call within
``auth_timeout_s``; an address holds at most ``max_unauthenticated_per_peer`` such connections
and ``max_connections_per_peer`` in all. When ``max_connections`` are held, a new connection
closes the oldest unauthenticated one of the address holding most of them (sshd's MaxStartups
idea: strangers make room for each other, never at the operator's expense); it is refused only
when every held connection is authenticated. A refused connection is sent one line,
:data:`~edge_agent.management.wire.REFUSED` and the reason, then closed (clients show it:
:func:`edge_agent.client.agent_client.refusal`).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
import selectors
import shutil
import socket
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from edge_agent.config.management import ConnectionLimits
from edge_agent.errors import ConfigError
from edge_agent.logthrottle import LogThrottle
from edge_agent.management.wire import REFUSED

log = logging.getLogger(__name__)
_throttle = LogThrottle(log, interval_s=10.0, burst=3)

BUFFER_BYTES = 256 * 1024
"""Bytes read per recv, and buffered per direction before reading that side pauses."""
TICK_S = 0.25
"""How often deadlines are checked."""
_ABSTRACT = "edge-mgmt-"
_PEER_PREFIX = "unix-abstract:"
_TLS_APPLICATION_DATA = 23
_HTTP2_PREFACE_BYTES = 24


class _Handshake:
    """Watches what a client sends until its handshake is done: with TLS, its first
    application-data record (the client's Finished in TLS 1.3, its first data in 1.2); in
    plaintext, the 24-byte HTTP/2 preface."""

    __slots__ = ("_header", "_seen", "_skip", "_tls", "done")

    def __init__(self, tls: bool) -> None:
        self.done = False
        self._tls = tls
        self._header = b""
        self._skip = 0
        self._seen = 0

    def feed(self, data: bytes) -> bool:
        """Take ``data`` (the next bytes the client sent); True once the handshake is done."""
        if self.done:
            return True
        if not self._tls:
            self._seen += len(data)
            self.done = self._seen >= _HTTP2_PREFACE_BYTES
            return self.done
        view = memoryview(data)
        while view:
            if self._skip:
                step = min(self._skip, len(view))
                self._skip -= step
                view = view[step:]
                continue
            need = 5 - len(self._header)
            self._header += bytes(view[:need])
            view = view[need:]
            if len(self._header) == 5:
                if self._header[0] == _TLS_APPLICATION_DATA:
                    self.done = True
                    return True
                self._skip = int.from_bytes(self._header[3:5], "big")
                self._header = b""
        return False


@dataclass(eq=False)
class _Conn:
    """One admitted client connection and its relay to the gRPC server."""

    client: socket.socket
    peer: str  # "ipv4:10.0.0.5:41234", as grpc writes peers
    host: str  # the address alone: what caps count
    name: str  # the relay socket's abstract name
    accepted: float
    handshake: _Handshake
    backend: socket.socket | None = None
    authenticated: bool = False
    to_backend: bytearray = field(default_factory=bytearray)
    to_client: bytearray = field(default_factory=bytearray)
    closing: bool = False  # one side ended: close once the other side's data is out
    masks: dict[int, int] = field(default_factory=dict)  # selector events per descriptor


@dataclass
class _Peer:
    total: int = 0
    unauthenticated: int = 0


def _grpc_peer(address: tuple[str, int] | tuple[str, int, int, int]) -> tuple[str, str]:
    """(grpc-style peer, host) for a socket address."""
    host = address[0]
    if host.startswith("::ffff:") and "." in host:
        host = host[len("::ffff:"):]
    if ":" in host:
        return f"ipv6:[{host}]:{address[1]}", host
    return f"ipv4:{host}:{address[1]}", host


class ConnectionGate:
    """The accept loop on ``address`` (HOST:PORT) relaying admitted connections to a gRPC
    server on :attr:`backend` (a Unix socket path; bind the server there before :meth:`start`).

    ``tls``: the server speaks TLS (the handshake is watched for its end);
    ``handshake_authenticates``: mTLS, where a finished handshake is an authenticated one.
    ``where`` names the setting in a bind error. Thread-safe.
    """

    def __init__(self, address: str, limits: ConnectionLimits, *, tls: bool,
                 handshake_authenticates: bool = False,
                 where: str = "--management (management.address)") -> None:
        self.address = address
        self.limits = limits
        self.tls = tls
        self.handshake_authenticates = handshake_authenticates
        self.where = where
        self.stats: Counter[str] = Counter()
        """What the gate did: accepted, refused (per reason), evicted, timed out."""
        self._dir = Path(tempfile.mkdtemp(prefix="edge-mgmt-"))  # 0700
        self.backend = self._dir / "management.sock"
        self._tag = f"{_ABSTRACT}{os.getpid()}-{secrets.token_hex(4)}-"
        self._serial = 0
        self._lock = threading.Lock()
        self._conns: dict[str, _Conn] = {}  # by relay name
        self._peers: dict[str, _Peer] = {}
        self._selector = selectors.DefaultSelector()
        self._listener: socket.socket | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._wake_r, self._wake_w = socket.socketpair()
        self._pending: list[Callable[[], None]] = []
        self.port = 0

    # -- what the gRPC side asks ----------------------------------------------------------------
    def _conn_of(self, grpc_peer: str) -> _Conn | None:
        if not grpc_peer.startswith(_PEER_PREFIX):
            return None
        return self._conns.get(grpc_peer[len(_PEER_PREFIX):])

    def peer(self, grpc_peer: str) -> str:
        """The client's address (``ipv4:HOST:PORT``) behind a call's ``context.peer()``; the
        argument itself when it is not one of this gate's relays."""
        conn = self._conn_of(grpc_peer)
        return conn.peer if conn is not None else grpc_peer

    def is_authenticated(self, grpc_peer: str) -> bool:
        """Whether the call's connection has already made an authenticated call."""
        conn = self._conn_of(grpc_peer)
        return conn is not None and conn.authenticated

    def authenticated(self, grpc_peer: str) -> None:
        """Mark the call's connection authenticated (its caps and deadlines no longer apply)."""
        conn = self._conn_of(grpc_peer)
        if conn is not None and not conn.authenticated:
            with self._lock:
                self._authenticate(conn)

    def _authenticate(self, conn: _Conn) -> None:
        if not conn.authenticated and conn.name in self._conns:
            conn.authenticated = True
            self._peers[conn.host].unauthenticated -= 1

    # -- life -------------------------------------------------------------------------------
    def start(self) -> int:
        """Bind the management port and start relaying; returns the port."""
        host, _, port = self.address.rpartition(":")
        host = host.strip("[]")
        try:
            family, kind, proto, _, sockaddr = socket.getaddrinfo(
                host or None, int(port), type=socket.SOCK_STREAM,
                flags=socket.AI_PASSIVE)[0]
            listener = socket.socket(family, kind, proto)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{self.where}: cannot listen on {self.address}: {exc}; check "
                              "the host and port") from None
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                with contextlib.suppress(OSError):
                    listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            listener.bind(sockaddr)
            listener.listen(1024)
        except OSError as exc:
            listener.close()
            hint = ("another process holds the port: stop it or pick another port"
                    if exc.errno == errno.EADDRINUSE else "check the host and port")
            raise ConfigError(f"{self.where}: cannot listen on {self.address}: "
                              f"{exc.strerror or exc}; {hint}") from None
        listener.setblocking(False)
        self._listener = listener
        self.port = listener.getsockname()[1]
        self._selector.register(listener, selectors.EVENT_READ, "accept")
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._thread = threading.Thread(target=self._run, name="edge-mgmt-gate", daemon=True)
        self._thread.start()
        return self.port

    def close_listener(self) -> None:
        """Accept no more connections (the admitted ones keep being relayed)."""
        self._post(self._drop_listener)

    def stop(self) -> None:
        """Close every connection and the port, end the thread, remove the socket's folder."""
        self._stopping.set()
        self._post(lambda: None)
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None
        for key in list(self._selector.get_map().values()):
            if isinstance(key.fileobj, socket.socket):
                key.fileobj.close()
        self._selector.close()
        self._wake_w.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    # -- the loop ---------------------------------------------------------------------------
    def _post(self, action: Callable[[], None]) -> None:
        """Run ``action`` on the loop's thread (or now, when the loop is not running)."""
        if self._thread is None or not self._thread.is_alive():
            action()
            return
        with self._lock:
            self._pending.append(action)
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")

    def _drop_listener(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(self._listener)
            self._listener.close()
            self._listener = None

    def _run(self) -> None:
        next_tick = time.monotonic() + TICK_S
        while not self._stopping.is_set():
            timeout = max(0.0, next_tick - time.monotonic())
            for key, events in self._selector.select(timeout):
                try:
                    if key.data == "accept":
                        self._accept()
                    elif key.data == "wake":
                        self._woken()
                    elif isinstance(key.fileobj, socket.socket):
                        self._ready(key.data, key.fileobj, events)
                except Exception:  # one connection's trouble never ends the loop
                    log.exception("management connection relay failed")
                    if isinstance(key.data, _Conn):
                        self._close(key.data)
            if time.monotonic() >= next_tick:
                self._expire()
                next_tick = time.monotonic() + TICK_S
        for conn in list(self._conns.values()):
            self._close(conn)
        self._drop_listener()

    def _woken(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_r.recv(4096)
        with self._lock:
            actions, self._pending = self._pending, []
        for action in actions:
            action()

    def _accept(self) -> None:
        for _ in range(256):
            if self._listener is None:
                return
            try:
                sock, address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of descriptors, mostly: the listener stays
                _throttle.warning("accept", "management port cannot accept: %s", exc)
                return
            self._admit(sock, address)

    def _admit(self, sock: socket.socket, address: tuple[str, int]) -> None:
        peer, host = _grpc_peer(address)
        limits = self.limits
        victim: _Conn | None = None
        with self._lock:
            count = self._peers.get(host) or _Peer()
            if count.total >= limits.max_connections_per_peer:
                why = (f"{count.total} connections from {host} are open "
                       f"(management.max_connections_per_peer = "
                       f"{limits.max_connections_per_peer})")
            elif count.unauthenticated >= limits.max_unauthenticated_per_peer:
                why = (f"{count.unauthenticated} connections from {host} have not "
                       "authenticated yet (management.max_unauthenticated_per_peer = "
                       f"{limits.max_unauthenticated_per_peer})")
            elif len(self._conns) >= limits.max_connections:
                victim = self._victim()
                why = "" if victim is not None else (
                    f"{len(self._conns)} authenticated connections are open "
                    f"(management.max_connections = {limits.max_connections})")
            else:
                why = ""
        if why:
            self._refuse(sock, peer, why)
            return
        if victim is not None:
            self.stats["evicted"] += 1
            self._close(victim)
        self._serial += 1
        conn = _Conn(client=sock, peer=peer, host=host, name=f"{self._tag}{self._serial}",
                     accepted=time.monotonic(), handshake=_Handshake(self.tls))
        sock.setblocking(False)
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            self._conns[conn.name] = conn
            entry = self._peers.setdefault(host, _Peer())
            entry.total += 1
            entry.unauthenticated += 1
        self.stats["accepted"] += 1
        self._want(conn, sock, selectors.EVENT_READ)

    def _victim(self) -> _Conn | None:
        """The oldest unauthenticated connection of the address holding most of them."""
        busiest = max(self._peers.items(), key=lambda item: item[1].unauthenticated,
                      default=None)
        if busiest is None or busiest[1].unauthenticated == 0:
            return None
        host = busiest[0]
        return min((c for c in self._conns.values()
                    if c.host == host and not c.authenticated),
                   key=lambda c: c.accepted, default=None)

    def _refuse(self, sock: socket.socket, peer: str, why: str) -> None:
        self.stats["refused"] += 1
        _throttle.warning(peer.rpartition(":")[0], "refused a management connection from %s: "
                          "%s", peer, why)
        with contextlib.suppress(OSError):
            sock.setblocking(False)
            sock.send(REFUSED + why.encode() + b"; retry later\n")
        sock.close()

    def _expire(self) -> None:
        now = time.monotonic()
        limits = self.limits
        for conn in list(self._conns.values()):
            if conn.authenticated:
                continue
            age = now - conn.accepted
            if (not conn.handshake.done and limits.handshake_timeout_s > 0
                    and age > limits.handshake_timeout_s):
                self.stats["handshake timeout"] += 1
                self._close(conn)
            elif limits.auth_timeout_s > 0 and age > limits.auth_timeout_s:
                self.stats["authentication timeout"] += 1
                self._close(conn)

    # -- relaying -----------------------------------------------------------------------------
    def _connect_backend(self, conn: _Conn) -> bool:
        backend = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            backend.bind(b"\0" + conn.name.encode())
            backend.setblocking(False)
            backend.connect(str(self.backend))
        except OSError as exc:  # the server's backlog is full, or it has stopped
            backend.close()
            _throttle.warning("backend", "cannot relay a management connection: %s", exc)
            return False
        conn.backend = backend
        self._want(conn, backend, selectors.EVENT_READ)
        return True

    def _ready(self, conn: _Conn, sock: socket.socket, events: int) -> None:
        if events & selectors.EVENT_READ:
            self._read(conn, sock)
        self._settle(conn)  # sends what waits (both ways), then re-registers or closes

    def _read(self, conn: _Conn, sock: socket.socket) -> None:
        from_client = sock is conn.client
        try:
            data = sock.recv(BUFFER_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            conn.closing = True
            return
        if from_client:
            if not conn.handshake.done and conn.handshake.feed(data) \
                    and self.handshake_authenticates:
                with self._lock:
                    self._authenticate(conn)
            if conn.backend is None and not self._connect_backend(conn):
                self._close(conn)
                return
            conn.to_backend += data
        else:
            conn.to_client += data

    def _flush(self, conn: _Conn, sock: socket.socket) -> None:
        buffer = conn.to_client if sock is conn.client else conn.to_backend
        if not buffer:
            return
        try:
            sent = sock.send(buffer)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            conn.closing = True
            buffer.clear()
            return
        del buffer[:sent]

    def _settle(self, conn: _Conn) -> None:
        """Send what can go now, then register each side for what it waits on (or close)."""
        if conn.name not in self._conns:
            return
        for sock, buffer in ((conn.backend, conn.to_backend), (conn.client, conn.to_client)):
            if sock is not None and buffer:
                self._flush(conn, sock)
        if conn.closing and not conn.to_backend and not conn.to_client:
            self._close(conn)
            return
        for sock, outgoing, incoming in ((conn.client, conn.to_client, conn.to_backend),
                                         (conn.backend, conn.to_backend, conn.to_client)):
            if sock is None:
                continue
            mask = 0 if conn.closing or len(incoming) >= BUFFER_BYTES else selectors.EVENT_READ
            if outgoing:
                mask |= selectors.EVENT_WRITE
            self._want(conn, sock, mask)

    def _want(self, conn: _Conn, sock: socket.socket, mask: int) -> None:
        """Register ``sock`` for ``mask`` (0: not at all), touching the selector only when
        that changes."""
        now = conn.masks.get(sock.fileno(), 0)
        if mask == now:
            return
        if not mask:
            self._selector.unregister(sock)
        elif not now:
            self._selector.register(sock, mask, conn)
        else:
            self._selector.modify(sock, mask, conn)
        conn.masks[sock.fileno()] = mask

    def _close(self, conn: _Conn) -> None:
        with self._lock:
            if self._conns.pop(conn.name, None) is None:
                return
            entry = self._peers[conn.host]
            entry.total -= 1
            if not conn.authenticated:
                entry.unauthenticated -= 1
            if entry.total == 0:
                del self._peers[conn.host]
        for sock in (conn.client, conn.backend):
            if sock is None:
                continue
            if conn.masks.get(sock.fileno()):
                with contextlib.suppress(KeyError, ValueError):
                    self._selector.unregister(sock)
            with contextlib.suppress(OSError):
                sock.close()
