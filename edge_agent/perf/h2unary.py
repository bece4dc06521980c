"""One gRPC unary call at a time on one HTTP/2 connection, in plain Python: the load
generator's cheapest call path.

grpcio's synchronous call costs ~300 µs of CPU per call on the reference VM (its event
engine's threads and completion queue hand each answer between threads), which on a machine
the client shares with the server shows up in what it measures. Here the request is framed
once (HEADERS as literal HPACK fields, DATA frames over the serialized message, which is never
copied) and written with ``sendmsg``; the answer is read on the calling thread and only its
frame headers are parsed: the call succeeded when the server sent a message (a DATA frame)
before ending the stream, failed when it ended the stream with trailers only (how gRPC servers
refuse a unary call) or reset it. The response's header blocks are never decoded (no HPACK
decoder needed, as nothing here reads them), so a failure's status and message come from
asking again through grpcio (:mod:`edge_agent.perf.workers` does, once).

Flow control: the connection and every stream get a 2 GiB receive window (topped up as it is
used); sending honours the server's windows and frame size.
"""

from __future__ import annotations

import socket
import struct

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    0, 1, 3, 4, 6, 7, 8, 9)
END_STREAM, ACK, END_HEADERS = 0x1, 0x1, 0x4
BIG_WINDOW = 2**31 - 1
DEFAULT_WINDOW = 65535
IOV_BATCH = 512  # buffers per sendmsg (IOV_MAX is 1024 on Linux)


class UnaryCallFailed(Exception):
    """The server answered the call with no message (trailers only) or reset it; or the
    connection failed (then ``connection`` is True)."""

    def __init__(self, message: str, *, connection: bool = False) -> None:
        super().__init__(message)
        self.connection = connection


def frame_header(kind: int, flags: int, stream: int, length: int) -> bytes:
    return struct.pack(">I", length)[1:] + bytes((kind, flags)) + struct.pack(">I", stream)


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return frame_header(kind, flags, stream, len(payload)) + payload


def _literal(name: bytes, value: bytes) -> bytes:
    """An HPACK "literal header field without indexing, new name" (no Huffman)."""
    return b"\x00" + _hpack_int(len(name)) + name + _hpack_int(len(value)) + value


def _hpack_int(n: int, prefix_bits: int = 7) -> bytes:
    limit = (1 << prefix_bits) - 1
    if n < limit:
        return bytes((n,))
    out = [limit]
    n -= limit
    while n >= 128:
        out.append(n % 128 + 128)
        n //= 128
    out.append(n)
    return bytes(out)


def parse_target(target: str) -> tuple[int, str | tuple[str, int], str]:
    """``unix:/path``, ``unix:///path`` or ``HOST:PORT`` as (family, address, authority)."""
    if target.startswith("unix:"):
        path = target.removeprefix("unix:")
        path = path.removeprefix("//") if path.startswith("///") else path
        return socket.AF_UNIX, path, "localhost"
    host, _, port = target.rpartition(":")
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return family, (host, int(port)), target


