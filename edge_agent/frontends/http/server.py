"""The HTTP/1.1 server of the KServe v2 REST front end and ``/metrics``: the standard library's
``http.server``, one thread per connection, bounded.

Why the standard library (docs/http.md has the figures, ``python -m benchmarks.bench_http
--servers``): no dependency to ship to a device, and one thread per connection lets the data
plane run an idle model inline on the thread that read the request, as the gRPC server does;
measured on this 2-core machine it answered a small request faster than uvicorn+starlette and
aiohttp.

Hostile input (docs/security.md, docs/http.md): at most ``max_connections`` connections are
served at once, ``max_connections_per_peer`` from one address; beyond them a few reserve
connections answer health checks (and 503 to anything else); a connection silent for
``idle_timeout_s`` is closed, and a request's headers (``header_timeout_s``) and body
(``body_timeout_s``) have total deadlines, whatever the pace of their bytes; a body must declare
its length (no chunked bodies) and may not exceed ``max_body_bytes`` (413, never read);
compressed bodies (gzip, deflate) are inflated as they arrive to at most that size and
``max_inflate_ratio`` times their own; JSON bodies are counted (values, depth) before they are
parsed; ``/metrics`` is rendered at most once per ``metrics_cache_s``; every error is
``{"error": "..."}`` with a 4xx/5xx status, never a traceback.
"""

from __future__ import annotations

import contextlib
import io
import logging
import socket
import socketserver
import sys
import threading
import time
import zlib
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from edge_agent.config.http import HttpConfig
from edge_agent.errors import ConfigError
from edge_agent.frontends.common.callers import connection_caller
from edge_agent.frontends.http.jsonscan import JsonTooLarge, scan
from edge_agent.frontends.http.routes import HttpAnswer, HttpRequest, KServeRoutes, error_answer
from edge_agent.frontends.http.tensors import HEADER_LENGTH
from edge_agent.logthrottle import LogThrottle

log = logging.getLogger(__name__)
throttle = LogThrottle(log)

# an object with render() -> bytes (edge_agent.frontends.http.prometheus.MetricsPage)
MetricsRenderer = Any
_SERVER_NAME = "edge-agent"
_DECODERS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
DRAIN_S = 2.0
DRAIN_BYTES = 64 * 1024 * 1024
"""After a refused body, at most this much of it is read and dropped, for at most DRAIN_S."""
RESERVE_CONNECTIONS = 8
"""Connections beyond the caps that may still send one health check (anything else: 503).
When all are taken, a new one takes the place of the oldest still waiting for its request (a
health check sends its request at once; a slow client never finishes its headers)."""
RESERVE_S = 2.0
"""A reserve connection's request must arrive within this long."""
HEALTH_PATHS = frozenset({"/v2/health/live", "/v2/health/ready"})
_READ_CHUNK = 64 * 1024


def _decimal(text: str | None) -> int | None:
    """``text`` as a non-negative decimal integer of ASCII digits, else None."""
    if text is None:
        return None
    text = text.strip()
    return int(text) if text.isascii() and text.isdigit() else None