class H2Unary:
    """Unary calls of ``method`` on one connection to ``target``, one at a time."""

    def __init__(self, target: str, method: str, timeout_s: float = 300.0) -> None:
        self.family, self.address, authority = parse_target(target)
        self.timeout_s = timeout_s
        self.header_block = b"".join(_literal(n, v) for n, v in (
            (b":method", b"POST"), (b":scheme", b"http"), (b":path", method.encode()),
            (b":authority", authority.encode()), (b"content-type", b"application/grpc"),
            (b"te", b"trailers"), (b"user-agent", b"edge-agent-perf")))
        self.sock: socket.socket | None = None
        self.buf = bytearray()
        self.stream = -1
        self.max_frame = 16384
        self.send_window = DEFAULT_WINDOW  # the connection's, as the server grants it
        self.initial_stream_window = DEFAULT_WINDOW
        self.stream_window = DEFAULT_WINDOW
        self.received = 0  # bytes of DATA since the last connection WINDOW_UPDATE we sent

    def connect(self) -> None:
        sock = socket.socket(self.family, socket.SOCK_STREAM)
        sock.settimeout(self.timeout_s)
        try:
            sock.connect(self.address)
            if self.family != socket.AF_UNIX:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.sendall(PREFACE + frame(SETTINGS, 0, 0, struct.pack(
                ">HIHI", 0x2, 0, 0x4, BIG_WINDOW))  # no push; 2 GiB stream windows
                + frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", BIG_WINDOW - DEFAULT_WINDOW)))
        except OSError as exc:
            sock.close()
            raise UnaryCallFailed(f"cannot connect to {self.address}: {exc}",
                             connection=True) from None
        self.sock, self.buf, self.stream, self.going_away = sock, bytearray(), -1, False
        self.send_window = DEFAULT_WINDOW
        self.initial_stream_window = DEFAULT_WINDOW
        self.received = 0

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def __call__(self, message: bytes) -> None:
        """One call carrying the serialized ``message``; returns when it succeeded, raises
        :class:`UnaryCallFailed` otherwise (the connection is reopened by the next call after a
        connection failure)."""
        if self.sock is None:
            self.connect()
        try:
            self._call(message)
            if self.going_away:
                self.close()
        except (OSError, struct.error) as exc:
            self.close()
            raise UnaryCallFailed(f"connection to {self.address}: {type(exc).__name__}: {exc}",
                             connection=True) from None
        except UnaryCallFailed as exc:
            if exc.connection:
                self.close()
            raise

    def _call(self, message: bytes) -> None:
        assert self.sock is not None
        self.stream += 2
        if self.stream > 2**31 - 1:  # streams used up: a new connection
            self.close()
            self.connect()
            self.stream = 1
        sid = self.stream
        self.stream_window = self.initial_stream_window
        prefix = b"\x00" + struct.pack(">I", len(message))  # gRPC: uncompressed, length
        total = len(prefix) + len(message)
        parts: list[bytes | memoryview] = [frame(HEADERS, END_HEADERS, sid, self.header_block)]
        if self.received > 1 << 30:  # give back what the answers used of the connection
            parts.append(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", self.received)))
            self.received = 0
        view = memoryview(message)
        sent = 0
        while True:
            room = min(self.max_frame, self.send_window, self.stream_window, total - sent)
            if room > 0 or sent == total:
                last = sent + room == total
                parts.append(frame_header(DATA, END_STREAM if last else 0, sid, room))
                if sent < len(prefix):
                    parts.append(prefix[sent:sent + room])
                parts.append(view[max(0, sent - len(prefix)):max(0, sent + room - len(prefix))])
                sent += room
                self.send_window -= room
                self.stream_window -= room
                if last:
                    break
                continue
            self._send(parts)  # out of window: wait for the server's grant
            parts = []
            if self._read_frame(sid):
                raise UnaryCallFailed("the server ended the call before reading the request")
        self._send(parts)
        self._answer(sid)

    def _send(self, parts: list[bytes | memoryview]) -> None:
        """Write ``parts`` in order without joining them (the message is not copied)."""
        assert self.sock is not None
        while parts:
            batch = parts[:IOV_BATCH]
            n = self.sock.sendmsg(batch)
            done = 0
            while done < len(batch) and n >= len(batch[done]):
                n -= len(batch[done])
                done += 1
            del parts[:done]
            if n:
                parts[0] = memoryview(parts[0])[n:]

    def _answer(self, sid: int) -> None:
        self.got_message = False
        while not self._read_frame(sid):
            pass
        if not self.got_message:
            raise UnaryCallFailed("the server answered without a message (an error status)")

    def _read_frame(self, sid: int) -> bool:
        """Read and handle one frame; True when stream ``sid`` has ended."""
        assert self.sock is not None
        while len(self.buf) < 9:
            self._fill()
        length = int.from_bytes(self.buf[:3], "big")
        kind, flags = self.buf[3], self.buf[4]
        stream = int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF
        while len(self.buf) < 9 + length:
            self._fill()
        payload = bytes(self.buf[9:9 + length])
        del self.buf[:9 + length]
        if kind == DATA:
            self.received += length
            if stream == sid and length >= 5:
                self.got_message = True
            return stream == sid and bool(flags & END_STREAM)
        if kind in (HEADERS, CONTINUATION):
            if kind == HEADERS:
                self.ending = bool(flags & END_STREAM)
            return stream == sid and self.ending and bool(flags & END_HEADERS)
        if kind == SETTINGS and not flags & ACK:
            for i in range(0, len(payload) - 5, 6):
                key, value = struct.unpack_from(">HI", payload, i)
                if key == 0x4:
                    self.stream_window += value - self.initial_stream_window
                    self.initial_stream_window = value
                elif key == 0x5:
                    self.max_frame = value
            self.sock.sendall(frame(SETTINGS, ACK, 0))
        elif kind == PING and not flags & ACK:
            self.sock.sendall(frame(PING, ACK, 0, payload))
        elif kind == WINDOW_UPDATE:
            grant = struct.unpack(">I", payload)[0] & 0x7FFFFFFF
            if stream == 0:
                self.send_window += grant
            elif stream == sid:
                self.stream_window += grant
        elif kind == RST_STREAM and stream == sid:
            raise UnaryCallFailed(f"the server reset the call (HTTP/2 error "
                             f"{struct.unpack('>I', payload)[0]})")
        elif kind == GOAWAY:
            self.going_away = True  # closed after this call; the next one reconnects
            last = struct.unpack_from(">I", payload)[0] & 0x7FFFFFFF
            if last < sid:
                raise UnaryCallFailed("the server closed the connection (GOAWAY)", connection=True)
        return False

    got_message = False
    ending = False
    going_away = False

    def _fill(self) -> None:
        assert self.sock is not None
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise UnaryCallFailed("the server closed the connection", connection=True)
        self.buf += chunk