class _Refusal(Exception):
    """A request refused before routing: status, message, and whether to close."""

    def __init__(self, status: int, message: str, close: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.close = close


class _DeadlineSocket(io.RawIOBase):
    """The connection's reading side: each read waits at most the idle timeout, and never past
    the handler's current deadline (headers, body), however slowly the bytes come."""

    def __init__(self, sock: socket.socket, handler: _Handler) -> None:
        super().__init__()
        self._sock = sock
        self._handler = handler

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        handler = self._handler
        timeout = handler.idle_s
        if handler.deadline is not None:
            timeout = min(timeout, handler.deadline - time.monotonic())
            if timeout <= 0:
                raise TimeoutError(f"the request's {handler.phase} took longer than "
                                   f"{handler.phase_limit}")
        self._sock.settimeout(timeout)
        n = self._sock.recv_into(buffer)
        if n and handler.deadline is None and handler.phase == "headers":
            handler.deadline = time.monotonic() + handler.header_s  # from its first byte
        return n


def _inflate(stream: Any, length: int, encoding: str, limit: int, ratio: int) -> bytes:
    """Read ``length`` compressed bytes from ``stream`` and inflate them as they come, to at
    most ``limit`` bytes and ``ratio`` times ``length``."""
    wbits = _DECODERS.get(encoding)
    if wbits is None:
        raise _Refusal(415, f"Content-Encoding {encoding!r} is not supported; send the body "
                            "uncompressed, gzip or deflate", close=True)
    bound = min(limit, length * ratio)
    inflater = zlib.decompressobj(wbits)
    out = bytearray()
    left = length
    while left:
        chunk = stream.read(min(left, _READ_CHUNK))
        if not chunk:
            raise _Refusal(400, f"the connection closed after {length - left} of {length} "
                                "body bytes", close=True)
        left -= len(chunk)
        try:
            out += inflater.decompress(chunk, bound + 1 - len(out))
        except zlib.error as exc:
            raise _Refusal(400, f"the {encoding} body does not decompress: {exc}",
                           close=bool(left)) from None
        if len(out) > bound or inflater.unconsumed_tail:
            which = ("http.max_body_bytes" if bound == limit else
                     f"{ratio} times its {length} bytes, http.max_inflate_ratio")
            raise _Refusal(413, f"the {encoding} body inflates to more than {bound} bytes "
                                f"({which})", close=bool(left))
    return bytes(out)


class _Handler(BaseHTTPRequestHandler):
    """One connection: requests read, routed, answered in one write each."""

    protocol_version = "HTTP/1.1"
    server_version = _SERVER_NAME
    sys_version = ""
    disable_nagle_algorithm = True
    server: _Server

    def setup(self) -> None:
        config = self.server.config
        self.reserve = self.server.is_reserve(self.request)
        self.idle_s = RESERVE_S if self.reserve else config.idle_timeout_s
        self.header_s = min(RESERVE_S, config.header_timeout_s) if self.reserve \
            else config.header_timeout_s
        self.phase = "headers"
        self.deadline: float | None = None
        self.request.settimeout(self.idle_s)
        super().setup()
        self.rfile.close()  # the plain socket file: reads go through the deadlines instead
        self.rfile = io.BufferedReader(_DeadlineSocket(self.request, self))

    @property
    def phase_limit(self) -> str:
        """The setting that bounds the current phase, for messages."""
        if self.phase == "body":
            return f"{self.server.config.body_timeout_s:g} s (http.body_timeout_s)"
        return f"{self.header_s:g} s (http.header_timeout_s)"

    def handle_one_request(self) -> None:
        self.phase, self.deadline = "headers", None  # armed by the request's first byte
        super().handle_one_request()

    # every method goes through one place
    def do_GET(self) -> None:
        self._serve()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = do_GET

    def _serve(self) -> None:
        path, _, _query = self.path.partition("?")
        self.request.settimeout(self.idle_s)  # not what was left of the header deadline
        if self.reserve:
            self.close_connection = True  # one request per reserve connection
            if path not in HEALTH_PATHS or self.command != "GET":
                self._answer(HttpAnswer(503, _error_json(self.server.full_message(
                    self.client_address))), close=True)
                return
        self.server.busy(self, True)
        try:
            try:
                body = self._body()
                header_length = self._header_length(len(body))
                self._bound_json(body, header_length)
            except _Refusal as refusal:
                self._answer(HttpAnswer(refusal.status, _error_json(str(refusal))),
                             close=refusal.close)
                if refusal.close and refusal.status != 408:
                    self._drain()
                return
            if path == "/metrics" and self.server.metrics is not None:
                answer = self._metrics() if self.command == "GET" else \
                    HttpAnswer(405, _error_json("only GET is allowed on /metrics"))
            else:
                peer = self.client_address
                routes = self.server.routes
                answer = routes.handle(HttpRequest(
                    self.command, path, body, header_length,
                    f"http:{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "http",
                    connection_caller(self.connection),
                    self.headers.get("traceparent") if routes.tracing.active else None))
            self._answer(answer)
        finally:
            self.server.busy(self, False)

    def _metrics(self) -> HttpAnswer:
        from edge_agent.frontends.http.prometheus import CONTENT_TYPE

        assert self.server.metrics is not None
        try:
            return HttpAnswer(200, self.server.scrape(), CONTENT_TYPE)
        except Exception as exc:
            log.exception("rendering /metrics failed")
            return error_answer(exc)

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            raise _Refusal(411, "chunked request bodies are not accepted; send Content-Length",
                           close=True)
        text = self.headers.get("Content-Length")
        if text is None:  # no Content-Length, not chunked: no body (RFC 9112 6.3)
            return b""
        length = _decimal(text)
        if length is None:
            raise _Refusal(400, f"Content-Length {text[:40]!r} is not a number (ASCII digits)",
                           close=True)
        config = self.server.config
        limit = config.max_body_bytes
        if length > limit:
            raise _Refusal(413, f"the request body is {length} bytes; at most {limit} are "
                                "accepted (http.max_body_bytes)", close=True)
        if not length:
            return b""
        self.phase, self.deadline = "body", time.monotonic() + config.body_timeout_s
        try:
            encoding = self.headers.get("Content-Encoding", "").strip().lower()
            if encoding and encoding != "identity":
                return _inflate(self.rfile, length, encoding, limit, config.max_inflate_ratio)
            body = self.rfile.read(length)
        except TimeoutError:
            raise _Refusal(408, f"the request body did not arrive within {self.phase_limit}",
                           close=True) from None
        finally:
            self.phase, self.deadline = "answer", None
            self.request.settimeout(self.idle_s)  # writing the answer: the idle timeout
        if len(body) != length:
            raise _Refusal(400, f"the connection closed after {len(body)} of {length} body "
                                "bytes", close=True)
        return body

    def _bound_json(self, body: bytes, header_length: int | None) -> None:
        """Refuse (413) a JSON part with more values or nesting than the settings allow,
        before anything parses it."""
        if not body:
            return
        config = self.server.config
        try:
            scan(memoryview(body)[:len(body) if header_length is None else header_length],
                 config.max_json_elements, config.max_json_depth)
        except JsonTooLarge as exc:
            raise _Refusal(exc.status, str(exc)) from None

    def _drain(self) -> None:
        """Before closing on a refused body, read (and drop) what the client is still sending
        for a short while, so that it gets to read the answer instead of a reset."""
        with contextlib.suppress(OSError):
            self.wfile.flush()
            self.request.shutdown(socket.SHUT_WR)
            self.request.settimeout(DRAIN_S)
            deadline = time.monotonic() + DRAIN_S
            left = DRAIN_BYTES
            while left > 0 and time.monotonic() < deadline:
                chunk = self.request.recv(min(left, 1 << 16))
                if not chunk:
                    break
                left -= len(chunk)

    def _header_length(self, size: int) -> int | None:
        text = self.headers.get(HEADER_LENGTH)
        if text is None:
            return None
        value = _decimal(text)
        if value is None:
            raise _Refusal(400, f"{HEADER_LENGTH} {text[:40]!r} is not a number")
        if value > size:
            raise _Refusal(400, f"{HEADER_LENGTH} is {value} but the body holds only "
                                f"{size} bytes")
        return value

    def _answer(self, answer: HttpAnswer, close: bool = False) -> None:
        if close:
            self.close_connection = True
        head = [f"HTTP/1.1 {answer.status} {_phrase(answer.status)}",
                f"Server: {_SERVER_NAME}", f"Content-Type: {answer.content_type}",
                f"Content-Length: {len(answer.body)}"]
        head += [f"{k}: {v}" for k, v in answer.headers]
        if self.close_connection:
            head.append("Connection: close")
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
        self.wfile.write(data + answer.body if self.command != "HEAD" else data)

    def handle_expect_100(self) -> bool:
        """Answer ``Expect: 100-continue`` with 413 instead when the body is over the limit."""
        length = _decimal(self.headers.get("Content-Length"))
        limit = self.server.config.max_body_bytes
        if length is not None and length > limit:
            self._answer(HttpAnswer(413, _error_json(
                f"the request body is {length} bytes; at most {limit} are accepted "
                "(http.max_body_bytes)")), close=True)
            return False
        return super().handle_expect_100()

    def send_error(self, code: int, message: str | None = None,
                   explain: str | None = None) -> None:
        """Errors found by http.server itself (bad request line, headers too long, ...)."""
        self.close_connection = True
        text = message or _phrase(code)
        with contextlib.suppress(OSError):
            self._answer(HttpAnswer(code, _error_json(text)), close=True)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)


def _peer(client_address: Any) -> str:
    return str(client_address[0]) if isinstance(client_address, tuple) else "local"


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def _error_json(message: str) -> bytes:
    import json

    return json.dumps({"error": message}).encode()


class _Server(socketserver.ThreadingMixIn, HTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], family: socket.AddressFamily,
                 config: HttpConfig, routes: KServeRoutes, metrics: MetricsRenderer | None
                 ) -> None:
        self.address_family = family
        self.config = config
        self.routes = routes
        self.metrics = metrics
        self._lock = threading.Lock()
        self._connections: dict[socket.socket, bool] = {}  # connection -> mid-request
        self._peers: dict[str, int] = {}  # client address -> connections served (not reserve)
        self._reserve: dict[socket.socket, str] = {}  # reserve connection -> its address
        self._evicted: set[socket.socket] = set()  # reserve connections given up, ending
        self._scrape_lock = threading.Lock()
        self._scraped: tuple[float, bytes] | None = None
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind looks the host name up (getfqdn): slow without DNS; skip it
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)

    def process_request(self, request: Any, client_address: Any) -> None:
        peer = _peer(client_address)
        config = self.config
        with self._lock:
            served = len(self._connections) - len(self._reserve) - len(self._evicted)
            full = (served >= config.max_connections
                    or self._peers.get(peer, 0) >= config.max_connections_per_peer)
            if full and len(self._reserve) >= RESERVE_CONNECTIONS:
                self._evict_waiting()
            refused = full and len(self._reserve) >= RESERVE_CONNECTIONS
            if not refused:
                self._connections[request] = False
                if full:
                    self._reserve[request] = peer
                else:
                    self._peers[peer] = self._peers.get(peer, 0) + 1
        if full:
            throttle.warning("http-full", "HTTP: %s a connection from %s: %s",
                             "refused" if refused else "health checks only on",
                             client_address, self.full_message(client_address))
        if refused:
            with contextlib.suppress(OSError):
                message = _error_json(self.full_message(client_address))
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: "
                                b"application/json\r\nConnection: close\r\nContent-Length: "
                                + str(len(message)).encode() + b"\r\n\r\n" + message)
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._connections.pop(request, None)
                if request in self._evicted:
                    self._evicted.discard(request)
                elif self._reserve.pop(request, None) is None:
                    peer = _peer(client_address)
                    left = self._peers.get(peer, 0) - 1
                    if left > 0:
                        self._peers[peer] = left
                    else:
                        self._peers.pop(peer, None)

    def _evict_waiting(self) -> None:
        """Give up the oldest reserve connection still waiting for its request (lock held)."""
        for conn in self._reserve:
            if not self._connections.get(conn, False):
                del self._reserve[conn]
                self._evicted.add(conn)
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
                return

    def is_reserve(self, request: Any) -> bool:
        """Whether ``request`` was taken beyond the caps (health checks only)."""
        with self._lock:
            return request in self._reserve

    def full_message(self, client_address: Any) -> str:
        """Why a connection from ``client_address`` is not served now."""
        config = self.config
        with self._lock:
            peer_full = self._peers.get(_peer(client_address), 0) >= \
                config.max_connections_per_peer
        if peer_full:
            return (f"the agent serves its limit of {config.max_connections_per_peer} HTTP "
                    "connections from one address (http.max_connections_per_peer); close idle "
                    "connections or retry shortly")
        return (f"the agent serves its limit of {config.max_connections} HTTP connections "
                "(http.max_connections); retry shortly")

    def scrape(self) -> bytes:
        """``/metrics``: rendered at most once per ``metrics_cache_s`` and by one thread at a
        time (concurrent scrapes wait for that one render and share it)."""
        ttl = self.config.metrics_cache_s
        with self._scrape_lock:
            cached = self._scraped
            if cached is not None and time.monotonic() - cached[0] < ttl:
                return cached[1]
            assert self.metrics is not None
            page: bytes = self.metrics.render()
            self._scraped = (time.monotonic(), page)
            return page

    def busy(self, handler: _Handler, busy: bool) -> None:
        with self._lock:
            if handler.connection in self._connections:
                self._connections[handler.connection] = busy

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a broken connection (reset, timeout) is routine; anything else is logged, once a
        # while, without a traceback on stderr
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError | TimeoutError):
            log.debug("HTTP: connection from %s: %s", client_address, error)
            return
        throttle.warning("http-error", "HTTP: a connection from %s ended with an error: %r",
                         client_address, error)
        log.debug("HTTP: connection error", exc_info=True)

    def close_connections(self, grace: float) -> None:
        """Close idle connections now and busy ones once done (or after ``grace`` s)."""
        deadline = time.monotonic() + grace
        while True:
            with self._lock:
                pending = dict(self._connections)
            late = time.monotonic() >= deadline
            for conn, busy in pending.items():
                if not busy or late:
                    with contextlib.suppress(OSError):
                        conn.shutdown(socket.SHUT_RDWR)
            if not pending or late:
                return
            time.sleep(0.02)


class HttpFrontEnd:
    """The KServe v2 REST front end on one port: ``start()``, then ``stop(grace)``."""

    def __init__(self, config: HttpConfig, routes: KServeRoutes,
                 metrics: MetricsRenderer | None = None) -> None:
        self.config = config
        self.routes = routes
        self.metrics = metrics
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.address: str | None = None

    def start(self) -> str:
        """Bind ``config.listen`` and serve on a thread; returns HOST:PORT with the real port."""
        listen = self.config.listen
        if listen is None:
            raise ConfigError("http.listen is not set")
        host, _, port = listen.rpartition(":")
        host = host.strip("[]")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            server = _Server((host, int(port)), family, self.config, self.routes, self.metrics)
        except OSError as exc:
            hint = ("another process holds the port: stop it or pick another port"
                    if exc.errno == 98 else "check the host and port")
            raise ConfigError(f"--http (http.listen): cannot listen on {listen}: "
                              f"{exc.strerror or exc}; {hint}") from None
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="http-accept", daemon=True)
        self._thread.start()
        bound = server.server_address[1]
        self.address = f"[{host}]:{bound}" if family == socket.AF_INET6 else f"{host}:{bound}"
        return self.address

    def stop(self, grace: float = 5.0) -> None:
        """Stop accepting, let requests in flight finish within ``grace`` s, close."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        server.close_connections(grace)
        if self._thread is not None:
            self._thread.join(5)
        if self.metrics is not None and hasattr(self.metrics, "close"):
            self.metrics.close()
